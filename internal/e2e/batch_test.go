package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// batchScoreScript is an Azure batch scoring script: init() reads the
// model, and waits (up to a minute) until every worker of the job has
// started, so that the mini-batches are shared between both nodes rather
// than taken by the first one up; run() doubles the number in each file,
// scaled by the model, and raises on the poisoned file.
const batchScoreScript = `import glob, os, time

def init():
    global scale
    with open(os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "scale.txt")) as f:
        scale = int(f.read())
    rendezvous = os.environ.get("RENDEZVOUS")
    if rendezvous and rendezvous != "off":
        open(os.path.join(rendezvous, "%s-%d" % (os.environ.get("NODE_RANK", "0"), os.getpid())), "w").close()
        deadline = time.time() + 60
        while len(glob.glob(os.path.join(rendezvous, "*"))) < int(os.environ["WORKERS"]) and time.time() < deadline:
            time.sleep(0.05)

def run(mini_batch):
    rows = []
    for path in mini_batch:
        text = open(path).read()
        if text == "POISON":
            raise ValueError("poisoned file " + os.path.basename(path))
        rows.append([os.path.basename(path), int(text) * scale])
    time.sleep(0.01 * len(mini_batch))
    return rows
`

// batchApp writes a batch endpoint, a deployment of batchScoreScript on
// compute, and 1,000 input files (f0417.txt poisoned); it returns the
// endpoint file, the deployment file and the input folder.
func batchApp(t *testing.T, compute, rendezvous string) (endpointFile, deploymentFile, data string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"endpoint.yml": `$schema: https://azuremlschemas.azureedge.net/latest/batchEndpoint.schema.json
name: scorer
description: doubles numbers
auth_mode: aad_token
`,
		"deployment.yml": `$schema: https://azuremlschemas.azureedge.net/latest/modelBatchDeployment.schema.json
name: doubler
endpoint_name: scorer
type: model
model:
  name: scale
  path: model
code_configuration:
  code: code
  scoring_script: score.py
compute: azureml:` + compute + `
environment_variables:
  RENDEZVOUS: ` + rendezvous + `
  WORKERS: "4"
resources:
  instance_count: 2
settings:
  max_concurrency_per_instance: 2
  mini_batch_size: 10
  output_action: append_row
  output_file_name: predictions.csv
  retry_settings:
    max_retries: 2
    timeout: 30
  error_threshold: 10
  logging_level: debug
`,
		"code/score.py":      batchScoreScript,
		"model/scale.txt":    "3",
		"bad-deployment.yml": "name: broken\nendpoint_name: scorer\ncompute: azureml:" + compute + "\ncode_configuration: {code: code, scoring_script: score.py}\nsettings:\n  mini_batch_size: -1\n",
	}
	for i := range 1000 {
		text := fmt.Sprint(i)
		if i == 417 {
			text = "POISON"
		}
		files[fmt.Sprintf("data/f%04d.txt", i)] = text
	}
	writeFiles(t, dir, files)
	return filepath.Join(dir, "endpoint.yml"), filepath.Join(dir, "deployment.yml"), filepath.Join(dir, "data")
}

// A batch deployment scores 1,000 files over 2 nodes x 2 workers of a
// process cluster with real python3: the poisoned file's mini-batch is
// retried and then counted against error_threshold (10 files failed, 10
// allowed: the job completes), predictions.csv has the other 990 rows in
// input order, and job show has the progress as metrics. The same
// deployment with error_threshold 5 fails the job; with summary_only it
// writes no file. A bad file is refused naming the field.
func TestBatchEndpointScoresOverTwoNodes(t *testing.T) {
	s := startServer(t)
	s.mustFerry("compute", "create", "-f", clusterFile(t, "batch-cluster", "Standard_DS2_v2", 2, 120))
	rendezvous := jobWritableDir(t)
	endpoint, deployment, data := batchApp(t, "batch-cluster", rendezvous)

	r := s.ferry("batch-deployment", "create", "-f", filepath.Join(filepath.Dir(deployment), "bad-deployment.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "settings.mini_batch_size (line 6): must be from 1 to") {
		t.Fatalf("a bad batch deployment: %s", r)
	}
	s.mustFerry("batch-endpoint", "create", "-f", endpoint)
	s.mustFerry("batch-deployment", "create", "-f", deployment)
	var ep struct {
		Defaults struct {
			DeploymentName string `json:"deployment_name"`
		} `json:"defaults"`
		Deployments []string `json:"deployments"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("batch-endpoint", "show", "scorer", "-o", "json").stdout), &ep); err != nil {
		t.Fatal(err)
	}
	if ep.Defaults.DeploymentName != "doubler" || len(ep.Deployments) != 1 {
		t.Fatalf("the first deployment is not the default: %+v", ep)
	}

	r = s.ferry("batch-endpoint", "invoke", "scorer", "--input", data, "--job-name", "score-1", "--stream")
	if r.code != 0 {
		t.Fatalf("invoke: %s", r)
	}
	log := r.stdout
	mustContain(t, "the batch job's log", log,
		"1000 files in 100 mini-batches of up to 10, over 2 node(s) x 2 worker(s)",
		"mini-batch 41 (f0410.txt .. f0419.txt) failed on node",
		"(try 1 of 3): ValueError: poisoned file f0417.txt; it is tried again",
		"(try 3 of 3, no retry left): ValueError: poisoned file f0417.txt; its 10 files count as failed",
		"completed: 99 mini-batches scored, 1 failed; 990 rows written, 10 files failed")
	for _, slot := range []string{"node 0 worker", "node 1 worker"} {
		if !regexp.MustCompile(`done on ` + slot + ` \d`).MatchString(log) {
			t.Errorf("no mini-batch was scored on %s:\n%s", slot, log)
		}
	}
	j := s.show("score-1")
	if j.Status != "Completed" || j.Metrics["mini_batches_done"] != 99 || j.Metrics["mini_batches_failed"] != 1 ||
		j.Metrics["mini_batches_left"] != 0 || j.Metrics["files_failed"] != 10 {
		t.Errorf("job show: %s, metrics %v", j.Status, j.Metrics)
	}
	out := t.TempDir()
	s.mustFerry("job", "download", "score-1", "--download-path", out)
	pred, err := os.ReadFile(filepath.Join(out, "artifacts", "outputs", "predictions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 1000 {
		if i/10 != 41 {
			fmt.Fprintf(&want, "f%04d.txt,%d\n", i, 3*i)
		}
	}
	if string(pred) != want.String() {
		t.Errorf("predictions.csv is not the 990 rows in input order; it has %d lines, starting:\n%.300s", strings.Count(string(pred), "\n"), pred)
	}

	// Over the threshold: the job fails, saying why.
	s.mustFerry("batch-deployment", "update", "-f", deployment, "--set", "settings.error_threshold=5",
		"--set", "resources.instance_count=1", "--set", "environment_variables.RENDEZVOUS=off")
	r = s.ferry("batch-endpoint", "invoke", "scorer", "--input", data, "--job-name", "score-2", "--stream")
	if r.code == 0 {
		t.Fatalf("a job over its error_threshold did not fail: %s", r)
	}
	mustContain(t, "the failed job's log", r.stdout+r.stderr, "10 files failed, more than error_threshold 5; the job stops")
	if j := s.show("score-2"); j.Status != "Failed" {
		t.Errorf("score-2 is %s, want Failed", j.Status)
	}

	// summary_only: no output file.
	s.mustFerry("batch-deployment", "update", "-f", deployment, "--set", "settings.output_action=summary_only",
		"--set", "resources.instance_count=1", "--set", "environment_variables.RENDEZVOUS=off")
	r = s.ferry("batch-endpoint", "invoke", "scorer", "--input", data, "--job-name", "score-3", "--stream")
	if r.code != 0 {
		t.Fatalf("summary_only: %s", r)
	}
	out = t.TempDir()
	s.mustFerry("job", "download", "score-3", "--download-path", out)
	if _, err := os.Stat(filepath.Join(out, "artifacts", "outputs", "predictions.csv")); !os.IsNotExist(err) {
		t.Errorf("summary_only wrote predictions.csv (%v)", err)
	}

	// A registered data asset as the input, on one node; a second
	// deployment does not take the default, and the default cannot be
	// deleted while another is there.
	assetDir := t.TempDir()
	writeFiles(t, assetDir, map[string]string{"numbers.yml": "name: numbers\nversion: \"1\"\ntype: uri_folder\npath: ./n\n",
		"n/a.txt": "1", "n/b.txt": "2", "n/sub/c.txt": "3"})
	s.mustFerry("data", "create", "-f", filepath.Join(assetDir, "numbers.yml"))
	s.mustFerry("batch-deployment", "create", "-f", deployment, "--name", "tripler", "--set", "resources.instance_count=1",
		"--set", "environment_variables.RENDEZVOUS=off", "--set", "settings.logging_level=warning")
	s.mustFerry("batch-endpoint", "invoke", "scorer", "--input", "azureml:numbers:1", "--deployment-name", "tripler", "--job-name", "score-4", "--stream")
	out = t.TempDir()
	s.mustFerry("job", "download", "score-4", "--download-path", out)
	if pred, err := os.ReadFile(filepath.Join(out, "artifacts", "outputs", "predictions.csv")); err != nil || string(pred) != "a.txt,3\nb.txt,6\nc.txt,9\n" {
		t.Errorf("scoring a data asset: %q, %v", pred, err)
	}
	if r := s.ferry("batch-deployment", "delete", "doubler", "--endpoint-name", "scorer"); r.code == 0 || !strings.Contains(r.stderr, "make another the default first") {
		t.Errorf("deleting the default deployment beside another: %s", r)
	}
	if r := s.ferry("batch-endpoint", "invoke", "scorer", "--input", data, "--deployment-name", "nope"); r.code == 0 || !strings.Contains(r.stderr, "has no deployment nope") {
		t.Errorf("invoking a deployment that is not there: %s", r)
	}

	var jobs []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("batch-endpoint", "list-jobs", "scorer", "-o", "json").stdout), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 4 || jobs[0].Name != "score-4" || jobs[3].Name != "score-1" {
		t.Errorf("list-jobs: %+v", jobs)
	}
}

// A batch job goes on through a server kill -9, as every job does: the
// driver's queue is between the job's own processes, its progress metrics
// wait in the runner, and the endpoint, its deployment and the job are in
// the store. After the restart the job completes with every row, in
// order, and list-jobs still has it.
func TestBatchJobSurvivesServerKill(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	files := map[string]string{
		"endpoint.yml": "name: survivor\n",
		"deployment.yml": `name: slow
endpoint_name: survivor
code_configuration: {code: code, scoring_script: score.py}
compute: local
max_concurrency_per_instance: 2
mini_batch_size: 5
`,
		"code/score.py": "import os, time\n\ndef init():\n    pass\n\ndef run(mini_batch):\n    time.sleep(0.2)\n    return [os.path.basename(p) + ',' + open(p).read() for p in mini_batch]\n",
	}
	var want strings.Builder
	for i := range 300 {
		files[fmt.Sprintf("data/x%03d.txt", i)] = fmt.Sprint(i * i)
		fmt.Fprintf(&want, "x%03d.txt,%d\n", i, i*i)
	}
	writeFiles(t, dir, files)
	s.mustFerry("batch-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml"))
	s.mustFerry("batch-deployment", "create", "-f", filepath.Join(dir, "deployment.yml"))
	s.mustFerry("batch-endpoint", "invoke", "survivor", "--input", filepath.Join(dir, "data"), "--job-name", "survive-1")
	deadline := time.Now().Add(90 * time.Second)
	for {
		j := s.show("survive-1")
		if d := j.Metrics["mini_batches_done"]; d > 0 {
			if j.Status != "Running" || d == 60 {
				t.Fatalf("the job was done before the kill (%s, %v mini-batches): it must score for longer", j.Status, d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress: %+v", j)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.kill9()
	s.start()
	j := s.waitStatus("survive-1", "Completed", "Failed", "Canceled")
	if j.Status != "Completed" || j.Metrics["mini_batches_done"] != 60 || j.Metrics["mini_batches_left"] != 0 {
		t.Fatalf("after the restart: %s (%s), metrics %v", j.Status, j.StatusReason, j.Metrics)
	}
	out := t.TempDir()
	s.mustFerry("job", "download", "survive-1", "--download-path", out)
	pred, err := os.ReadFile(filepath.Join(out, "artifacts", "outputs", "predictions.csv"))
	if err != nil || string(pred) != want.String() {
		t.Errorf("predictions.csv after the restart (%v): %d lines", err, strings.Count(string(pred), "\n"))
	}
	if r := s.mustFerry("batch-endpoint", "list-jobs", "survivor"); !strings.Contains(r.stdout, "survive-1") {
		t.Errorf("list-jobs after the restart:\n%s", r.stdout)
	}
}
