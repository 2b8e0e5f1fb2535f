package e2e

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/timerslack"
)

// The server and its local executor run with timerslack.Ferry, and a
// local job with the timer slack the server was started with: through
// the executor, and through a runner process per job.
func TestServerTimerSlackAndTheJobsOwn(t *testing.T) {
	started := usersTimerSlack(t)
	slackOf := func(pid int) string {
		t.Helper()
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/timerslack_ns")
		if err != nil {
			t.Skipf("a process's timer slack cannot be read here (%v): run the tests as root", err)
		}
		return strings.TrimSpace(string(data))
	}
	ferry, user := strconv.FormatInt(int64(timerslack.Ferry), 10), strconv.FormatInt(int64(started), 10)
	for _, executor := range []bool{true, false} {
		s := startServer(t, "--local-executor="+strconv.FormatBool(executor))
		if got := slackOf(s.cmd.Process.Pid); got != ferry {
			t.Errorf("the server's timer slack = %s ns, want %s", got, ferry)
		}
		r := s.mustFerry("job", "create", "-f", jobFile(t, "command: cat /proc/self/timerslack_ns\n", nil), "--stream")
		if got := strings.TrimSpace(r.stdout); got != user {
			t.Errorf("executor %v: the job's timer slack = %q ns, want the server's user's %s", executor, got, user)
		}
		if pids := executorPIDs(s); executor && len(pids) != 1 {
			t.Errorf("executors after a job: %v, want one", pids)
		} else if executor {
			if got := slackOf(pids[0]); got != ferry {
				t.Errorf("the executor's timer slack = %s ns, want %s", got, ferry)
			}
		}
		s.stop()
	}
}

// usersTimerSlack holds the test's goroutine on its thread until the test
// ends (the harness starts servers from it) and returns that thread's
// timer slack: the slack the servers' user code must start with. It must
// differ from Ferry's own for a test to tell the two apart.
func usersTimerSlack(t *testing.T) time.Duration {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread) // cleanups run on the test's goroutine
	started, err := timerslack.Thread()
	if err != nil {
		t.Fatalf("prctl(PR_GET_TIMERSLACK): %v", err)
	}
	if started == timerslack.Ferry {
		t.Fatalf("the test runs with Ferry's own timer slack (%v), so the two cannot be told apart", started)
	}
	return started
}
