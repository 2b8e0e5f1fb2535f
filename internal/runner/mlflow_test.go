package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/spec"
)

// mlflowFixture is a metrics endpoint with an MLflow run, whose params and
// tags are recorded as the server would keep them.
type mlflowFixture struct {
	url, queue string
	q          *metricQueue
	run        *mlflowRun
	mu         sync.Mutex
	values     apitypes.RunValues
	upstream   []string
}

func startMLflowEndpoint(t *testing.T) *mlflowFixture {
	t.Helper()
	f := &mlflowFixture{values: apitypes.RunValues{Params: map[string]string{}, Tags: map[string]string{}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.upstream = append(f.upstream, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	f.queue = filepath.Join(dir, MetricsQueueName)
	q, err := openMetricQueue(f.queue)
	if err != nil {
		t.Fatal(err)
	}
	f.q = q
	f.run = &mlflowRun{job: "j", experiment: "exp", status: "RUNNING", started: time.Unix(1700000000, 0),
		artifactURI: "file://" + filepath.Join(dir, "outputs"),
		params:      map[string]string{}, tags: map[string]string{}, metrics: map[string]mlflowMetric{},
		setValues: func(_ context.Context, v apitypes.RunValues) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			for k, x := range v.Params {
				f.values.Params[k] = x
			}
			for k, x := range v.Tags {
				f.values.Tags[k] = x
			}
			return nil
		}}
	u, hs, err := serveMetrics(q, "j", "tok", srv.URL, "", f.run)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close() })
	f.url = u
	return f
}

// call makes one MLflow call and returns the status and the decoded answer.
func (f *mlflowFixture) call(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, f.url+"/api/2.0/mlflow/"+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s answered %d with no JSON: %q", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// The endpoint answers the REST subset a client uses for a run: metrics
// into the queue the JSON route feeds, params and tags to the server,
// every experiment the job's, errors in MLflow's shape.
func TestMLflowEndpoint(t *testing.T) {
	f := startMLflowEndpoint(t)
	for _, c := range []struct {
		method, path, token, body string
		want                      int
		code                      string // error_code, when not 200
	}{
		{"GET", "experiments/get-by-name?experiment_name=exp", "tok", "", 200, ""},
		{"GET", "experiments/get?experiment_id=1", "tok", "", 200, ""},
		{"POST", "experiments/create", "tok", `{"name": "other"}`, 200, ""},
		{"POST", "runs/create", "tok", `{"experiment_id": "1", "start_time": 1, "run_name": "r1", "tags": [{"key": "mlflow.user", "value": "me"}]}`, 200, ""},
		{"GET", "runs/get?run_id=j", "tok", "", 200, ""},
		{"POST", "runs/log-metric", "tok", `{"run_id": "j", "key": "loss", "value": 0.5, "timestamp": 1700000001000, "step": 1}`, 200, ""},
		{"POST", "runs/log-metric", "tok", `{"run_uuid": "j", "key": "loss", "value": "0.25", "timestamp": "1700000002000", "step": "2"}`, 200, ""},
		{"POST", "runs/log-batch", "tok", `{"run_id": "j", "metrics": [{"key": "acc", "value": 0.9, "timestamp": 1700000003000, "step": 2}], "params": [{"key": "epochs", "value": "3"}], "tags": [{"key": "team", "value": "ml"}], "new_field": 1}`, 200, ""},
		{"POST", "runs/log-parameter", "tok", `{"run_id": "j", "key": "lr", "value": "0.01"}`, 200, ""},
		{"POST", "runs/set-tag", "tok", `{"run_id": "j", "key": "model", "value": "linear"}`, 200, ""},
		{"POST", "runs/update", "tok", `{"run_id": "j", "status": "FINISHED", "end_time": 1700000009000}`, 200, ""},
		{"POST", "runs/log-metric", "tok", `{"run_id": "other", "key": "loss", "value": 1}`, 404, "RESOURCE_DOES_NOT_EXIST"},
		{"POST", "runs/log-metric", "tok", `{"run_id": "j", "key": "loss", "value": "NaN"}`, 400, "INVALID_PARAMETER_VALUE"},
		{"POST", "runs/log-metric", "tok", `{"run_id": "j", "key": "", "value": 1}`, 400, "INVALID_PARAMETER_VALUE"},
		{"POST", "runs/log-metric", "tok", `not json`, 400, "INVALID_PARAMETER_VALUE"},
		{"POST", "runs/update", "tok", `{"run_id": "j", "status": "DONE"}`, 400, "INVALID_PARAMETER_VALUE"},
		{"GET", "runs/log-metric", "tok", "", 405, "BAD_REQUEST"},
		{"POST", "runs/search", "tok", `{}`, 404, "ENDPOINT_NOT_FOUND"},
		{"POST", "runs/log-metric", "wrong", `{"run_id": "j", "key": "loss", "value": 1}`, 401, "UNAUTHENTICATED"},
	} {
		got, out := f.call(t, c.method, c.path, c.token, c.body)
		if got != c.want || (c.code != "" && out["error_code"] != c.code) {
			t.Errorf("%s %s %s: %d %v, want %d %s", c.method, c.path, c.body, got, out, c.want, c.code)
		}
	}
	// runs/get shows the run as the calls left it.
	_, out := f.call(t, "GET", "runs/get?run_id=j", "tok", "")
	run := out["run"].(map[string]any)
	info := run["info"].(map[string]any)
	if info["run_id"] != "j" || info["status"] != "FINISHED" || info["run_name"] != "r1" || info["experiment_id"] != "1" ||
		!strings.HasPrefix(info["artifact_uri"].(string), "file:///") {
		t.Errorf("runs/get info: %v", info)
	}
	_, out = f.call(t, "GET", "experiments/get-by-name?experiment_name=anything", "tok", "")
	if e := out["experiment"].(map[string]any); e["experiment_id"] != "1" || e["name"] != "anything" {
		t.Errorf("get-by-name resolves a name to %v, want the job's experiment (id 1) under that name", e)
	}
	want := apitypes.RunValues{
		Params: map[string]string{"epochs": "3", "lr": "0.01"},
		Tags:   map[string]string{"mlflow.user": "me", "team": "ml", "model": "linear"},
	}
	if d := cmp.Diff(want, f.values); d != "" {
		t.Errorf("params and tags passed to the server (-want +got):\n%s", d)
	}
	if len(f.upstream) != 0 {
		t.Errorf("MLflow calls reached the server: %v", f.upstream)
	}

	// The metrics are in the durable queue, with the JSON route's, and are
	// delivered once, in order, though the server was down at first and a
	// runner started again delivers the same file again.
	if code := f.postJSON(t, `{"name": "json-route", "value": 7, "step": 3}`); code != 200 {
		t.Fatalf("JSON route: %d", code)
	}
	f.q.close()
	srv := &fakeServer{failFirst: 2}
	if err := f.q.deliver(context.Background(), srv.send, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	again, err := openMetricQueue(f.queue)
	if err != nil {
		t.Fatal(err)
	}
	again.close()
	if err := deliverAll(again, srv); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int64{1, 2, 2, 3}, srv.steps); d != "" {
		t.Errorf("steps recorded (-want +got):\n%s", d)
	}
	b, err := os.ReadFile(f.queue)
	if err != nil {
		t.Fatal(err)
	}
	var first queuedMetric
	_ = json.Unmarshal(bytes.SplitN(b, []byte("\n"), 2)[0], &first)
	if first.Name != "loss" || first.Value != 0.5 || !first.Time.Equal(time.UnixMilli(1700000001000)) {
		t.Errorf("first queued value %+v, want loss 0.5 at the client's timestamp", first)
	}
}

// deliverAll delivers a queue opened again from its file, from the start,
// as a runner started again after a crash does.
func deliverAll(q *metricQueue, srv *fakeServer) error {
	return q.deliver(context.Background(), srv.send, slog.New(slog.DiscardHandler))
}

func (f *mlflowFixture) postJSON(t *testing.T, body string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", f.url+"/v1/jobs/j/metrics", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// azureScript is a training script as Azure ML's examples write it.
const azureScript = `import os
import mlflow
import mlflow.sklearn

mlflow.sklearn.autolog()
with mlflow.start_run() as run:
    mlflow.log_param("learning_rate", 0.01)
    mlflow.log_params({"epochs": 3, "optimizer": "sgd"})
    mlflow.set_tag("model", "linear")
    mlflow.set_tags({"team": "ml"})
    for i in range(3):
        mlflow.log_metric("loss", 1.0 / (i + 1), step=i)
    mlflow.log_metrics({"accuracy": 0.9}, step=2)
    with open("notes.txt", "w") as f:
        f.write("notes\n")
    mlflow.log_artifact("notes.txt", artifact_path="extra")
    mlflow.sklearn.log_model({"weights": [1, 2]}, "model")
    print("run", run.info.run_id, "active", mlflow.active_run().info.run_id)
print("after", mlflow.active_run())
print("module", "shim" if getattr(mlflow, "_SHIM", False) else "other")
`

// runPython runs script with /usr/bin/python3 in dir, with the variables a
// job gets for f's endpoint and pythonPath.
func runPython(t *testing.T, f *mlflowFixture, dir, script, pythonPath string) (string, string) {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("needs %s (apt-get install python3)", python)
	}
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "train.py")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "MLFLOW_TRACKING_URI=" + f.url, "MLFLOW_RUN_ID=j",
		"MLFLOW_EXPERIMENT_NAME=exp", "MLFLOW_TRACKING_TOKEN=tok", "PYTHONPATH=" + pythonPath,
		"FERRY_OUTPUTS_DIR=" + filepath.Join(dir, "outputs"), "PYTHONDONTWRITEBYTECODE=1"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// An unchanged Azure-style script, with no mlflow installed, logs through
// Ferry's stand-in to the endpoint: params, tags, metrics with their
// steps, artifacts and a model in ./outputs.
func TestMLflowShimRunsAnAzureScript(t *testing.T) {
	f := startMLflowEndpoint(t)
	shim, err := installMLflowShim(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stdout, stderr := runPython(t, f, dir, azureScript, shim)
	for _, want := range []string{"run j active j\n", "after None\n", "module shim\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Count(stderr, "autolog is not supported here") != 1 {
		t.Errorf("autolog should say once that it does nothing; stderr:\n%s", stderr)
	}
	want := apitypes.RunValues{
		Params: map[string]string{"learning_rate": "0.01", "epochs": "3", "optimizer": "sgd"},
		Tags:   map[string]string{"model": "linear", "team": "ml"},
	}
	if d := cmp.Diff(want, f.values); d != "" {
		t.Errorf("params and tags (-want +got):\n%s", d)
	}
	f.q.close()
	srv := &fakeServer{}
	if err := f.q.deliver(context.Background(), srv.send, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int64{0, 1, 2, 2}, srv.steps); d != "" {
		t.Errorf("steps of the metrics logged (-want +got):\n%s", d)
	}
	f.run.mu.Lock()
	status := f.run.status
	f.run.mu.Unlock()
	if status != "FINISHED" {
		t.Errorf("the run ended %q, want FINISHED", status)
	}
	for _, p := range []string{"outputs/extra/notes.txt", "outputs/model/MLmodel", "outputs/model/model.pkl"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("the script's %s: %v", p, err)
		}
	}
}

// A module named mlflow that the job's python can import is the one the
// job gets, whether it comes before the stand-in on PYTHONPATH or after
// it (as site-packages does): the stand-in steps aside.
func TestMLflowShimStepsAsideForARealMLflow(t *testing.T) {
	shim, err := installMLflowShim(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fake, "mlflow"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The fake records that it was used, and has a submodule, as the real
	// package has.
	fakeInit := `import os
open(os.path.join(os.environ["FERRY_OUTPUTS_DIR"], "fake-used"), "w").close()
def log_metric(key, value, step=None):
    print("fake logged", key, value)
`
	for name, content := range map[string]string{"__init__.py": fakeInit, "sklearn.py": "def autolog():\n    print('fake autolog')\n"} {
		if err := os.WriteFile(filepath.Join(fake, "mlflow", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `import mlflow, mlflow.sklearn
mlflow.sklearn.autolog()
mlflow.log_metric("loss", 1)
print("module", "shim" if getattr(mlflow, "_SHIM", False) else "other")
`
	for _, order := range []string{"fake first", "shim first"} {
		t.Run(order, func(t *testing.T) {
			f := startMLflowEndpoint(t)
			path := fake + ":" + shim
			if order == "shim first" {
				path = shim + ":" + fake
			}
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "outputs"), 0o755); err != nil {
				t.Fatal(err)
			}
			stdout, _ := runPython(t, f, dir, script, path)
			if !strings.Contains(stdout, "fake autolog\nfake logged loss 1\nmodule other\n") {
				t.Errorf("the job did not get the importable mlflow:\n%s", stdout)
			}
			if _, err := os.Stat(filepath.Join(dir, "outputs", "fake-used")); err != nil {
				t.Errorf("the fake mlflow was not used: %v", err)
			}
			if last, _ := f.q.state(); last != 0 {
				t.Errorf("the stand-in logged %d values", last)
			}
		})
	}
}

// The job's variables point an MLflow client at the endpoint with the run
// token, and put the stand-in last on PYTHONPATH; a job that names its own
// tracking server keeps it.
func TestMLflowVars(t *testing.T) {
	r := &runner{cfg: Config{Job: "j", RunToken: "tok", Dir: t.TempDir()}, jobAPI: "http://127.0.0.1:1",
		log: slog.New(slog.DiscardHandler)}
	r.newMLflowRun()
	j := jobWith(map[string]string{"PYTHONPATH": "/mine"}, "exp")
	got := r.mlflowVars(j, "/host")
	want := []string{"MLFLOW_TRACKING_URI=http://127.0.0.1:1", "MLFLOW_RUN_ID=j", "MLFLOW_EXPERIMENT_NAME=exp",
		"MLFLOW_TRACKING_TOKEN=tok", "PYTHONPATH=/mine:" + r.mlflowShim}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("mlflowVars (-want +got):\n%s", d)
	}
	if got := r.mlflowVars(jobWith(nil, ""), "/host"); got[2] != "MLFLOW_EXPERIMENT_NAME=Default" || got[4] != "PYTHONPATH=/host:"+r.mlflowShim {
		t.Errorf("without an experiment or a PYTHONPATH of the job's: %v", got)
	}
	if got := r.mlflowVars(jobWith(map[string]string{"MLFLOW_TRACKING_URI": "http://mine"}, ""), ""); got != nil {
		t.Errorf("a job with its own tracking URI got %v", got)
	}
	if _, err := os.Stat(filepath.Join(r.mlflowShim, "mlflow", "__init__.py")); err != nil {
		t.Errorf("the stand-in is not installed: %v", err)
	}
	if u, err := url.Parse(r.mlRun.artifactURI); err != nil || u.Scheme != "file" {
		t.Errorf("artifact_uri %q is not a file: URI", r.mlRun.artifactURI)
	}
}

// FuzzDecodeMLflow: no request, however malformed, makes the decoder
// panic, and what it accepts it can answer with.
func FuzzDecodeMLflow(f *testing.F) {
	f.Add("POST", "runs/log-metric", "", `{"run_id": "j", "key": "loss", "value": 0.5, "timestamp": 1, "step": 1}`)
	f.Add("POST", "runs/log-batch", "", `{"run_id": "j", "metrics": [{"key": "a", "value": "NaN", "step": "3"}], "params": [{"key": "p", "value": "v"}]}`)
	f.Add("POST", "runs/log-parameter", "", `{"run_id": "j", "key": "lr", "value": 1}`)
	f.Add("POST", "runs/update", "", `{"run_id": "j", "status": "FINISHED", "end_time": "12"}`)
	f.Add("GET", "runs/get", "run_id=j", "")
	f.Add("GET", "experiments/get-by-name", "experiment_name=x", "")
	f.Add("POST", "runs/create", "", `{"tags": [{"key": "", "value": ""}]}`)
	f.Fuzz(func(t *testing.T, method, call, query, body string) {
		v, _ := url.ParseQuery(query)
		q, err := decodeMLflow(method, call, v, []byte(body))
		if err != nil {
			if q != nil {
				t.Errorf("an error and a request: %v", err)
			}
			return
		}
		for _, m := range q.metricsOf(time.Unix(0, 0)) {
			if apitypes.CheckMetric(m) != nil {
				t.Errorf("accepted a metric the server refuses: %+v", m)
			}
			if _, err := json.Marshal(queuedMetric{Metric: m}); err != nil {
				t.Errorf("accepted a metric the queue cannot hold: %+v: %v", m, err)
			}
		}
		if err := apitypes.CheckRunValues(q.kv()); err != nil {
			t.Errorf("accepted params and tags the server refuses: %v", err)
		}
	})
}

func jobWith(env map[string]string, experiment string) *spec.Job {
	return &spec.Job{EnvironmentVariables: env, ExperimentName: experiment}
}

// The stand-in saves a PyTorch model with torch.save in an MLmodel-shaped
// folder under ./outputs, and loads it back.
func TestMLflowShimPyTorchModel(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skip("needs PyTorch for /usr/bin/python3 (apt-get install python3-torch)")
	}
	f := startMLflowEndpoint(t)
	shim, err := installMLflowShim(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stdout, _ := runPython(t, f, dir, `import torch, mlflow, mlflow.pytorch
model = torch.nn.Linear(2, 1)
mlflow.pytorch.log_model(model, "model")
back = mlflow.pytorch.load_model("runs:/j/model")
print("same", torch.equal(model.weight, back.weight))
`, shim)
	if !strings.Contains(stdout, "same True") {
		t.Errorf("the model loaded back differs:\n%s", stdout)
	}
	for _, p := range []string{"outputs/model/MLmodel", "outputs/model/data/model.pth"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// The stand-in is written once per node, beside its environment cache, in
// a folder named by its content, and every attempt's job is pointed at
// it: an attempt's folder holds none of it, and a container job is shown
// it read-only.
func TestMLflowShimWrittenOncePerNode(t *testing.T) {
	envs := filepath.Join(t.TempDir(), "environments")
	newRunner := func() *runner {
		dir := t.TempDir()
		r := &runner{cfg: Config{Job: "j", Dir: dir, EnvCacheDir: envs, CacheDir: filepath.Join(dir, "cache")},
			log: slog.New(slog.DiscardHandler)}
		r.newMLflowRun()
		return r
	}
	a, b := newRunner(), newRunner()
	want := filepath.Join(envs+MLflowShimSuffix, mlflowShimVersion)
	if a.mlflowShim != want || b.mlflowShim != want {
		t.Fatalf("stand-ins %q and %q, want both in %s", a.mlflowShim, b.mlflowShim, want)
	}
	file := filepath.Join(want, "mlflow", "__init__.py")
	if data, err := os.ReadFile(file); err != nil || !bytes.Equal(data, mlflowShimSource) {
		t.Fatalf("the stand-in does not read back as embedded: %v", err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("the stand-in's mode: %v %v, want read-only for all", fi.Mode(), err)
	}
	for _, r := range []*runner{a, b} {
		if entries, _ := os.ReadDir(r.cfg.Dir); len(entries) != 0 {
			t.Errorf("the attempt's folder holds %v", entries)
		}
		if d := cmp.Diff([]string{want}, r.mlflowShimMounts()); d != "" {
			t.Errorf("a container's read-only mounts (-want +got):\n%s", d)
		}
	}
	if entries, _ := os.ReadDir(envs + MLflowShimSuffix); len(entries) != 1 {
		t.Errorf("the node's stand-ins: %v, want the one", entries)
	}

	// A damaged one (same size, other bytes; then cut short) is made again.
	for _, damage := range [][]byte{bytes.Repeat([]byte("#"), len(mlflowShimSource)), []byte("x")} {
		if err := os.Chmod(file, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, damage, 0o644); err != nil {
			t.Fatal(err)
		}
		if r := newRunner(); r.mlflowShim != want {
			t.Fatalf("after damage the stand-in is %q", r.mlflowShim)
		}
		if data, err := os.ReadFile(file); err != nil || !bytes.Equal(data, mlflowShimSource) {
			t.Errorf("a damaged stand-in was kept: %v", err)
		}
	}
}

// Runners installing the stand-in at once all get the one folder, whole,
// and leave no temporary folder behind.
func TestMLflowShimConcurrentInstalls(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "shims")
	var wg sync.WaitGroup
	got := make([]string, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = installMLflowShim(parent)
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != filepath.Join(parent, mlflowShimVersion) {
			t.Errorf("install %d: %q %v", i, got[i], errs[i])
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Errorf("left in %s: %v", parent, entries)
	}
	if data, err := os.ReadFile(filepath.Join(got[0], "mlflow", "__init__.py")); err != nil || !bytes.Equal(data, mlflowShimSource) {
		t.Errorf("the stand-in does not read back as embedded: %v", err)
	}
}

// A job that runs as another account gets the node's stand-in when that
// account can reach it, and else its own in the attempt's folder (mounted
// already for a container job).
func TestMLflowShimForAnotherAccount(t *testing.T) {
	other := &isolation.User{Name: "nobody-here", UID: 64999, GID: 64999}
	for _, c := range []struct {
		mode os.FileMode
		node bool
	}{{0o711, true}, {0o700, false}} {
		base := t.TempDir()
		for _, d := range []string{filepath.Dir(base), base} { // made 0700
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		top := filepath.Join(base, "work")
		if err := os.Mkdir(top, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(top, c.mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		dir := t.TempDir()
		envs := filepath.Join(top, "environments")
		r := &runner{cfg: Config{Job: "j", Dir: dir, EnvCacheDir: envs, RunAs: other}, log: slog.New(slog.DiscardHandler)}
		r.newMLflowRun()
		want := filepath.Join(dir, MLflowShimDirName, mlflowShimVersion)
		if c.node {
			want = filepath.Join(envs+MLflowShimSuffix, mlflowShimVersion)
		}
		if r.mlflowShim != want {
			t.Errorf("work dir mode %04o: stand-in %q, want %s", c.mode, r.mlflowShim, want)
		}
		if m := r.mlflowShimMounts(); !c.node && m != nil {
			t.Errorf("a stand-in in the attempt's folder is mounted apart: %v", m)
		}
	}
}
