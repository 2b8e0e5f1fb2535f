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

func TestParseEnvironmentRef(t *testing.T) {
	for ref, want := range map[string]EnvironmentRef{
		"azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu@latest":       {Name: "AzureML-sklearn-1.0-ubuntu20.04-py38-cpu", Latest: true},
		"azureml:AzureML-tensorflow-2.4-ubuntu18.04-py37-cuda11-gpu:41": {Name: "AzureML-tensorflow-2.4-ubuntu18.04-py37-cuda11-gpu", Version: "41"},
		"my-env:2.0": {Name: "my-env", Version: "2.0"},
		"azureml://registries/azureml/environments/sklearn-1.5/labels/latest":             {Name: "sklearn-1.5", Latest: true, Registry: "azureml"},
		"azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/versions/41": {Name: "acpt-pytorch-2.2-cuda12.1", Version: "41", Registry: "azureml"},
	} {
		got, err := ParseEnvironmentRef(ref)
		if err != nil {
			t.Errorf("ParseEnvironmentRef(%q): %v", ref, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseEnvironmentRef(%q) (-want +got):\n%s", ref, diff)
		}
		// The written form reads back as the same reference.
		if back, err := ParseEnvironmentRef(got.String()); err != nil || back != got {
			t.Errorf("%q: String() = %q reads back as %+v, %v", ref, got.String(), back, err)
		}
	}
	for ref, want := range map[string]string{
		"sklearn": "azureml:NAME@latest",
		"env:1:2": "not an environment reference",
		"azureml://registries/azureml-meta/environments/x/versions/1": `registry "azureml-meta" is not known`,
		"azureml://registries/azureml/environments/x/labels/default":  "labels/latest",
		"azureml://registries/azureml/environments/x/versions/":       "versions/VERSION",
		"azureml://registries/azureml/environments/a/b/versions/1":    "not an environment reference Ferry knows",
	} {
		_, err := ParseEnvironmentRef(ref)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEnvironmentRef(%q) = %v, want an error containing %q", ref, err, want)
		}
	}
}

func TestEnvironmentFileRef(t *testing.T) {
	j, err := ParseJob([]byte("command: python train.py\nenvironment: file:./env.yml\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Environment.FilePath(); got != "./env.yml" {
		t.Errorf("FilePath = %q, want ./env.yml", got)
	}
	if got := (&Environment{Ref: "azureml:env:1"}).FilePath(); got != "" {
		t.Errorf("FilePath of a registered reference = %q", got)
	}
}

func FuzzParseEnvironmentRef(f *testing.F) {
	for _, s := range []string{"azureml:env:1", "env@latest", "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
		"azureml://registries/azureml/environments/sklearn-1.5/versions/3", "azureml://registries/x/environments//versions/", "file:./env.yml", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		r, err := ParseEnvironmentRef(ref)
		if err != nil {
			return
		}
		if r.Name == "" || r.Latest == (r.Version != "") {
			t.Fatalf("%q parsed to %+v", ref, r)
		}
		if back, err := ParseEnvironmentRef(r.String()); err != nil || back != r {
			t.Fatalf("%q: %q reads back as %+v, %v", ref, r.String(), back, err)
		}
	})
}
