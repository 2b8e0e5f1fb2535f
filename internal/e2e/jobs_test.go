package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestHelloJobStreamsShowsAndDownloads(t *testing.T) {
	s := startServer(t)
	r := s.mustFerry("job", "create", "-f", "../../examples/hello/job.yml", "--stream", "--name", "hello-1")
	mustContain(t, "stream", r.stdout, "hello from hello-1")
	mustContain(t, "summary", r.stderr, "job hello-1: Completed")

	j := s.show("hello-1")
	if j.Status != "Completed" || j.ExitCode == nil || *j.ExitCode != 0 || j.Compute != "local" {
		t.Fatalf("job = %+v", j)
	}
	if j.Created == nil || j.Started == nil || j.Ended == nil || j.Ended.Before(*j.Started) {
		t.Errorf("times not set in order: %+v", j)
	}
	var seen []string
	for _, h := range j.History {
		seen = append(seen, h.To)
	}
	if got := strings.Join(seen, ","); got != "Queued,Preparing,Running,Finalizing,Completed" {
		t.Errorf("history = %s", got)
	}

	// -o json objects carry the documented keys, in list and show.
	var raw []map[string]any
	if err := json.Unmarshal([]byte(s.mustFerry("job", "list", "-o", "json").stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "status", "compute", "exit_code", "created", "started", "ended", "metrics"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("job list -o json lacks %q: %v", k, raw[0])
		}
	}
	mustContain(t, "yaml", s.mustFerry("job", "show", "hello-1", "-o", "yaml").stdout, "status: Completed")
	mustContain(t, "table", s.mustFerry("job", "list").stdout, "hello-1", "Completed")

	dl := t.TempDir()
	s.mustFerry("job", "download", "hello-1", "--download-path", dl)
	got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "greeting.txt"))
	if err != nil || string(got) != "hello, ferry\n" {
		t.Fatalf("downloaded greeting = %q, %v", got, err)
	}

	// stream of a finished job prints the log again.
	re := s.mustFerry("job", "stream", "hello-1")
	mustContain(t, "re-stream", re.stdout, "hello from hello-1")
	if strings.Contains(re.stderr, "submitted") {
		t.Errorf("job stream of a finished job says it was submitted: %s", re.stderr)
	}
}

func TestInputsOutputsAndVariables(t *testing.T) {
	s := startServer(t)
	file := jobFile(t, `
type: command
code: src
command: >-
  python3 main.py --folder ${{inputs.folder}} --file ${{inputs.one}} --n ${{inputs.n}}
  --out ${{outputs.result}} --single ${{outputs.single}}
inputs:
  folder: {type: uri_folder, path: data}
  one: {type: uri_file, path: data/sub/b.txt}
  n: 7
outputs:
  result: {type: uri_folder}
  single: {type: uri_file, path: azureml://datastores/x/paths/answer.txt}
environment_variables:
  MY_VAR: my value
`, map[string]string{
		"src/main.py": `
import argparse, os, json
p = argparse.ArgumentParser()
for a in ("--folder", "--file", "--n", "--out", "--single"):
    p.add_argument(a)
a = p.parse_args()
files = sorted(os.path.relpath(os.path.join(d, f), a.folder) for d, _, fs in os.walk(a.folder) for f in fs)
print("folder:", files)
print("file:", open(a.file).read().strip())
print("n:", a.n)
for k in ("FERRY_JOB_ID", "FERRY_ATTEMPT", "FERRY_OUTPUTS_DIR", "FERRY_API_URL", "MY_VAR"):
    print(k, "=", os.environ.get(k))
print("token set:", bool(os.environ.get("FERRY_RUN_TOKEN")))
open(os.path.join(a.out, "result.json"), "w").write(json.dumps({"n": int(a.n) * 2}))
open(a.single, "w").write("42\n")
open(os.path.join(os.environ["FERRY_OUTPUTS_DIR"], "model.txt"), "w").write("model\n")
`,
		"data/a.txt":     "A\n",
		"data/sub/b.txt": "B\n",
	})
	r := s.mustFerry("job", "create", "-f", file, "--stream", "--name", "io-1")
	mustContain(t, "log", r.stdout,
		"folder: ['a.txt', 'sub/b.txt']", "file: B", "n: 7",
		"FERRY_JOB_ID = io-1", "FERRY_ATTEMPT = 1", "FERRY_API_URL = http://127.0.0.1:", "MY_VAR = my value", "token set: True")
	// FERRY_API_URL is the runner's own endpoint, which queues the job's
	// metrics through server outages and passes the rest on.
	if strings.Contains(r.stdout, "FERRY_API_URL = "+s.url+"\n") {
		t.Errorf("FERRY_API_URL is the server's URL, not the runner's endpoint:\n%s", r.stdout)
	}

	dl := t.TempDir()
	s.mustFerry("job", "download", "io-1", "--download-path", dl)
	for p, want := range map[string]string{
		"artifacts/outputs/model.txt":      "model\n",
		"named-outputs/result/result.json": `{"n": 14}`,
		"named-outputs/single/answer.txt":  "42\n",
	} {
		got, err := os.ReadFile(filepath.Join(dl, p))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	only := t.TempDir()
	s.mustFerry("job", "download", "io-1", "--download-path", only, "--output-name", "result")
	if _, err := os.Stat(filepath.Join(only, "artifacts")); !os.IsNotExist(err) {
		t.Errorf("--output-name result also downloaded artifacts")
	}
	if _, err := os.Stat(filepath.Join(only, "named-outputs", "result", "result.json")); err != nil {
		t.Error(err)
	}
}

func TestFailureExitCodeIsExplained(t *testing.T) {
	s := startServer(t)
	file := jobFile(t, "command: echo before; exit 3\n", nil)
	r := s.ferry("job", "create", "-f", file, "--stream", "--name", "fails")
	if r.code != 3 {
		t.Fatalf("want exit 3: %s", r)
	}
	j := s.show("fails")
	if j.Status != "Failed" || j.ExitCode == nil || *j.ExitCode != 3 {
		t.Fatalf("job = %+v", j)
	}
	mustContain(t, "show", s.mustFerry("job", "show", "fails").stdout, "exit code:", "3", "exited with code 3")
}

func TestTimeoutFailsTheJob(t *testing.T) {
	s := startServer(t, "--cancel-grace", "1s")
	file := jobFile(t, "command: echo started; sleep 60\nlimits:\n  timeout: 1\n", nil)
	r := s.ferry("job", "create", "-f", file, "--stream", "--name", "slow")
	if r.code == 0 {
		t.Fatalf("a timed-out job exited 0: %s", r)
	}
	j := s.show("slow")
	if j.Status != "Failed" || j.StatusReason != "timeout" {
		t.Fatalf("job = %+v", j)
	}
	mustContain(t, "error", j.Error, "limits.timeout")
}

// pidAlive reports whether a process exists.
func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestCancelStopsTheWholeProcessGroup(t *testing.T) {
	s := startServer(t, "--cancel-grace", "1s")
	pidDir := jobWritableDir(t)
	// The job starts a child that ignores SIGTERM: cancel must still end it
	// (SIGKILL after the grace period) and everything in its group.
	file := jobFile(t, fmt.Sprintf(`command: |
  (trap '' TERM; sleep 300) &
  echo $! > %s/child
  echo $$ > %s/main
  echo ready
  wait
`, pidDir, pidDir), nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	var child int
	for i := 0; i < 200 && child == 0; i++ {
		data, _ := os.ReadFile(filepath.Join(pidDir, "child"))
		child, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		time.Sleep(20 * time.Millisecond)
	}
	if child == 0 || !pidAlive(child) {
		t.Fatalf("job's child did not start")
	}
	s.mustFerry("job", "cancel", name)
	j := s.waitStatus(name, "Canceled")
	if j.CancelRequestedBy == "" {
		t.Errorf("cancel_requested_by not set: %+v", j)
	}
	for i := 0; i < 100 && pidAlive(child); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if pidAlive(child) {
		t.Fatalf("child %d survived the cancel", child)
	}
	// Canceling a finished job is refused and changes nothing.
	r := s.ferry("job", "cancel", name)
	if r.code == 0 {
		t.Fatalf("cancel of a canceled job succeeded: %s", r)
	}
	mustContain(t, "error", r.stderr, "already Canceled")
	if s.show(name).Status != "Canceled" {
		t.Fatal("status changed")
	}
}

func TestCancelQueuedJob(t *testing.T) {
	s := startServer(t, "--local-capacity", "1")
	blocker := strings.TrimSpace(s.mustFerry("job", "create", "-f", jobFile(t, "command: sleep 30\n", nil)).stdout)
	s.waitStatus(blocker, "Running")
	waiting := strings.TrimSpace(s.mustFerry("job", "create", "-f", jobFile(t, "command: echo never\n", nil)).stdout)
	time.Sleep(300 * time.Millisecond)
	if st := s.show(waiting).Status; st != "Queued" {
		t.Fatalf("second job on a capacity-1 target is %s, want Queued", st)
	}
	s.mustFerry("job", "cancel", waiting)
	j := s.show(waiting)
	if j.Status != "Canceled" || j.Started != nil {
		t.Fatalf("queued cancel: %+v", j)
	}
	s.mustFerry("job", "cancel", blocker)
	s.waitStatus(blocker, "Canceled")
}

func TestStdoutAndStderrInterleaveInOrder(t *testing.T) {
	s := startServer(t)
	file := jobFile(t, "command: echo one; echo two >&2; echo three; echo four >&2\n", nil)
	r := s.mustFerry("job", "create", "-f", file, "--stream", "--name", "order")
	if r.stdout != "one\ntwo\nthree\nfour\n" {
		t.Fatalf("log = %q", r.stdout)
	}
}

func TestLargeLogLosesNothing(t *testing.T) {
	s := startServer(t)
	// ~105 MB: 1,000,000 numbered lines.
	const lines = 1_000_000
	file := jobFile(t, fmt.Sprintf(`command: python3 -c "import sys; w = sys.stdout.write; [w('line %%08d %%s\n' %% (i, 'x' * 90)) for i in range(%d)]"`+"\n", lines), nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Completed")
	r := s.mustFerry("job", "stream", name)
	h := sha256.New()
	for i := 0; i < lines; i++ {
		fmt.Fprintf(h, "line %08d %s\n", i, strings.Repeat("x", 90))
	}
	want := hex.EncodeToString(h.Sum(nil))
	sum := sha256.Sum256([]byte(r.stdout))
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("streamed log (%d bytes) differs from what the job printed", len(r.stdout))
	}
}

func TestMetricsWithRunToken(t *testing.T) {
	s := startServer(t)
	file := jobFile(t, "code: .\ncommand: python3 log.py\n", map[string]string{"log.py": `
import json, os, urllib.request
def post(body):
    req = urllib.request.Request(os.environ["FERRY_API_URL"] + "/v1/jobs/" + os.environ["FERRY_JOB_ID"] + "/metrics",
        data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["FERRY_RUN_TOKEN"], "Content-Type": "application/json"})
    return urllib.request.urlopen(req).status
for step in range(3):
    post({"name": "loss", "value": 1.0 / (step + 1), "step": step})
post({"metrics": [{"name": "accuracy", "value": 0.9, "step": 0}]})
# The run token may not read other jobs or list jobs.
req = urllib.request.Request(os.environ["FERRY_API_URL"] + "/v1/jobs", headers={"Authorization": "Bearer " + os.environ["FERRY_RUN_TOKEN"]})
try:
    urllib.request.urlopen(req)
    print("run token listed jobs")
except urllib.error.HTTPError as e:
    print("list with run token:", e.code)
`})
	r := s.mustFerry("job", "create", "-f", file, "--stream", "--name", "metrics-1")
	mustContain(t, "log", r.stdout, "list with run token: 403")
	j := s.show("metrics-1")
	if j.Metrics["loss"] != 1.0/3 || j.Metrics["accuracy"] != 0.9 {
		t.Fatalf("latest metrics = %v", j.Metrics)
	}
	code, body := s.call("GET", "/v1/jobs/metrics-1/metrics?name=loss", s.token, nil)
	var series []struct {
		Name  string  `json:"name"`
		Value float64 `json:"value"`
		Step  int64   `json:"step"`
		Time  string  `json:"time"`
	}
	if code != 200 || json.Unmarshal(body, &series) != nil || len(series) != 3 {
		t.Fatalf("series: %d %s", code, body)
	}
	for i, m := range series {
		if m.Step != int64(i) || m.Value != 1.0/float64(i+1) || m.Time == "" {
			t.Errorf("series[%d] = %+v", i, m)
		}
	}
}

// An output that links outside the job's directory fails the job, naming
// the link, and nothing outside is uploaded.
func TestOutputSymlinkEscapingIsSkipped(t *testing.T) {
	s := startServer(t)
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("do not upload"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The link leaves outputs: it is skipped and listed, and the rest of
	// the outputs are kept; the job keeps its own status.
	file := jobFile(t, fmt.Sprintf("command: echo hi > outputs/fine.txt; ln -s %s outputs/evil\n", secret), nil)
	r := s.mustFerry("job", "create", "-f", file, "--stream", "--name", "escape")
	mustContain(t, "log", r.stdout, "skipped outputs/evil", "outside the directory")
	j := s.show("escape")
	if j.Status != "Completed" {
		t.Fatalf("job = %+v", j)
	}
	dl := t.TempDir()
	s.mustFerry("job", "download", "escape", "--download-path", dl)
	if b, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "fine.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("fine.txt: %q, %v", b, err)
	}
	filepath.WalkDir(dl, func(p string, d os.DirEntry, err error) error {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), "do not upload") || d.Name() == "evil" {
			t.Errorf("the escaping link's target was downloaded as %s", p)
		}
		return nil
	})
}

// A job with nothing to upload still shows its Finalizing step, though its
// runner reports it with the end, in the same transaction (bench/dispatch),
// with the executor and with a runner process per job alike.
func TestNothingToUploadStillShowsFinalizing(t *testing.T) {
	for _, mode := range []string{"--local-executor", "--local-executor=false"} {
		t.Run(strings.TrimPrefix(mode, "--"), func(t *testing.T) {
			s := startServer(t, mode)
			file := jobFile(t, "command: \"true\"\n", nil)
			s.mustFerry("job", "create", "-f", file, "--stream", "--name", "empty")
			j := s.show("empty")
			var seen []string
			for _, h := range j.History {
				seen = append(seen, h.To+" ("+h.Reason+")")
			}
			want := "Queued (waiting for a free slot on compute local),Preparing (runner starting on compute local),Running (command started),Finalizing (uploading outputs),Completed (exit code 0)"
			if got := strings.Join(seen, ","); j.Status != "Completed" || got != want {
				t.Fatalf("job %s, history:\n%s\nwant\n%s", j.Status, got, want)
			}
			// Recorded in one transaction, from the final report.
			if fin, end := j.History[3].Time, j.History[4].Time; !fin.Equal(end) {
				t.Errorf("Finalizing at %v and Completed at %v: the final report did not carry the step", fin, end)
			}
		})
	}
}
