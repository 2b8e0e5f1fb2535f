package batchdriver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
