package timerslack

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// reexecChild is the variable that makes the test binary, started by
// TestReexec, act as a server would: Reexec, then report.
const reexecChild = "TIMERSLACK_TEST_REEXEC"

func TestMain(m *testing.M) {
	if os.Getenv(reexecChild) == "1" {
		if err := Reexec(); err != nil {
			fmt.Println("reexec:", err)
			os.Exit(1)
		}
		own, _ := Thread()
		var job strings.Builder
		cmd := exec.Command("cat", "/proc/self/timerslack_ns")
		cmd.Stdout = &job
		if err := StartUser(cmd.Start); err != nil || cmd.Wait() != nil {
			fmt.Println("user process failed:", err)
			os.Exit(1)
		}
		fmt.Printf("pid=%d slack=%d user=%s job=%s\n", os.Getpid(), own, os.Getenv(UserVar), strings.TrimSpace(job.String()))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startWithSlack starts cmd from a thread with the timer slack d.
func startWithSlack(t *testing.T, cmd *exec.Cmd, d time.Duration) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := Thread()
	if err != nil {
		t.Skipf("prctl(PR_GET_TIMERSLACK): %v", err)
	}
	if err := setThread(d); err != nil {
		t.Fatal(err)
	}
	defer setThread(own)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// A process that calls Reexec runs again, in the same process, with the
// timer slack Ferry; the user code it starts gets the slack it had, or
// the one a Ferry process above it kept in UserVar.
func TestReexec(t *testing.T) {
	const started = 70 * time.Microsecond // not the usual 50 µs
	for _, tc := range []struct {
		name, inherited string
		want            time.Duration
	}{
		{"its own", "", started},
		{"kept above it", "90000", 90 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), reexecChild+"=1", UserVar+"="+tc.inherited)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			startWithSlack(t, cmd, started)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			want := fmt.Sprintf("pid=%d slack=%d user=%d job=%d", cmd.Process.Pid, Ferry, tc.want, tc.want)
			if got := strings.TrimSpace(out.String()); got != want {
				t.Errorf("the child said %q, want %q", got, want)
			}
		})
	}
}

// With forks with the slack asked for and leaves the thread's own.
func TestWithSetsTheSlackForTheStartOnly(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := Thread()
	if err != nil {
		t.Skipf("prctl(PR_GET_TIMERSLACK): %v", err)
	}
	var out strings.Builder
	cmd := exec.Command("cat", "/proc/self/timerslack_ns")
	cmd.Stdout = &out
	if err := With(80*time.Microsecond, cmd.Start); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != strconv.Itoa(80000) {
		t.Errorf("the process started with %s ns of slack, want 80000", got)
	}
	if after, _ := Thread(); after != before {
		t.Errorf("the thread's slack is %v after With, want its own %v", after, before)
	}
}
