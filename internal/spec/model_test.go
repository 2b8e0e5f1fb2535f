package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseModelAccepts(t *testing.T) {
	f, err := ParseModel(readFile(t, "testdata/model-custom.yml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &ModelFile{
		Schema: "https://azuremlschemas.azureedge.net/latest/model.schema.json",
		Name:   "sklearn-iris", Version: "1", Path: "./model", Type: "mlflow_model",
		Description: "an iris classifier trained by job amber_keel",
		Tags:        map[string]string{"framework": "sklearn"},
		Properties:  map[string]string{"accuracy": "0.97"},
	}
	if d := cmp.Diff(want, f); d != "" {
		t.Errorf("ParseModel (-want +got):\n%s", d)
	}

	// type defaults to custom_model, as in Azure; version may be left out.
	f, err = ParseModel([]byte("name: m\npath: model.pkl\n"), nil)
	if err != nil || f.Type != "custom_model" || f.Version != "" {
		t.Errorf("minimal model: %+v, %v; want type custom_model and no version", f, err)
	}
	// --set overrides the file and can make a model from nothing.
	f, err = ParseModel([]byte("name: m\npath: model.pkl\n"), []string{"version=7", "name=other", "type=triton_model"})
	if err != nil || f.Version != "7" || f.Name != "other" || f.Type != "triton_model" {
		t.Errorf("with --set: %+v, %v", f, err)
	}
	if _, err := ParseModel(nil, []string{"name=m", "path=."}); err != nil {
		t.Errorf("a model from --set alone: %v", err)
	}
}

func TestParseModelRefuses(t *testing.T) {
	for in, want := range map[string][]string{
		"path: m\n":                           {"name", "needs a name"},
		"name: bad name\npath: m\n":           {"name", "line 1", "not a valid name"},
		"name: a\npath: m\nversion: 1/2\n":    {"version", "line 3", "not a valid version"},
		"name: a\npath: m\nversion: latest\n": {"version", "a label"},
		"name: a\n":                           {"path", "needs its files"},
		"name: a\npath: m\ntype: keras\n":     {"type", "line 3", "custom_model, mlflow_model and triton_model"},
		"name: a\npath: m\nflavour: x\n":      {"flavour", "line 3", "unknown field"},
		"name: a\npath: m\ntgas: {a: b}\n":    {"tgas", "tags"},
		"name: a\npath: [m]\n":                {"path"},
		"name: a\npath: m\ntags: [a]\n":       {"tags"},
		"":                                    {"empty"},
		"- a\n":                               {"mapping"},
	} {
		_, err := ParseModel([]byte(in), nil)
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
	_, err := ParseModel([]byte("name: a\npath: m\n"), []string{"type=onnx"})
	if err == nil || !strings.Contains(err.Error(), "from --set type=onnx") {
		t.Errorf("bad --set: %v, want it named", err)
	}
}

func TestDecodeModelJSON(t *testing.T) {
	f, err := DecodeModelJSON([]byte(`{"name": "m", "path": "x", "tags": {"a": "b"}}`))
	if err != nil || f.Type != "custom_model" || f.Tags["a"] != "b" {
		t.Errorf("DecodeModelJSON = %+v, %v", f, err)
	}
	for in, want := range map[string]string{
		`{"name": "m", "path": "x", "Type": "custom_model"}`: "Type",
		`{"name": "m", "path": "x", "stage": "prod"}`:        "stage",
		`{"name": "m", "path": "x", "type": "x"}`:            "type",
		`[]`: "JSON object",
	} {
		if _, err := DecodeModelJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %s", in, err, want)
		}
	}
}

func TestParseModelRef(t *testing.T) {
	for ref, want := range map[string][2]string{
		"azureml:iris:3":       {"iris", "3"},
		"azureml:iris@latest":  {"iris", "latest"},
		"iris@latest":          {"iris", "latest"},
		"iris:2.0":             {"iris", "2.0"},
		"azureml:my_model.x:1": {"my_model.x", "1"},
	} {
		n, v, err := ParseModelRef(ref)
		if err != nil || n != want[0] || v != want[1] {
			t.Errorf("ParseModelRef(%q) = %q, %q, %v; want %q, %q", ref, n, v, err, want[0], want[1])
		}
	}
	for ref, want := range map[string]string{
		"iris":         "say which version",
		"azureml:iris": "say which version",
		"azureml://registries/r/models/iris/versions/1": "not supported",
		"bad name@latest": "not a valid model name",
		"iris:1/2":        "not a valid version",
		"@latest":         "not a valid model name",
	} {
		if _, _, err := ParseModelRef(ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseModelRef(%q): got %v, want an error saying %q", ref, err, want)
		}
	}
}

// FuzzParseModel checks that no input makes ParseModel panic, that every
// error is an Errors, and that every model it accepts comes back unchanged
// through the API's JSON.
func FuzzParseModel(f *testing.F) {
	f.Add(readFile(f, "testdata/model-custom.yml"))
	f.Add([]byte("name: a\npath: model.pkl\n"))
	f.Add([]byte("name: a\npath: m\ntype: triton_model\ntags: {x: '1'}\nproperties: {y: z}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseModel(data, nil)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeModelJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if d := cmp.Diff(m, back); d != "" {
			t.Fatalf("JSON round trip (-yaml +json):\n%s", d)
		}
	})
}
