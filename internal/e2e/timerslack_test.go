package e2e

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/timerslack"
)

// The server and its local executor run with timerslack.Ferry, and a
// local job with the timer slack the server was started with: through
// the executor, and through a runner process per job.
func TestServerTimerSlackAndTheJobsOwn(t *testing.T) {
	runtime.LockOSThread() // the harness starts the server from this thread
	defer runtime.UnlockOSThread()
	started, err := timerslack.Thread()
	if err != nil {
		t.Skipf("prctl(PR_GET_TIMERSLACK): %v", err)
	}
	slackOf := func(pid int) string {
		t.Helper()
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/timerslack_ns")
		if err != nil {
			t.Skipf("a process's timer slack cannot be read here (%v): run the tests as root", err)
		}
		return strings.TrimSpace(string(data))
	}
	ferry, user := strconv.FormatInt(int64(timerslack.Ferry), 10), strconv.FormatInt(int64(started), 10)
	if user == ferry {
		t.Fatalf("the test runs with Ferry's own timer slack (%s ns), so the two cannot be told apart", user)
	}
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
