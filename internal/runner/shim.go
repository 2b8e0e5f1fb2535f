package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/timerslack"
)

// A host job does not run as the runner's child but under a shim: the
// runner starts its own binary again as `ferry runner-shim`, and the shim
// starts the job's shell in a process group of its own and waits for it.
// The shim exists so that a runner that dies, even by SIGKILL, takes its
// job with it: the kernel tells the shim of its parent's death
// (PR_SET_PDEATHSIG, checked again by polling the parent pid), and the
// shim then kills the job's whole tree. A parent-death signal on the job's
// shell alone would leave its children and grandchildren running,
// re-parented to init, on a slot the server hands to the next job.
//
// The shim is a child subreaper, so everything the job starts stays its
// descendant even when an intermediate process exits or a process leaves
// the job's group with setsid: the tree is found by walking /proc from the
// shim, plus every member of the job's process group.
//
// Signals, from the runner to the shim:
//
//   - SIGTERM: send SIGTERM to the job's whole tree (cancel, timeout);
//   - SIGUSR1: send SIGKILL to the job's whole tree (the grace is over);
//   - SIGUSR2: the parent-death signal; the shim checks that its parent
//     is indeed gone, kills the tree and exits.
//
// The shim exits with the shell's exit code, or 128+signal when a signal
// ended the shell, as the runner reported before there was a shim. When
// the shell ends, what it left behind is killed, as before.

// ShimCommand is the hidden command of the ferry binary that runs ShimMain.
const ShimCommand = "runner-shim"

// shimExe is the binary the shim is started from: the runner's own. Tests
// of this package answer ShimCommand in their TestMain.
var shimExe = "/proc/self/exe"

// Signals between the runner and its shim (see above).
const (
	shimKill       = syscall.SIGUSR1
	shimParentDied = syscall.SIGUSR2
)

// shimArgs is the shim's command line for the job's shell command, run as
// cred's account when it is not nil.
func shimArgs(shellPath, command string, cred *syscall.Credential) []string {
	args := []string{ShimCommand, strconv.Itoa(os.Getpid())}
	if cred != nil {
		args = append(args, "--as", fmt.Sprintf("%d:%d", cred.Uid, cred.Gid))
	}
	return append(args, shellPath, "-c", command)
}

// shimStdin, in place of PROGRAM, makes a shim wait for its job on stdin
// (a warm shim: process.go).
const shimStdin = "--stdin"

// shimJob is the job a warm shim reads from its stdin, as JSON.
type shimJob struct {
	Args []string `json:"args"`         // PROGRAM ARGS...
	Dir  string   `json:"dir"`          // its working directory
	Env  []string `json:"env"`          // its whole environment
	Log  string   `json:"log"`          // the spool its stdout and stderr append to
	As   string   `json:"as,omitempty"` // UID:GID, as --as
}

// ShimMain is `ferry runner-shim PARENT-PID [--as UID:GID] PROGRAM ARGS...`
// or `ferry runner-shim PARENT-PID --stdin` (a shimJob on stdin; none, and
// it ends at once): it runs PROGRAM in a new process group, as UID:GID
// with no supplementary groups when given, as described above, and
// returns the exit code to exit with. The shim itself keeps the runner's
// account: the binary it is started from may be private to that account,
// and the shim must be able to end what the job starts.
func ShimMain(args []string) int {
	const usage = "ferry runner-shim: usage: runner-shim PARENT-PID [--as UID:GID] PROGRAM [ARGS...] | PARENT-PID --stdin (started by the runner, not by people)"
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil || parent <= 0 {
		fmt.Fprintf(os.Stderr, "ferry runner-shim: parent pid %q is not a pid\n", args[0])
		return 2
	}
	args = args[1:]
	as := ""
	if args[0] == "--as" {
		if len(args) < 3 {
			fmt.Fprintln(os.Stderr, usage)
			return 2
		}
		as, args = args[1], args[2:]
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, shimKill, shimParentDied)
	// The runner is the one told of hang-ups and Ctrl-C, and it decides.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0); e != 0 {
		fmt.Fprintf(os.Stderr, "ferry: cannot become the subreaper of the job (%v); processes that leave its group may outlive it\n", e)
	}
	attr := &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}}
	errOut := os.Stderr
	if args[0] == shimStdin {
		var job shimJob
		switch err := json.NewDecoder(os.Stdin).Decode(&job); {
		case err == io.EOF:
			return 0 // the runner needed no shim after all
		case err != nil || len(job.Args) == 0:
			fmt.Fprintf(os.Stderr, "ferry runner-shim: the job on stdin is not one (%v)\n", err)
			return 2
		}
		logf, err := os.OpenFile(job.Log, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ferry runner-shim: the job's log: %v\n", err)
			return 2
		}
		null, err := os.Open(os.DevNull)
		if err != nil {
			fmt.Fprintf(logf, "ferry: the command could not be started: %v\n", err)
			return 127
		}
		attr = &os.ProcAttr{Dir: job.Dir, Env: job.Env, Files: []*os.File{null, logf, logf}}
		errOut, as, args = logf, job.As, job.Args
	}
	if as != "" {
		var uid, gid uint32
		if _, err := fmt.Sscanf(as, "%d:%d", &uid, &gid); err != nil {
			fmt.Fprintf(os.Stderr, "ferry runner-shim: --as %q is not UID:GID\n", as)
			return 2
		}
		attr.Sys = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	} else {
		attr.Sys = &syscall.SysProcAttr{Setpgid: true}
	}
	if os.Getppid() != parent {
		return 128 + int(syscall.SIGKILL) // the runner died before the job started
	}
	var child *os.Process
	err = timerslack.StartUser(func() (err error) {
		child, err = os.StartProcess(args[0], args, attr)
		return err
	})
	if err != nil {
		fmt.Fprintf(errOut, "ferry: the command could not be started: %v\n", err)
		return 127
	}
	t := &jobTree{self: os.Getpid(), pgid: child.Pid}
	exited := make(chan int, 1)
	go reapAll(child.Pid, exited)

	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		select {
		case code := <-exited:
			t.killAll()
			return code
		case s := <-sigs:
			switch s {
			case syscall.SIGTERM:
				t.signal(syscall.SIGTERM)
			case shimKill:
				t.signal(syscall.SIGKILL)
			case shimParentDied:
				if os.Getppid() != parent {
					t.killAll()
					return 128 + int(syscall.SIGKILL)
				}
			}
		case <-poll.C:
			// The parent-death signal is tied to the runner's thread
			// that started the shim; polling covers any way it is missed.
			if os.Getppid() != parent {
				t.killAll()
				return 128 + int(syscall.SIGKILL)
			}
		}
	}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// reapAll collects every child of the shim: its own, and the orphans of
// the job that the kernel hands to it as their subreaper. It sends the exit
// code of child on exited.
func reapAll(child int, exited chan<- int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil:
			time.Sleep(100 * time.Millisecond) // no child now; an orphan may come
		case pid == child:
			code := ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			exited <- code
		}
	}
}

// jobTree is the processes of a job under its shim.
type jobTree struct {
	self int // the shim
	pgid int // the job's process group
}

// signal sends sig to every live process of the tree and says how many
// there were.
func (t *jobTree) signal(sig syscall.Signal) int {
	if t.empty() {
		return 0
	}
	_ = syscall.Kill(-t.pgid, sig)
	pids := t.members()
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	return len(pids)
}

// killAll kills the tree with SIGKILL until none of it is left, so that
// once the shim has ended, nothing of its job runs. A process in
// uninterruptible sleep may take a moment to die; after 10 s the shim
// gives up on it rather than hang.
func (t *jobTree) killAll() {
	for range 100 {
		if t.signal(syscall.SIGKILL) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// empty says, without reading every process of the machine, that nothing
// of the tree is left: the job's group has no member and the shim no child
// (as a subreaper, it is the ancestor of every process the job started).
// That is how most jobs end; where it cannot tell (a zombie not yet
// reaped, a kernel without /proc/PID/task/TID/children), it says false
// and the tree is looked for in /proc.
func (t *jobTree) empty() bool {
	if err := syscall.Kill(-t.pgid, 0); err != syscall.ESRCH {
		return false
	}
	dir := "/proc/" + strconv.Itoa(t.self) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, task := range tasks {
		children, err := os.ReadFile(dir + "/" + task.Name() + "/children")
		if err != nil || len(strings.TrimSpace(string(children))) > 0 {
			return false
		}
	}
	return true
}

// members are the live processes of the tree other than the shim: its
// descendants and the members of the job's process group. Zombies have
// ended and are left out.
func (t *jobTree) members() []int {
	procs := readProcs()
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	seen := map[int]bool{t.self: true}
	var out []int
	add := func(pid int) bool {
		if seen[pid] {
			return false
		}
		seen[pid] = true
		if p := procs[pid]; p.state != 'Z' && p.state != 'X' {
			out = append(out, pid)
		}
		return true
	}
	queue := []int{t.self}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if add(c) {
				queue = append(queue, c)
			}
		}
	}
	for pid, p := range procs {
		if p.pgrp == t.pgid {
			add(pid)
		}
	}
	return out
}

// procInfo is what the shim needs of a process from /proc/PID/stat.
type procInfo struct {
	state      byte
	ppid, pgrp int
}

// readProcs reads every process of the machine (of the shim's pid
// namespace). Processes that end while it reads are left out.
func readProcs() map[int]procInfo {
	out := map[int]procInfo{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name, field 2, is in parentheses and may hold
		// anything; fields are counted from the last ')'.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || len(f[0]) != 1 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgrp, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out[pid] = procInfo{state: f[0][0], ppid: ppid, pgrp: pgrp}
	}
	return out
}
