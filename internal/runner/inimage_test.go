package runner

import (
	"testing"

	"github.com/ferry-ml/ferry/internal/environment"
)

// A runner told that its pod is its environment's image runs the job in
// place: for an image environment named so, and for one built for it
// (its tag by the environment's hash); never for another environment.
func TestInEnvironmentImage(t *testing.T) {
	img := &environment.Spec{Kind: environment.KindImage, Image: "python:3.12"}
	build := &environment.Spec{Kind: environment.KindBuild, DockerfilePath: "Dockerfile", Context: "abc"}
	conda := &environment.Spec{Kind: environment.KindImage, Image: "python:3.12", CondaFile: "conda.yml", Context: "abc"}
	other := &environment.Spec{Kind: environment.KindBuild, DockerfilePath: "Dockerfile", Context: "def"}
	py := &environment.Spec{Kind: environment.KindPython, Requirements: "r.txt", Context: "abc"}
	for _, tc := range []struct {
		env  *environment.Spec
		v    string
		want bool
	}{
		{img, "python:3.12", true},
		{img, "", false},
		{img, "python:3.11", false},
		{build, environment.ImageTag(build.Hash()), true},
		{conda, environment.ImageTag(conda.Hash()), true},
		{conda, "python:3.12", false}, // the base, without the conda file
		{build, environment.ImageTag(other.Hash()), false},
		{py, environment.ImageTag(py.Hash()), false},
	} {
		if got := inEnvironmentImage(tc.env, tc.v); got != tc.want {
			t.Errorf("inEnvironmentImage(%s, %q) = %v, want %v", tc.env.Describe(), tc.v, got, tc.want)
		}
	}
}
