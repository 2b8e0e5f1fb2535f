package computetest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// The numbered lines' script prints exactly the log the cases expect of
// it, stdout and stderr interleaved in one stream as a runner gives them.
func TestNumberedScriptPrintsItsLog(t *testing.T) {
	script, want := numbered("line", 41)
	cmd := exec.Command("bash", "-c", script)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Fatalf("the script printed:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(want, "line 40 on stderr\n") || !strings.Contains(want, "line 41\n") {
		t.Fatalf("the log lacks its stderr or its last line:\n%s", want)
	}
}

// HostJobProcs finds a job's process by its environment, and not once it
// has ended.
func TestHostJobProcsFindsAJobByItsEnvironment(t *testing.T) {
	job := "ct-procs-" + randomHex(4)
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), "FERRY_JOB_ID="+job)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	got := HostJobProcs(job)
	if len(got) != 1 || !strings.HasPrefix(got[0], strconv.Itoa(cmd.Process.Pid)+" sleep 60") {
		t.Fatalf("HostJobProcs(%s) = %q, want the sleep %d", job, got, cmd.Process.Pid)
	}
	if other := HostJobProcs(job + "-other"); len(other) != 0 {
		t.Fatalf("HostJobProcs of another job = %q", other)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if left := HostJobProcs(job); len(left) != 0 {
		t.Fatalf("HostJobProcs after the process ended = %q", left)
	}
}
