package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The server is killed with SIGKILL while a local job runs; the job carries
// on, and once the server is back it completes with every log line and its
// outputs.
func TestServerKill9WhileJobRuns(t *testing.T) {
	s := startServer(t)
	gate := filepath.Join(passableDir(t), "gate")
	file := jobFile(t, fmt.Sprintf(`command: |
  for i in $(seq 1 20); do echo "before $i"; done
  while [ ! -e %s ]; do sleep 0.05; done
  for i in $(seq 1 20); do echo "after $i"; done
  echo done > outputs/result.txt
`, gate), nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")

	s.kill9()
	// While the server is down the job goes on and writes more output.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	s.start()

	r := s.mustFerry("job", "stream", name)
	var want strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&want, "before %d\n", i)
	}
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&want, "after %d\n", i)
	}
	if r.stdout != want.String() {
		t.Fatalf("log after restart:\n%s\nwant:\n%s", r.stdout, want.String())
	}
	j := s.show(name)
	if j.Status != "Completed" {
		t.Fatalf("job = %+v", j)
	}
	dl := t.TempDir()
	s.mustFerry("job", "download", name, "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "result.txt")); err != nil || string(got) != "done\n" {
		t.Fatalf("output = %q, %v", got, err)
	}
}

// A follower of the log rides out a server restart and ends with the
// whole log.
func TestStreamSurvivesServerRestart(t *testing.T) {
	s := startServer(t)
	gate := filepath.Join(passableDir(t), "gate")
	file := jobFile(t, fmt.Sprintf(`command: |
  echo first
  while [ ! -e %s ]; do sleep 0.05; done
  echo second
`, gate), nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	done := make(chan result, 1)
	go func() { done <- s.ferry("job", "stream", name) }()
	time.Sleep(300 * time.Millisecond)
	s.kill9()
	time.Sleep(300 * time.Millisecond)
	s.start()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 || r.stdout != "first\nsecond\n" {
			t.Fatalf("stream across restart: %s", r)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stream did not end")
	}
}

// A runner that dies is noticed by its lease and its job is failed.
func TestLostRunnerFailsJob(t *testing.T) {
	s := startServer(t, "--lease-timeout", "2s")
	file := jobFile(t, "command: sleep 60\n", nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	// Find the runner by its command line and kill it.
	killed := false
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[1] == "runner" && strings.Contains(string(cmdline), name) {
			var pid int
			fmt.Sscan(e.Name(), &pid)
			p, _ := os.FindProcess(pid)
			_ = p.Kill()
			killed = true
		}
	}
	if !killed {
		t.Fatal("runner process not found")
	}
	j := s.waitStatus(name, "Failed")
	mustContain(t, "reason", j.StatusReason, "runner lost")
}

// Ctrl-C stops streaming, not the job.
func TestInterruptStopsStreamingNotTheJob(t *testing.T) {
	s := startServer(t, "--cancel-grace", "1s")
	file := jobFile(t, "command: echo started; sleep 30\n", nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	cmd := exec.Command(ferryBin, "job", "stream", name)
	cmd.Env = append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+s.home)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && !strings.Contains(out.String(), "started"); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("stream after Ctrl-C: %v\n%s", err, out)
	}
	mustContain(t, "stream output", out.String(), "started", "stopped streaming")
	if st := s.show(name).Status; st != "Running" {
		t.Fatalf("job is %s after Ctrl-C of the stream, want Running", st)
	}
	s.mustFerry("job", "cancel", name)
	j := s.waitStatus(name, "Canceled")
	if j.StatusReason != "canceled by owner" {
		t.Errorf("reason = %q, want who canceled", j.StatusReason)
	}
}
