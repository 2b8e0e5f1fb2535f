package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// A runner that its target started and that cannot reach the server (the
// URL the server advertises leads nowhere: 127.0.0.2:9 refuses every
// connection) logs each failed try, and the job ends saying that its
// runner never reached the server at that URL, not only that it fell
// silent (issue 29 #7). The local target with a runner process per job
// is the cheap target to show it with; a pod's runner is the same runner.
func TestRunnerThatCannotReachTheServerSaysSo(t *testing.T) {
	s := startServer(t, "--advertise-url", "http://127.0.0.2:9", "--lease-timeout", "5s", "--local-executor=false")
	attemptDir := filepath.Join(s.work, "runs", "lost-1", "1")
	// The runner keeps trying until it gives up (a day): it is ended here.
	t.Cleanup(func() {
		for range 20 {
			var left bool
			for _, p := range testutil.Procs() {
				if strings.Contains(p.CmdLine(), attemptDir) {
					left = true
					_ = syscall.Kill(p.PID, syscall.SIGKILL)
				}
			}
			if !left {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo hi\n", nil), "--name", "lost-1")
	j := s.waitStatus("lost-1", "Failed")
	mustContain(t, "the job's reason", j.StatusReason,
		"runner lost: the runner on compute local has not reached the server at http://127.0.0.2:9 for", "--advertise-url")
	log, err := os.ReadFile(filepath.Join(attemptDir, "runner.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "the server has not been reached yet; the runner keeps trying"); n < 2 {
		t.Errorf("the runner logged %d failed tries, want each of them:\n%s", n, log)
	}
	mustContain(t, "the runner's log", string(log), "http://127.0.0.2:9", "connection refused")
}
