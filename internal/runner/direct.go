package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/timerslack"
)

// A runner inside the local executor (internal/executor) starts a host
// job's shell itself, without a shim: the executor is long-lived, so one
// exec per job is what it saves. The job's tree still dies with its
// runner, through the executor's guard: the executor is the only child of
// `ferry local-executor` (ExecutorGuardMain), a child subreaper that every
// orphan of a job is handed to. When the executor dies, even by SIGKILL,
// the guard kills everything below it and ends. Each job's shell has its
// own process group, the executor's parent-death signal (SIGKILL), and
// the marker MarkerVar in its environment, so that what it leaves behind
// after its shell ends (re-parented to the guard) is found and killed as
// the shim kills it, and cancel or timeout reaches only its own tree.

// Direct makes a runner start its host processes directly (see above).
type Direct struct {
	// Guard is the pid of the executor's guard, the subreaper the job's
	// orphans go to.
	Guard int
	// Metrics, when set, serves the attempts' metrics endpoints on one
	// listener (metricshub.go) instead of one each.
	Metrics *MetricsHub
}

// MarkerVar is the variable a job started by the executor carries:
// JOB/ATTEMPT. Its orphans under the guard are known by it.
const MarkerVar = "FERRY_EXECUTOR_JOB"

// directProcess is a job's shell started by the runner itself.
type directProcess struct {
	cmd    *exec.Cmd
	pgid   int
	marker string // MarkerVar=JOB/ATTEMPT
	guard  int
	done   chan struct{} // closed when the shell has ended and its leftovers are killed
	err    error         // of cmd.Wait, once done
}

// startDirect starts command's shell in a process group of its own, as
// cred's account when it is not nil, with the executor's parent-death
// signal, and kills what it left when it ends.
func (r *runner) startDirect(shellPath, command string, env []string, spool *os.File) (*directProcess, error) {
	marker := MarkerVar + "=" + r.cfg.Job + "/" + strconv.Itoa(r.cfg.Attempt)
	cmd := exec.Command(shellPath, "-c", command)
	cmd.Dir = r.wd
	cmd.Env = append(env[:len(env):len(env)], marker)
	cmd.Stdout, cmd.Stderr = spool, spool
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: r.credential(), Pdeathsig: syscall.SIGKILL}
	p := &directProcess{cmd: cmd, marker: marker, guard: r.cfg.Direct.Guard, done: make(chan struct{})}
	// The parent-death signal is sent when the thread that forked the
	// shell ends: the thread is held until the shell ends.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := timerslack.StartUser(cmd.Start); err != nil {
			started <- err
			return
		}
		p.pgid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		p.killLeft()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *directProcess) wait() (int, error) {
	<-p.done
	return exitCode(p.cmd.ProcessState, p.err), nil
}

// stop signals the job's group, the shell's descendants that left it, and
// its orphans under the guard.
func (p *directProcess) stop(kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-p.pgid, sig)
	for _, pid := range (&jobTree{self: p.pgid, pgid: p.pgid}).members() {
		_ = syscall.Kill(pid, sig)
	}
	p.signalOrphans(sig)
}

// cleanup kills the tree if the shell still runs, and waits for its end.
func (p *directProcess) cleanup() {
	select {
	case <-p.done:
		return
	default:
	}
	p.stop(true)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
	}
}

// killLeft kills what the job left when its shell ended: its process
// group, and its orphans under the guard, until none is left (10 s at
// most, as the shim). Most jobs leave nothing, and this reads nothing of
// /proc but the guard's children then.
func (p *directProcess) killLeft() {
	for range 1000 {
		n := p.signalOrphans(syscall.SIGKILL)
		if syscall.Kill(-p.pgid, syscall.SIGKILL) == nil {
			n++ // a member, or a zombie the guard has not reaped yet
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signalOrphans sends sig to each child of the guard that carries this
// job's marker, and to its descendants; it says how many it found.
func (p *directProcess) signalOrphans(sig syscall.Signal) int {
	n := 0
	for _, pid := range orphansOf(p.guard) {
		if pid == os.Getpid() || !hasEnv(pid, p.marker) {
			continue
		}
		n++
		_ = syscall.Kill(pid, sig)
		for _, d := range (&jobTree{self: pid, pgid: -1}).members() {
			_ = syscall.Kill(d, sig)
		}
	}
	return n
}

// orphansOf are the live children of the subreaper pid's main thread,
// read from /proc/PID/task/PID/children (zombies included). Linux hands
// an orphan to the first live thread of its nearest subreaper, which is
// the main thread while that lives, and a Go program's main thread lives
// as long as the program: the guard's other threads' children files
// (the executor is in one of them) need not be read. Reading every
// thread's, with the folder of threads, was 5% of the executor's CPU
// (bench/dispatch).
func orphansOf(pid int) []int {
	task := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid)
	data, err := os.ReadFile(task + "/children")
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(task); err != nil {
			return nil // the guard is gone
		}
		// A kernel without CONFIG_PROC_CHILDREN: every process is read.
		var out []int
		for c, proc := range readProcs() {
			if proc.ppid == pid {
				out = append(out, c)
			}
		}
		return out
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// hasEnv says whether process pid has kv in its environment (as it was
// started; a zombie's cannot be read, and it says false).
func hasEnv(pid int, kv string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, e := range bytes.Split(data, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}

// ExecutorCommand is the hidden command of the ferry binary that runs the
// local executor: without ExecutorServe, ExecutorGuardMain; with it, the
// executor itself (internal/executor).
const ExecutorCommand = "local-executor"

// ExecutorServe is the first argument of the executor proper, which the
// guard starts as its child.
const ExecutorServe = "--serve"

// ExecutorGuardMain is `ferry local-executor ARGS...`: it makes itself a
// child subreaper, starts `ferry local-executor --serve ARGS...` as its
// only child (told of the guard's death by SIGTERM, its parent-death
// signal), reaps every orphan the executor's jobs leave, and, when the
// executor ends in any way, kills everything below itself and ends with
// the executor's exit code. SIGTERM and SIGINT are passed to the executor.
func ExecutorGuardMain(args []string) int {
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "ferry local-executor: cannot become a child subreaper: %v\n", errno)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	signal.Ignore(syscall.SIGHUP)
	// The executor's timer slack is Ferry's, its jobs' the user's
	// (internal/timerslack).
	timerslack.KeepUser()
	cmd := exec.Command("/proc/self/exe", append([]string{ExecutorCommand, ExecutorServe}, args...)...)
	cmd.Args[0] = os.Args[0] // as ps shows it: the binary's name, not /proc/self/exe
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := timerslack.With(timerslack.Ferry, cmd.Start); err != nil {
		fmt.Fprintf(os.Stderr, "ferry local-executor: start the executor: %v\n", err)
		return 1
	}
	exited := make(chan int, 1)
	go reapAll(cmd.Process.Pid, exited)
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case code := <-exited:
			t := &jobTree{self: os.Getpid(), pgid: -1}
			for range 100 {
				pids := t.members()
				if len(pids) == 0 {
					break
				}
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				time.Sleep(100 * time.Millisecond)
			}
			return code
		}
	}
}
