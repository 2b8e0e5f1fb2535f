package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"path/filepath"
	"strings"
	"testing"
)

// batch-deployment create and batch-endpoint invoke refuse what they can
// tell is wrong before they upload anything, naming the field: the
// endpoint, the compute, the registered model, the code folder, a model
// that needs a scoring script, a deployment that is not there, an
// endpoint without a default.
func TestBatchRefusesBeforeUploading(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"endpoint.yml": "name: scorer\n",
		"src/score.py": "def init():\n    pass\n\ndef run(mini_batch):\n    return mini_batch\n",
		"data/a.txt":   "1",
		"model/w.txt":  "1",
	})
	if r := s.ferry(t, "batch-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml")); r.code != 0 {
		t.Fatalf("batch-endpoint create: %s", r)
	}
	code := "code_configuration:\n  code: src\n  scoring_script: score.py\n"
	for _, c := range []struct{ what, file, want string }{
		{"an endpoint not made", "name: blue\nendpoint_name: nope\ncompute: local\n" + code, "d.yml:2: endpoint_name: batch endpoint nope does not exist"},
		{"a compute not made", "name: blue\nendpoint_name: scorer\ncompute: azureml:ghost-cluster\n" + code, "d.yml:3: compute:"},
		{"an unknown model", "name: blue\nendpoint_name: scorer\ncompute: local\nmodel: azureml:ghost:1\n" + code, "d.yml:4: model:"},
		{"no code folder", "name: blue\nendpoint_name: scorer\ncompute: local\ncode_configuration:\n  code: nosuch\n  scoring_script: score.py\n", "code_configuration.code: nosuch does not exist"},
		{"a bad setting", "name: blue\nendpoint_name: scorer\ncompute: local\nsettings:\n  output_action: everything\n" + code, "settings.output_action (line 5)"},
	} {
		writeFiles(t, dir, map[string]string{"d.yml": c.file})
		r := s.ferry(t, "batch-deployment", "create", "-f", filepath.Join(dir, "d.yml"))
		if r.code == 0 {
			t.Errorf("%s: created: %s", c.what, r)
			continue
		}
		mustContain(t, c.what, r.stderr, c.want)
		if strings.Contains(r.stderr, "uploaded") || strings.Contains(r.stderr, "nothing to upload") {
			t.Errorf("%s: uploaded before it refused: %s", c.what, r.stderr)
		}
	}

	// An inline model that is not an mlflow_model needs a scoring script:
	// the workspace says so (after the upload, since it is the
	// workspace that knows a registered model's type).
	writeFiles(t, dir, map[string]string{"d.yml": "name: blue\nendpoint_name: scorer\ncompute: local\nmodel:\n  path: model\n"})
	if r := s.ferry(t, "batch-deployment", "create", "-f", filepath.Join(dir, "d.yml")); r.code == 0 || !strings.Contains(r.stderr, "code_configuration: is required: the model is custom_model") {
		t.Errorf("a custom model without a script: %s", r)
	}

	// An inline model with an MLmodel file is an MLflow model, which
	// needs no script (Azure's no-code MLflow deployments).
	writeFiles(t, dir, map[string]string{"mlflow-model/MLmodel": "flavors: {}\n",
		"mlflow.yml": "name: auto\nendpoint_name: scorer\ncompute: local\nmodel:\n  path: mlflow-model\n"})
	if r := s.ferry(t, "batch-deployment", "create", "-f", filepath.Join(dir, "mlflow.yml")); r.code != 0 || !strings.Contains(r.stdout, "Ferry's MLflow scoring") {
		t.Errorf("an MLflow model without a script: %s", r)
	}
	if r := s.ferry(t, "batch-deployment", "delete", "auto", "-e", "scorer"); r.code != 0 {
		t.Errorf("deleting the only deployment: %s", r)
	}

	r := s.ferry(t, "batch-endpoint", "invoke", "scorer", "--input", filepath.Join(dir, "data"))
	if r.code == 0 || !strings.Contains(r.stderr, "has no default deployment") || strings.Contains(r.stderr, "uploaded") {
		t.Errorf("invoking an endpoint with no deployment: %s", r)
	}
	writeFiles(t, dir, map[string]string{"d.yml": "name: blue\nendpoint_name: scorer\ncompute: local\n" + code})
	if r := s.ferry(t, "batch-deployment", "create", "-f", filepath.Join(dir, "d.yml")); r.code != 0 {
		t.Fatalf("batch-deployment create: %s", r)
	}
	r = s.ferry(t, "batch-endpoint", "invoke", "scorer", "--input", filepath.Join(dir, "data"), "--deployment-name", "green")
	if r.code == 0 || !strings.Contains(r.stderr, "--deployment-name: batch endpoint scorer has no deployment green") || strings.Contains(r.stderr, "uploaded") {
		t.Errorf("invoking a deployment that is not there: %s", r)
	}
	for _, args := range [][]string{
		{"batch-endpoint", "invoke", "sc"},
		{"batch-deployment", "list", "--endpoint-name", "s"},
	} {
		if got := completions(t, s, args...); len(got) != 1 || got[0] != "scorer" {
			t.Errorf("__complete %q: %q, want scorer", args, got)
		}
	}
	r = s.ferry(t, "batch-deployment", "list", "-e", "scorer", "-o", "json")
	var ds []apitypes.BatchDeployment
	if mustJSON(t, r, &ds); len(ds) != 1 || !ds[0].Default || ds[0].Name != "blue" {
		t.Errorf("deployments: %+v", ds)
	}
}
