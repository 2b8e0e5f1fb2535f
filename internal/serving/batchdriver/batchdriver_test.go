package batchdriver

import (
	"bytes"
	"fmt"
	"github.com/ferry-ml/ferry/internal/testutil"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runDriver installs the driver, writes script and n input files (file i
// holding i) and runs the driver with args on one node; it returns its
// log, its exit code and the output file ("" when there is none).
func runDriver(t *testing.T, script string, n int, args ...string) (log string, code int, output string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (apt-get install python3)")
	}
	return runDriverWith(t, py, script, n, args...)
}

// runDriverWith is runDriver with the Python interpreter py.
func runDriverWith(t *testing.T, py, script string, n int, args ...string) (log string, code int, output string) {
	t.Helper()
	dir := t.TempDir()
	inst, err := Install(filepath.Join(dir, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "score.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(in, fmt.Sprintf("f%03d", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, append([]string{"-u", filepath.Join(inst, Program), "--script", "score.py", "--input", in, "--outputs", "out"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FERRY_API_URL=", "NODE_RANK=")
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if out, err := os.ReadFile(filepath.Join(dir, "out", "predictions.csv")); err == nil {
		output = string(out)
	}
	return string(b), code, output
}

// A mini-batch that runs past the timeout is retried on a fresh worker
// (init() again) and succeeds; every kind of row run() may return is
// written as Azure writes it.
func TestDriverTimeoutRetryAndRows(t *testing.T) {
	script := `import os, sys, time
def init():
    pass
def run(mini_batch):
    names = [os.path.basename(p) for p in mini_batch]
    marker = os.path.join(os.path.dirname(mini_batch[0]), "..", "slow-once")
    if "f002" in names and not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(60)
    out = []
    for n in names:
        i = int(n[1:])
        out.append(("row", i, "a,b") if i % 3 == 0 else (str(i) if i % 3 == 1 else i * 1.5))
    return out
`
	log, code, out := runDriver(t, script, 6, "--mini-batch-size", "2", "--timeout", "2", "--concurrency", "2")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	if !strings.Contains(log, "mini-batch 1 (f002 .. f003) failed on node 0 worker") || !strings.Contains(log, "timed out after 2 s (retry_settings.timeout); it is tried again") {
		t.Errorf("no timeout and retry in the log:\n%s", log)
	}
	want := "row,0,\"a,b\"\n1\n3.0\nrow,3,\"a,b\"\n4\n7.5\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

// Fewer rows than files count the missing ones as failed; a worker that
// dies in run() is replaced and its mini-batch retried; an init() that
// raises fails the job with its traceback.
func TestDriverShortRowsCrashAndInitFailure(t *testing.T) {
	script := `import os
def init():
    if os.environ.get("BREAK_INIT"):
        raise RuntimeError("no model here")
def run(mini_batch):
    marker = os.path.join(os.path.dirname(mini_batch[0]), "..", "crashed")
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)
    return [os.path.basename(p) for p in mini_batch][:1]
`
	log, code, out := runDriver(t, script, 4, "--mini-batch-size", "2", "--error-threshold", "2")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	for _, want := range []string{"the worker process ended (exit code 9) while scoring; it is tried again",
		"run() returned 1 rows for 2 files; 1 count as failed", "2 files failed"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	if out != "f000\nf002\n" {
		t.Errorf("output %q", out)
	}

	t.Setenv("BREAK_INIT", "1")
	log, code, _ = runDriver(t, script, 4)
	if code == 0 || !strings.Contains(log, "RuntimeError: no model here") || !strings.Contains(log, "init() of score.py failed") {
		t.Errorf("a failing init(): exit %d:\n%s", code, log)
	}
}

// An MLflow model deployed without a scoring script is scored by the
// driver's own script, whose init() says what the environment lacks
// when mlflow or pandas is not there.
func TestMLflowScriptSaysWhatIsMissing(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (apt-get install python3)")
	}
	if exec.Command(py, "-c", "import mlflow, pandas").Run() == nil {
		t.Skip("mlflow and pandas are installed: this checks the message given without them")
	}
	dir := t.TempDir()
	inst, err := Install(filepath.Join(dir, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "a.csv"), []byte("x\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-u", filepath.Join(inst, Program), "--script", filepath.Join(inst, MLflowScript), "--input", in, "--outputs", filepath.Join(dir, "out"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FERRY_API_URL=", "NODE_RANK=", "AZUREML_MODEL_DIR="+dir)
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "which the deployment's environment lacks") || !strings.Contains(string(b), "init() of") {
		t.Errorf("%v:\n%s", err, b)
	}
}

// Two nodes share one queue over TCP: node rank 1 takes mini-batches from
// rank 0 with the job's key, a stranger without it is served nothing, and
// rank 0 writes every row in input order.
func TestDriverTwoNodesAndAStranger(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (apt-get install python3)")
	}
	dir := t.TempDir()
	inst, err := Install(filepath.Join(dir, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	// Node 0's mini-batches wait until node 1's worker is up, so that both
	// score whatever the machine's load.
	script := `import os, time
def init():
    if os.environ["NODE_RANK"] == "1":
        open("rank1-ready", "w").close()
def run(mb):
    deadline = time.time() + 60
    while not os.path.exists("rank1-ready") and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.02)
    return [os.path.basename(p) + " " + os.environ["NODE_RANK"] for p in mb]
`
	if err := os.WriteFile(filepath.Join(dir, "score.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := os.WriteFile(filepath.Join(in, fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	node := func(rank, key string) *exec.Cmd {
		cmd := exec.Command(py, "-u", filepath.Join(inst, Program), "--script", "score.py", "--input", in, "--outputs", "out-"+rank,
			"--nodes", "2", "--mini-batch-size", "2", "--logging-level", "debug")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "FERRY_API_URL=", "FERRY_JOB_ID=j1", "NODE_RANK="+rank, "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port, "BATCH_DRIVER_KEY="+key)
		return cmd
	}
	var log0 bytes.Buffer
	master := node("0", "k3y")
	master.Stdout, master.Stderr = &log0, &log0
	if err := master.Start(); err != nil {
		t.Fatal(err)
	}
	// The stranger's connection is closed without a mini-batch.
	stranger := `import json, socket, sys, time
for _ in range(200):
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        break
    except OSError:
        time.sleep(0.05)
s.sendall((json.dumps({"op": "next", "job": "j1", "slot": "x", "key": "wrong"}) + "\n").encode())
print(repr(s.makefile("rb").readline()))
`
	out, err := exec.Command(py, "-c", stranger, port).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "b''" {
		t.Errorf("a stranger was answered: %s %v", out, err)
	}
	b1, err := node("1", "k3y").CombinedOutput()
	if err != nil {
		t.Fatalf("node 1: %v\n%s", err, b1)
	}
	if err := master.Wait(); err != nil {
		t.Fatalf("node 0: %v\n%s", err, log0.String())
	}
	got, err := os.ReadFile(filepath.Join(dir, "out-0", "predictions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != 40 {
		t.Fatalf("%d rows, want 40:\n%s", len(lines), got)
	}
	ranks := map[string]bool{}
	for i, l := range lines {
		name, rank, _ := strings.Cut(l, " ")
		if name != fmt.Sprintf("f%02d", i) {
			t.Fatalf("row %d is %q: not in input order", i, l)
		}
		ranks[rank] = true
	}
	if !ranks["0"] || !ranks["1"] {
		t.Errorf("mini-batches were scored on nodes %v, want both:\n%s", ranks, log0.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "out-1")); !os.IsNotExist(err) {
		t.Errorf("node 1 wrote an output folder (%v): only rank 0 writes", err)
	}
}

// A run() that returns a pandas DataFrame has its rows written as CSV,
// without header or index, as Azure writes them.
func TestDriverDataFrameRows(t *testing.T) {
	py := testutil.RequireDebianPython(t, "pandas", "python3-pandas")
	script := `import os
import pandas as pd
def run(mini_batch):
    return pd.DataFrame({"file": [os.path.basename(p) for p in mini_batch], "n": [int(open(p).read()) * 2 for p in mini_batch]})
`
	log, code, out := runDriverWith(t, py, script, 3, "--mini-batch-size", "2")
	if code != 0 || out != "f000,0\nf001,2\nf002,4\n" {
		t.Errorf("exit %d, output %q:\n%s", code, out, log)
	}
}

// A worker holds the next mini-batch while it scores the current one; when
// it is killed (here, past the timeout), the one it held goes back to the
// queue untried: its own failure later is its first try, not its second.
func TestDriverPrefetchedMiniBatchGoesBackUntried(t *testing.T) {
	script := `import os, time
def init():
    pass
def run(mini_batch):
    name = os.path.basename(mini_batch[0])
    if name == "f000":
        time.sleep(60)
    marker = os.path.join(os.path.dirname(mini_batch[0]), "..", "fail-once")
    if name == "f001" and not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError("first try of f001")
    return [name]
`
	log, code, out := runDriver(t, script, 4, "--mini-batch-size", "1", "--timeout", "1", "--max-retries", "1", "--concurrency", "1")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	if !strings.Contains(log, "mini-batch 1 (f001) failed on node 0 worker 0 (try 1 of 2): ValueError: first try of f001; it is tried again") {
		t.Errorf("f001's first failure is not its first try:\n%s", log)
	}
	if !strings.Contains(log, "mini-batch 0 (f000) failed on node 0 worker 0 (try 2 of 2, no retry left): timed out after 1 s") {
		t.Errorf("f000 did not time out twice:\n%s", log)
	}
	if want := "f001\nf002\nf003\n"; out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}
