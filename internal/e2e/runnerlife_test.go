package e2e

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// deadRunner starts `ferry runner` for a server that is not there, with
// extra flags, and returns it and its attempt folder.
func deadRunner(t *testing.T, flags ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"runner", "--api", "http://" + freeAddr(t), "--job", "j", "--attempt", "1",
		"--dir", filepath.Join(dir, "attempt"), "--cache", filepath.Join(dir, "cache"), "--env-cache", filepath.Join(dir, "envs")}, flags...)
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = append(os.Environ(), "FERRY_RUN_TOKEN=not-a-real-token")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, filepath.Join(dir, "attempt"), out
}

// waitExit waits for the runner to end and fails the test if it does not.
func waitExit(t *testing.T, cmd *exec.Cmd, out *syncBuffer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the runner exited 0 without delivering its report:\n%s", out)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the runner did not end; its output:\n%s", out)
	}
}

// finalReport reads the report a runner kept on disk.
func finalReport(t *testing.T, dir string) apitypes.Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "final-report.json"))
	if err != nil {
		t.Fatalf("no final report kept: %v", err)
	}
	var rep apitypes.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("final report: %v\n%s", err, data)
	}
	return rep
}

// A runner whose server never answers gives up after --give-up-after,
// keeps its final report on disk and ends.
func TestRunnerGivesUpOnSilentServer(t *testing.T) {
	cmd, dir, out := deadRunner(t, "--give-up-after", "2s")
	waitExit(t, cmd, out)
	rep := finalReport(t, dir)
	if rep.Status != apitypes.StatusFailed || rep.Reason != "runner gave up on the server" {
		t.Fatalf("final report = %+v", rep)
	}
	mustContain(t, "runner output", out.String(), "final-report.json")
}

// SIGTERM ends a runner after the cancel grace and a few seconds to
// report, even when its server is gone.
func TestRunnerEndsOnSIGTERM(t *testing.T) {
	cmd, dir, out := deadRunner(t, "--cancel-grace", "1s")
	time.Sleep(time.Second) // let it start retrying (and handle signals)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, out)
	finalReport(t, dir)
}
