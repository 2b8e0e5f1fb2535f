package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A job whose script is an unchanged Azure-style training script that logs
// with mlflow (not installed here: Ferry's stand-in serves it) completes on
// the local target with the real server and /usr/bin/python3, and job show
// shows its metrics, params and tags. A job that brings its own module
// named mlflow gets that one.
func TestJobLogsWithMLflowUnchanged(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 (apt-get install python3)")
	}
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"src/train.py": `import argparse
import mlflow
import mlflow.sklearn

parser = argparse.ArgumentParser()
parser.add_argument("--learning-rate", type=float, default=0.1)
args = parser.parse_args()

mlflow.start_run()
mlflow.sklearn.autolog()
mlflow.log_param("learning_rate", args.learning_rate)
mlflow.log_params({"epochs": 3})
mlflow.set_tag("model", "linear")
for epoch in range(3):
    mlflow.log_metric("loss", 1.0 / (epoch + 1), step=epoch)
mlflow.log_metrics({"accuracy": 0.75})
mlflow.sklearn.save_model({"weights": [1, 2]}, "outputs/model")
mlflow.end_run()
print("trained with", "the stand-in" if getattr(mlflow, "_SHIM", False) else "another mlflow")
`,
		"job.yml": `$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
type: command
name: mlflow-job
experiment_name: mlflow-exp
code: ./src
command: python3 train.py --learning-rate 0.01
compute: azureml:local
`,
		"own/train.py":                "import mlflow\nmlflow.log_metric('loss', 1)\n",
		"own/mine/mlflow/__init__.py": "def log_metric(k, v):\n    print('own mlflow logged', k, v)\n",
		"own.yml": `type: command
name: own-mlflow
code: ./own
command: python3 train.py
environment_variables:
  PYTHONPATH: mine
compute: local
`,
	})
	r := s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "trained with the stand-in") {
		t.Fatalf("the mlflow job: %s", r)
	}
	r = s.ferry(t, "job", "show", "mlflow-job")
	if r.code != 0 {
		t.Fatalf("job show: %s", r)
	}
	for _, want := range []string{"status:", "Completed", "metric loss:", "0.333333", "metric accuracy:", "0.75",
		"param learning_rate:", "0.01", "param epochs:", "tag model:", "linear"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("job show lacks %q:\n%s", want, r.stdout)
		}
	}
	var shown struct {
		Params  map[string]string `json:"params"`
		RunTags map[string]string `json:"run_tags"`
	}
	mustJSON(t, s.ferry(t, "job", "show", "mlflow-job", "-o", "json"), &shown)
	if shown.Params["epochs"] != "3" || shown.RunTags["model"] != "linear" {
		t.Errorf("job show -o json: params %v, tags %v", shown.Params, shown.RunTags)
	}
	ms, err := s.client().Metrics(t.Context(), "mlflow-job", "loss")
	if err != nil || len(ms) != 3 || ms[2].Step != 2 {
		t.Errorf("the loss series: %+v, %v; want 3 values, steps 0..2", ms, err)
	}

	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "own.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "own mlflow logged loss 1") {
		t.Errorf("a job with its own mlflow module: %s", r)
	}
}
