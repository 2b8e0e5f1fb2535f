package e2e

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// A job in an image environment logs with mlflow as on the host: the
// stand-in and the runner's endpoint reach into the container (the
// attempt's folder is mounted at the same path; the network is the
// host's), and job show has the metrics and params.
func TestMLflowInImageEnvironment(t *testing.T) {
	testutil.RequireBaseImage(t)
	s := startServer(t)
	file := jobFile(t, `code: .
command: python3 train.py
environment:
  image: `+testutil.BaseImage+`
`, map[string]string{"train.py": `import mlflow
mlflow.start_run()
mlflow.log_param("where", "container")
mlflow.log_metric("loss", 0.5, step=1)
mlflow.log_artifact("train.py")
mlflow.end_run()
print("logged from the container")
`})
	r := s.mustFerry("job", "create", "-f", file, "--stream", "--name", "mlflow-img")
	mustContain(t, "the container's log", r.stdout, "logged from the container")
	show := s.mustFerry("job", "show", "mlflow-img")
	mustContain(t, "job show", show.stdout, "metric loss:", "0.5", "param where:", "container")
	dl := t.TempDir()
	s.mustFerry("job", "download", "mlflow-img", "--download-path", dl)
	if _, err := os.Stat(filepath.Join(dl, "artifacts", "outputs", "train.py")); err != nil {
		t.Errorf("mlflow.log_artifact in the container: %v", err)
	}
}

// A job logs with mlflow while the server is down: its metrics wait in
// the runner's queue and are recorded once each, in order, once the
// server is back; a param set during the outage is retried until the
// server takes it.
func TestMLflowSurvivesServerOutage(t *testing.T) {
	s := startServer(t)
	gate := filepath.Join(passableDir(t), "gate") // the job's account must see it
	file := jobFile(t, fmt.Sprintf(`code: .
command: python3 train.py %s
`, gate), map[string]string{"train.py": `import os, sys, time
import mlflow

mlflow.start_run()
for step in range(1, 11):
    mlflow.log_metric("loss", 1.0 / step, step=step)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
for step in range(11, 21):
    mlflow.log_metric("loss", 1.0 / step, step=step)
mlflow.log_param("during", "outage")
mlflow.end_run()
print("logged 20")
`})
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	metrics := func() []apitypes.Metric {
		t.Helper()
		code, body := s.call("GET", "/v1/jobs/"+name+"/metrics", s.token, nil)
		var ms []apitypes.Metric
		if code != 200 || json.Unmarshal(body, &ms) != nil {
			t.Fatalf("GET metrics: %d %s", code, body)
		}
		return ms
	}
	for deadline := time.Now().Add(time.Minute); len(metrics()) < 10; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first 10 points did not arrive: %v", metrics())
		}
	}
	s.kill9()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	queue := filepath.Join(s.work, "runs", name, "1", "metrics.jsonl")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		data, _ := os.ReadFile(queue)
		if strings.Count(string(data), "\n") == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not queue 20 points in %s:\n%s", queue, data)
		}
	}
	time.Sleep(2 * time.Second) // an outage of some seconds; the param waits through it
	s.start()

	j := s.waitStatus(name, "Completed", "Failed")
	if j.Status != "Completed" {
		t.Fatalf("job = %+v\n%s", j, s.mustFerry("job", "stream", name).stdout)
	}
	var steps []int64
	for _, m := range metrics() {
		steps = append(steps, m.Step)
	}
	var want []int64
	for i := int64(1); i <= 20; i++ {
		want = append(want, i)
	}
	if d := cmp.Diff(want, steps); d != "" {
		t.Errorf("steps recorded (-want +got):\n%s", d)
	}
	mustContain(t, "job show", s.mustFerry("job", "show", name).stdout, "param during:", "outage")
}

// A sweep whose trials log with mlflow, as Azure's sweep examples do, is
// ranked and cut by those metrics: the bandit policy cancels the trial
// whose loss is far behind, and the best trial is the one with the least.
func TestMLflowDrivesASweep(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	file := jobFile(t, `type: sweep
trial:
  code: .
  command: python3 train.py --loss ${{search_space.loss}}
  environment: {user_managed: true}
sampling_algorithm: grid
search_space:
  loss: {type: choice, values: [0.1, 5]}
objective: {primary_metric: loss, goal: minimize}
early_termination: {type: bandit, slack_factor: 0.2, evaluation_interval: 1}
limits: {max_concurrent_trials: 2}
`, map[string]string{"train.py": `import argparse, time
import mlflow

parser = argparse.ArgumentParser()
parser.add_argument("--loss", type=float)
args = parser.parse_args()
with mlflow.start_run():
    mlflow.log_param("loss_arg", args.loss)
    mlflow.log_metric("loss", args.loss, step=0)
    if args.loss > 1:
        time.sleep(60)  # a bad trial waits to be cut; were it not, it would complete
        mlflow.log_metric("loss", args.loss, step=1)
`})
	s.mustFerry("job", "create", "-f", file, "--name", "mlsweep", "--stream")
	j := s.waitSweep("mlsweep")
	if j.Status != "Completed" || j.Sweep.Best != "mlsweep_0" {
		t.Fatalf("sweep: %s (%s), best %q; want Completed with mlsweep_0 (loss 0.1) best", j.Status, j.StatusReason, j.Sweep.Best)
	}
	for _, tr := range j.Sweep.Trials {
		if bad := tr.Params["loss"].(float64) > 1; bad && (tr.Status != "Canceled" || !strings.Contains(tr.StatusReason, "bandit policy")) {
			t.Errorf("trial %s (loss %v): %s (%s); want Canceled by the bandit policy", tr.Name, tr.Params["loss"], tr.Status, tr.StatusReason)
		}
	}
	mustContain(t, "the best trial's show", s.mustFerry("job", "show", "mlsweep_0").stdout, "metric loss:", "param loss_arg:", "0.1")
}
