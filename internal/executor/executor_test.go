package executor

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/compute/local"
	"github.com/ferry-ml/ferry/internal/runner"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/timerslack"
)

// TestMain answers the executor's commands, as the ferry binary does: the
// guard starts the executor by re-running its own binary, which in these
// tests is the test binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == runner.ExecutorCommand {
		if len(os.Args) > 2 && os.Args[2] == runner.ExecutorServe {
			os.Exit(Main(os.Args[3:]))
		}
		os.Exit(runner.ExecutorGuardMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// startExecutor starts the executor's guard on dir with id, as the local
// target does, and returns it once the executor answers.
func startExecutor(t *testing.T, dir, id string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], runner.ExecutorCommand, "--dir", dir, "--id", id)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := local.DialExecutor(dir); err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatal("the executor does not answer on its socket")
		}
	}
}

// runAttempt has the executor on dir (ID x) run one attempt of command
// and waits until the attempt reports its end.
func runAttempt(t *testing.T, dir, command string) {
	t.Helper()
	ended := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var rep apitypes.Report
		if strings.HasSuffix(r.URL.Path, "/status") && json.Unmarshal(body, &rep) == nil && apitypes.IsTerminal(rep.Status) {
			once.Do(func() { close(ended) })
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	a, err := json.Marshal(&apitypes.Assignment{Job: "job", Attempt: 1, Spec: &spec.Job{Command: command}})
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation.Invocation{API: srv.URL, Job: "job", Attempt: 1, Dir: filepath.Join(dir, "job", "1"),
		Cache: filepath.Join(dir, "cache"), EnvCache: filepath.Join(dir, "envs")}
	rep := send(t, dir, local.ExecutorRequest{ID: "x", RunToken: "tok", Run: inv, Assignment: a})
	if !rep.OK {
		t.Fatalf("reply = %+v", rep)
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not report its end")
	}
}

// send sends one request and returns the reply.
func send(t *testing.T, dir string, req local.ExecutorRequest) local.ExecutorReply {
	t.Helper()
	c, err := local.DialExecutor(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var rep local.ExecutorReply
	if err := json.Unmarshal(line, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// waitEnd waits for the guard to end and returns its exit code.
func waitEnd(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(15 * time.Second): // within DefaultIdle: it ended for the reason tested
		t.Fatal("the executor did not end")
		return -1
	}
}

// A stale socket is replaced; a request for another executor is answered
// Other, and the executor, having no attempt, drains and ends, guard and
// all.
func TestOtherIDDrainsTheExecutor(t *testing.T) {
	dir := t.TempDir()
	stale, err := net.Listen("unix", filepath.Join(dir, local.ExecutorSocket))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	cmd := startExecutor(t, dir, "old")
	if diff := cmp.Diff(local.ExecutorReply{Error: "run.job, run.dir and run_token are required"}, send(t, dir, local.ExecutorRequest{ID: "old"})); diff != "" {
		t.Errorf("incomplete request (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(local.ExecutorReply{Other: true}, send(t, dir, local.ExecutorRequest{ID: "new"})); diff != "" {
		t.Errorf("another ID (-want +got):\n%s", diff)
	}
	if code := waitEnd(t, cmd); code != 0 {
		t.Errorf("exit code %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, local.ExecutorSocket)); !os.IsNotExist(err) {
		t.Errorf("the drained executor left its socket: %v", err)
	}
}

// An attempt whose server never answers runs in the executor as in a
// runner: it gives up after give_up_after and keeps its final report on
// disk, with the runner's log in the attempt's runner.log. The executor,
// its server gone and no attempt left, then ends.
func TestAttemptGivesUpAndExecutorEndsWithItsServer(t *testing.T) {
	dir := t.TempDir()
	cmd := startExecutor(t, dir, "x")
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := "http://" + ln.Addr().String()
	ln.Close() // nothing answers there
	attempt := filepath.Join(dir, "job", "1")
	inv := invocation.Invocation{API: api, Job: "job", Attempt: 1, Dir: attempt, Cache: filepath.Join(dir, "cache"),
		EnvCache: filepath.Join(dir, "envs"), GiveUpAfter: time.Second}
	if err := os.MkdirAll(attempt, 0o700); err != nil {
		t.Fatal(err)
	}
	rep := send(t, dir, local.ExecutorRequest{ID: "x", ServerPID: gone.Process.Pid, RunToken: "not-a-real-token", Run: inv})
	if !rep.OK {
		t.Fatalf("reply = %+v", rep)
	}
	if code := waitEnd(t, cmd); code != 0 {
		t.Errorf("exit code %d", code)
	}
	data, err := os.ReadFile(filepath.Join(attempt, runner.FinalReportName))
	if err != nil {
		t.Fatalf("no final report kept: %v", err)
	}
	if !strings.Contains(string(data), "runner gave up on the server") {
		t.Errorf("final report:\n%s", data)
	}
	log, _ := os.ReadFile(filepath.Join(attempt, "runner.log"))
	if !strings.Contains(string(log), "giving up") || strings.Contains(string(log), "not-a-real-token") {
		t.Errorf("runner.log:\n%s", log)
	}
}

// An attempt's runner.log is made when the runner first logs, not before:
// an attempt that logs nothing leaves none.
func TestRunnerLogMadeWhenFirstWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runner.log")
	quiet := &lazyLog{path: path}
	if err := quiet.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a runner that logged nothing left runner.log: %v", err)
	}
	l := &lazyLog{path: path}
	t.Cleanup(func() { l.Close() })
	log := slog.New(slog.NewTextHandler(l, nil))
	log.Error("giving up", "for", "1s")
	log.Info("second")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "giving up") {
		t.Errorf("runner.log:\n%s", data)
	}
}

// One connection carries as many requests as its sender sends, each
// answered in turn (the local target keeps its connection open from one
// launch to the next); a line that is no request is answered so, and the
// connection still serves the next; another ID is answered Other there too.
func TestOneConnectionManyRequests(t *testing.T) {
	dir := t.TempDir()
	cmd := startExecutor(t, dir, "x")
	c, err := local.DialExecutor(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(line string) local.ExecutorReply {
		t.Helper()
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		reply, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var rep local.ExecutorReply
		if err := json.Unmarshal(reply, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	incomplete := local.ExecutorReply{Error: "run.job, run.dir and run_token are required"}
	for i := range 3 {
		if diff := cmp.Diff(incomplete, ask(`{"id": "x"}`)); diff != "" {
			t.Errorf("request %d (-want +got):\n%s", i, diff)
		}
	}
	if rep := ask(`not json`); !strings.HasPrefix(rep.Error, "the request is not one") {
		t.Errorf("a line that is no request: %+v", rep)
	}
	if diff := cmp.Diff(incomplete, ask(`{"id": "x"}`)); diff != "" {
		t.Errorf("after a bad line (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(local.ExecutorReply{Other: true}, ask(`{"id": "y"}`)); diff != "" {
		t.Errorf("another ID (-want +got):\n%s", diff)
	}
	c.Close()
	if code := waitEnd(t, cmd); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// What a job's shell leaves behind outside its process group (here a
// setsid sleep, handed to the guard when the shell ends) is found under
// the guard and killed when the shell ends, before the attempt's end is
// reported.
func TestOrphanOfAnEndedShellIsKilled(t *testing.T) {
	dir := t.TempDir()
	cmd := startExecutor(t, dir, "x")
	pidFile := filepath.Join(dir, "orphan.pid")
	// The shell ends once the orphan has its own session, not before (a
	// child still in the shell's group dies with the group).
	runAttempt(t, dir, "setsid sh -c 'echo $$ > "+pidFile+"; exec sleep 1000' & while [ ! -s "+pidFile+" ]; do sleep 0.01; done")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	// Dead by now: gone, or a zombie the guard has yet to reap.
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] != "Z" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the job's orphan %d outlived its shell (state %s)", pid, f[0])
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waitEnd(t, cmd)
}

// The executor runs with timerslack.Ferry on every thread, and a
// job's shell with the slack its guard was started with (runner's
// timerslack.go).
func TestExecutorTimerSlackAndTheJobsOwn(t *testing.T) {
	const guardSlack = 70 * time.Microsecond // not the usual 50 µs, so it is not found by chance
	dir := t.TempDir()
	// The guard is started from a thread with guardSlack, as a server
	// whose own slack it is.
	runtime.LockOSThread()
	prctl := func(op int, v uintptr) uintptr {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, uintptr(op), v, 0, 0, 0, 0)
		if errno != 0 {
			t.Fatalf("prctl %d: %v", op, errno)
		}
		return n
	}
	own := prctl(30, 0) // PR_GET_TIMERSLACK
	prctl(29, uintptr(guardSlack))
	cmd := startExecutor(t, dir, "x")
	prctl(29, own)
	runtime.UnlockOSThread()

	// Each thread's children file lists the children it forked.
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var executor []string
	for _, f := range files {
		data, _ := os.ReadFile(f)
		executor = append(executor, strings.Fields(string(data))...)
	}
	if len(executor) != 1 {
		t.Fatalf("the guard's children: %q, want the executor alone", executor)
	}
	// /proc shows a process's main thread's slack, which its other
	// threads were made with.
	slackOf := func(pid string) string {
		t.Helper()
		data, err := os.ReadFile("/proc/" + pid + "/timerslack_ns")
		if err != nil {
			t.Skipf("a process's timer slack cannot be read here (%v): run the tests as root", err)
		}
		return strings.TrimSpace(string(data))
	}
	ns := func(d time.Duration) string { return strconv.FormatInt(int64(d), 10) }
	out := filepath.Join(dir, "job-slack")
	runAttempt(t, dir, "cat /proc/self/timerslack_ns > "+out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(data)); got != ns(guardSlack) {
		t.Errorf("the job's timer slack = %s ns, want the guard's %s", got, ns(guardSlack))
	}
	if got := slackOf(executor[0]); got != ns(timerslack.Ferry) {
		t.Errorf("the executor's timer slack = %s ns, want %s", got, ns(timerslack.Ferry))
	}
	if got := slackOf(strconv.Itoa(cmd.Process.Pid)); got != ns(guardSlack) {
		t.Errorf("the guard's timer slack = %s ns, want its own %s", got, ns(guardSlack))
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waitEnd(t, cmd)
}
