package inferenceserver

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAzureRawHTTPScript: a script written for Azure with @rawhttp and
// AMLResponse runs unchanged: it sees the method, headers, query and raw
// body, and sets the status, headers and body of its answer.
func TestAzureRawHTTPScript(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
import json
from azureml.contrib.services.aml_request import AMLRequest, rawhttp
from azureml.contrib.services.aml_response import AMLResponse

def init():
    pass

@rawhttp
def run(request):
    if request.method == "GET":
        return AMLResponse("use POST, " + request.args.get("who", "nobody"), 200)
    if request.method == "POST":
        body = request.get_data(False)
        out = {"len": len(body), "type": request.headers.get("content-type"),
               "q": request.args.get("x"), "json": request.get_json()}
        return AMLResponse(out, 201, {"X-Model-Version": "3"}, json_str=True)
    return AMLResponse("bad request", 500)
`, nil)
	base := URL(rep.ready(t).Address)
	code, body := get(t, base+"/score?who=me")
	if code != 200 || body != "use POST, me" {
		t.Errorf("GET /score: %d %q", code, body)
	}
	req, _ := http.NewRequest("POST", base+"/score?x=7", strings.NewReader(`{"a": [1, 2]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || resp.Header.Get("X-Model-Version") != "3" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("POST: %d %v", resp.StatusCode, resp.Header)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	want := map[string]any{"len": 13.0, "type": "application/json", "q": "7", "json": map[string]any{"a": []any{1.0, 2.0}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("POST body (-want +got):\n%s", diff)
	}
}

// TestInferenceSchemaScript: a script decorated with inference_schema's
// @input_schema/@output_schema runs unchanged: the body's JSON keys become
// run()'s arguments, converted to the schema's types (numpy arrays where
// the interpreter has numpy).
func TestInferenceSchemaScript(t *testing.T) {
	python := requirePython(t)
	t.Run("standard", func(t *testing.T) {
		rep := startReplica(t, python, `
from inference_schema.schema_decorators import input_schema, output_schema
from inference_schema.parameter_types.standard_py_parameter_type import StandardPythonParameterType

def init():
    pass

@input_schema("data", StandardPythonParameterType([[1.0, 2.0]]))
@input_schema("scale", StandardPythonParameterType(1.0))
@output_schema(StandardPythonParameterType([3.0]))
def run(data, scale=1.0):
    return [sum(row) * scale for row in data]
`, nil)
		base := URL(rep.ready(t).Address)
		if resp, body := post(t, base+"/score", `{"data": [[1, 2], [3, 4]], "scale": 10}`); resp.StatusCode != 200 || body != "[30, 70]" {
			t.Errorf("score: %d %s", resp.StatusCode, body)
		}
		if resp, body := post(t, base+"/score", `[1, 2]`); resp.StatusCode != 400 || !strings.Contains(body, "data") {
			t.Errorf("a body that is not an object: %d %s, want 400 naming the inputs", resp.StatusCode, body)
		}
	})
	t.Run("numpy", func(t *testing.T) {
		python := pythonWith(t, "numpy")
		rep := startReplica(t, python, `
import numpy as np
from inference_schema.schema_decorators import input_schema, output_schema
from inference_schema.parameter_types.numpy_parameter_type import NumpyParameterType

def init():
    pass

@input_schema("data", NumpyParameterType(np.array([[1.0, 2.0, 3.0]])))
@output_schema(NumpyParameterType(np.array([6.0])))
def run(data):
    assert isinstance(data, np.ndarray) and data.dtype == np.float64, (type(data), data)
    return data.sum(axis=1)
`, nil)
		base := URL(rep.ready(t).Address)
		if resp, body := post(t, base+"/score", `{"data": [[1, 2, 3], [4, 5, 6]]}`); resp.StatusCode != 200 || body != "[6.0, 15.0]" {
			t.Errorf("score: %d %s", resp.StatusCode, body)
		}
		if resp, body := post(t, base+"/score", `{"data": [[1, 2]]}`); resp.StatusCode != 500 || !strings.Contains(body, "shape") {
			t.Errorf("wrong shape: %d %s, want 500 naming the shape", resp.StatusCode, body)
		}
	})
	t.Run("nested", func(t *testing.T) {
		python := pythonWith(t, "numpy")
		// The shape Azure's docs ask for to get a conforming swagger: a
		// nested Inputs and optional GlobalParameters.
		rep := startReplica(t, python, `
import numpy as np
from inference_schema.schema_decorators import input_schema, output_schema
from inference_schema.parameter_types.numpy_parameter_type import NumpyParameterType
from inference_schema.parameter_types.standard_py_parameter_type import StandardPythonParameterType

def init():
    pass

@input_schema(param_name="Inputs", param_type=StandardPythonParameterType({"data": NumpyParameterType(np.array([[0.5, 1.5]]))}))
@input_schema(param_name="GlobalParameters", param_type=StandardPythonParameterType(1.0))
@output_schema(output_type=StandardPythonParameterType({"Results": [1.0]}))
def run(Inputs, GlobalParameters=1.0):
    data = Inputs["data"]
    assert isinstance(data, np.ndarray), type(data)
    return {"Results": (data.sum(axis=1) * GlobalParameters).tolist()}
`, nil)
		base := URL(rep.ready(t).Address)
		if resp, body := post(t, base+"/score", `{"Inputs": {"data": [[1, 2], [3, 4]]}, "GlobalParameters": 2}`); resp.StatusCode != 200 || body != `{"Results": [6.0, 14.0]}` {
			t.Errorf("score: %d %s", resp.StatusCode, body)
		}
	})
}

// TestScriptFolderAndShimOrder: the script imports a module beside it (its
// folder is first on sys.path), its prints reach the log and not the
// status stream, and an installed package wins over Ferry's stand-in of
// the same name.
func TestScriptFolderAndShimOrder(t *testing.T) {
	python := requirePython(t)
	site := t.TempDir()
	pkg := filepath.Join(site, "inference_schema")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"__init__.py":          "",
		"schema_decorators.py": "REAL = True\ndef input_schema(*a, **k):\n    return lambda f: f\n",
	} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := startReplica(t, python, `
import helper
from inference_schema import schema_decorators
def init():
    print("init says hello")
def run(raw_data):
    return {"helper": helper.NAME, "real": getattr(schema_decorators, "REAL", False)}
`, func(r *Replica) {
		if err := os.WriteFile(filepath.Join(r.CodeDir, "helper.py"), []byte("NAME = 'beside'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.Env = []string{"PYTHONPATH=" + site}
	})
	base := URL(rep.ready(t).Address)
	if resp, body := post(t, base+"/score", "x"); resp.StatusCode != 200 || body != `{"helper": "beside", "real": true}` {
		t.Errorf("score: %d %s", resp.StatusCode, body)
	}
	rep.waitLog(t, "init says hello")
	if strings.Contains(rep.stdout.String(), "init says hello") {
		t.Errorf("the script's print went to stdout, not the log:\nstdout:\n%s", rep.stdout)
	}
}
