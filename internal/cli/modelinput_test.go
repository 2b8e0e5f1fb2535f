package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// An input of a model type (mlflow_model, custom_model, triton_model)
// that names azureml:NAME@latest or azureml:NAME:VERSION takes the
// registered model's files, in a command job and in a pipeline step; a
// model that is not registered is refused before anything is uploaded.
func TestModelTypedInputFromRegisteredModel(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"m/MLmodel":   "flavors: {sklearn: {}}\n",
		"m/model.pkl": "weights\n",
		"model.yml":   "name: tiny-model\npath: m\ntype: mlflow_model\n",
		"src/x.py":    "print('never run')\n",
		"job.yml": `command: cat ${{inputs.m}}/MLmodel ${{inputs.m}}/model.pkl
compute: local
inputs:
  m: {type: mlflow_model, path: azureml:tiny-model@latest, mode: ro_mount}
`,
		"pipe.yml": `type: pipeline
jobs:
  look:
    command: cat ${{inputs.m}}/model.pkl
    compute: local
    inputs:
      m: {type: custom_model, path: azureml:tiny-model:1}
`,
		"missing.yml": `command: ls ${{inputs.m}}
code: ./src
compute: local
inputs:
  m: {type: mlflow_model, path: azureml:no-such-model@latest}
`,
	})
	if r := s.ferry(t, "model", "create", "-f", filepath.Join(dir, "model.yml")); r.code != 0 {
		t.Fatalf("model create: %s", r)
	}
	r := s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "flavors: {sklearn: {}}\nweights\n") {
		t.Errorf("a job with a registered model as its input: %s", r)
	}
	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "pipe.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "weights") {
		t.Errorf("a pipeline step with a registered model as its input: %s", r)
	}
	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "missing.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "missing.yml:5: inputs.m.path:") || !strings.Contains(r.stderr, "no-such-model") {
		t.Errorf("an unregistered model: %s", r)
	}
	if strings.Contains(r.stderr, "upload") {
		t.Errorf("the code was uploaded before the model was looked up: %s", r)
	}
}

// A job with interactive services (Azure's hello-interactive) is
// accepted on a cluster, and the CLI says the services are not started.
// A zero quota keeps the cluster from starting a node for it.
func TestJobWithServicesOnCluster(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"cluster.yml": "name: cpu\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 0\nmax_instances: 1\n",
		"job.yml": `command: sleep 5
compute: azureml:cpu
services:
  lab: {job_service_type: jupyter_lab}
  board: {job_service_type: tensor_board, log_dir: outputs/tblogs}
`,
	})
	if r := s.ferry(t, "quota", "set", "standardDSv2Family", "0"); r.code != 0 {
		t.Fatalf("quota set: %s", r)
	}
	if r := s.ferry(t, "compute", "create", "-f", filepath.Join(dir, "cluster.yml")); r.code != 0 {
		t.Fatalf("compute create: %s", r)
	}
	r := s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"))
	if r.code != 0 || !strings.Contains(r.stderr, "not used by Ferry: services") {
		t.Errorf("a job with services on a cluster: %s", r)
	}
}
