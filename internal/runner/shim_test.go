package runner

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// fakeRunnerCommand makes the test binary a runner that starts one host
// job (COMMAND SPOOL STARTER, a name of starters, or "idle" for a warm
// shim given no job), says so on stdout, and waits to be killed.
const fakeRunnerCommand = "fake-runner"

func fakeRunner(args []string) int {
	spool, err := os.OpenFile(args[1], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if args[2] == "idle" {
		_, err = startWarmShim()
	} else {
		_, err = starters[args[2]](args[0], filepath.Dir(args[1]), os.Environ(), spool)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("started")
	select {}
}

// starters start a host job on a shim of its own (cold), or on a shim
// started before the job was known (warm).
var starters = map[string]func(command, dir string, env []string, spool *os.File) (*hostProcess, error){
	"cold": func(command, dir string, env []string, spool *os.File) (*hostProcess, error) {
		return startHost(shell(), command, dir, env, spool, nil)
	},
	"warm": func(command, dir string, env []string, spool *os.File) (*hostProcess, error) {
		w, err := startWarmShim()
		if err != nil {
			return nil, err
		}
		return w.start(shell(), command, dir, env, spool, nil)
	},
}

// markedProcs are the live processes whose environment holds mark.
func markedProcs(mark string) []string {
	var out []string
	for _, p := range testutil.Procs() {
		if strings.Contains(p.Env(), mark) {
			out = append(out, strconv.Itoa(p.PID)+" "+p.CmdLine())
		}
	}
	return out
}

// waitNoMarked waits until no process holds mark, and fails the test with
// those left when they outlive guard.
func waitNoMarked(t *testing.T, mark string) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		left := markedProcs(mark)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the job outlived their runner:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killMarked kills what is left of a failed test.
func killMarked(mark string) {
	for _, p := range markedProcs(mark) {
		pid, _ := strconv.Atoi(strings.Fields(p)[0])
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// A runner killed with SIGKILL takes its job's whole tree with it: the
// shell, its background children, and a grandchild that left the job's
// process group with setsid.
func TestRunnerKill9KillsTheJobTree(t *testing.T) {
	for name := range starters {
		t.Run(name, func(t *testing.T) { testRunnerKill9KillsTheJobTree(t, name) })
	}
}

func testRunnerKill9KillsTheJobTree(t *testing.T, starter string) {
	mark := fmt.Sprintf("FERRY_TEST_MARK=%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { killMarked(mark) })
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], fakeRunnerCommand,
		`bash -c 'sleep 1000 & sleep 1000' & setsid sleep 1000 & echo forked; sleep 1000`, filepath.Join(dir, "std.log"), starter)
	cmd.Env = append(os.Environ(), mark)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		t.Fatalf("the fake runner said %q", line)
	}
	// shim, outer shell, inner bash, 2 sleeps under it, setsid sleep, sleep.
	deadline := time.Now().Add(guard)
	for len(markedProcs(mark)) < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not start all its processes: %q", markedProcs(mark))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitNoMarked(t, mark)
}

// A warm shim whose runner is killed before it was given a job ends too.
func TestRunnerKill9EndsItsWaitingShim(t *testing.T) {
	mark := fmt.Sprintf("FERRY_TEST_MARK=%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { killMarked(mark) })
	cmd := exec.Command(os.Args[0], fakeRunnerCommand, "true", filepath.Join(t.TempDir(), "std.log"), "idle")
	cmd.Env = append(os.Environ(), mark)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		t.Fatalf("the fake runner said %q", line)
	}
	if n := len(markedProcs(mark)); n != 2 {
		t.Fatalf("want the runner and its waiting shim, got %q", markedProcs(mark))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitNoMarked(t, mark)
}

// A warm shim given no job ends, and runs nothing.
func TestWarmShimGivenNoJobEnds(t *testing.T) {
	w, err := startWarmShim()
	if err != nil {
		t.Fatal(err)
	}
	w.close()
	if code, err := w.p.wait(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v; want 0", code, err)
	}
}

// The shim reports the shell's exit code, 128+signal when a signal ended
// it, and a stop reaches a grandchild that left the job's process group;
// the same whether the shim was started with its job or before it.
func TestHostProcessExitCodesAndStop(t *testing.T) {
	for name, start := range starters {
		t.Run(name, func(t *testing.T) { testHostProcessExitCodesAndStop(t, start) })
	}
}

func testHostProcessExitCodesAndStop(t *testing.T, start func(command, dir string, env []string, spool *os.File) (*hostProcess, error)) {
	_, spool := testRunner(t)
	for _, c := range []struct {
		command string
		want    int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
	} {
		p, err := start(c.command, t.TempDir(), os.Environ(), spool)
		if err != nil {
			t.Fatal(err)
		}
		code, err := p.wait()
		p.cleanup()
		if err != nil || code != c.want {
			t.Errorf("%q: exit %d, %v; want %d", c.command, code, err, c.want)
		}
	}

	mark := fmt.Sprintf("FERRY_TEST_MARK=%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { killMarked(mark) })
	p, err := start(`setsid sleep 1000 & trap 'exit 7' TERM; while :; do sleep 0.05; done`, t.TempDir(), append(os.Environ(), mark), spool)
	if err != nil {
		t.Fatal(err)
	}
	for len(markedProcs(mark)) < 3 {
		time.Sleep(20 * time.Millisecond)
	}
	p.stop(false)
	code, _ := p.wait()
	p.cleanup()
	if code != 7 {
		t.Errorf("after SIGTERM: exit %d, want the trap's 7", code)
	}
	waitNoMarked(t, mark)
}
