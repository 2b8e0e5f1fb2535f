package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseEnvironmentAccepts(t *testing.T) {
	f, err := ParseEnvironment(readFile(t, "testdata/environment-conda.yml"))
	if err != nil {
		t.Fatal(err)
	}
	want := &EnvironmentFile{
		Schema: "https://azuremlschemas.azureedge.net/latest/environment.schema.json",
		Name:   "sklearn-env", Version: "1", Description: "scikit-learn on the curated base image",
		Image: "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest", CondaFile: "conda.yml",
	}
	if d := cmp.Diff(want, f); d != "" {
		t.Errorf("ParseEnvironment (-want +got):\n%s", d)
	}
	if e := f.Environment(); e.Image != want.Image || e.CondaFile != "conda.yml" || e.Name != "sklearn-env" {
		t.Errorf("Environment() = %+v", e)
	}
	for _, ok := range []string{
		"name: a\npython: {requirements: r.txt, version: '3.11'}\n",
		"name: a\nbuild: {path: docker, dockerfile_path: Dockerfile.gpu}\n",
		"name: a\nconda_file: env.yml\nos_type: Linux\n",
		"name: a\nuser_managed: true\ninterpreter_path: /usr/bin/python3\n",
	} {
		if _, err := ParseEnvironment([]byte(ok)); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

func TestParseEnvironmentRefuses(t *testing.T) {
	for in, want := range map[string][]string{
		"image: x\n":                             {"name", "needs a name"},
		"name: bad name\nimage: x\n":             {"name", "not a valid name"},
		"name: a\nversion: 1/2\nimage: x\n":      {"version", "not a valid version"},
		"name: a\n":                              {"say how to make the environment"},
		"name: a\nimage: x\nbuild: {path: d}\n":  {"use only one of"},
		"name: a\npython: {version: '3.11'}\n":   {"python.requirements", "needs requirements"},
		"name: a\nbuild: {dockerfile_path: D}\n": {"build.path"},
		"name: a\nimage: x\nos_type: windows\n":  {"os_type", "linux"},
		"name: a\nimgae: x\n":                    {"imgae", "image"},
		"name: a\nimage: [x]\n":                  {"image"},
	} {
		_, err := ParseEnvironment([]byte(in))
		var es Errors
		if !errors.As(err, &es) {
			t.Errorf("%q: got %v, want Errors", in, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", in, err, w)
			}
		}
	}
}

// FuzzParseEnvironment checks that no input makes ParseEnvironment panic,
// and that every environment it accepts comes back unchanged through the
// API's JSON.
func FuzzParseEnvironment(f *testing.F) {
	f.Add(readFile(f, "testdata/environment-conda.yml"))
	f.Add([]byte("name: a\nbuild: {path: docker}\n"))
	f.Add([]byte("name: a\npython: {requirements: r.txt}\ninference_config: {liveness_route: {port: 5001, path: /}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEnvironment(data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeEnvironmentJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if d := cmp.Diff(e, back); d != "" {
			t.Fatalf("JSON round trip (-yaml +json):\n%s", d)
		}
	})
}
