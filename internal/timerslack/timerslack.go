// Package timerslack gives Ferry's long-lived processes (the server and
// the local executor) a timer slack of Ferry, and the user code they
// start the slack it would have had without Ferry.
//
// A Go program's sysmon thread sleeps 20 µs between its rounds for as
// long as the program is busy, and starts again at 20 µs each time the
// program wakes from idle (runtime/proc.go). The server and the executor
// wake from idle several times for every small job, so on a 2-core
// machine sysmon's sleeps and the context switches they make were a fifth
// of the executor's CPU and a tenth of the server's (bench/dispatch, tenth
// round). A thread's timer slack (prctl(2), PR_SET_TIMERSLACK) lets the
// kernel end such a sleep up to that much later, together with other
// timers: with 1 ms, sysmon wakes at most about a thousand times a second.
// Nothing in these processes needs a timer finer than that (heartbeats
// are seconds apart, logs are shipped every 50 ms), and I/O and signals
// wake them as soon as they come whatever the slack. It is what systemd's
// TimerSlackNSec= sets for a service.
//
// A thread gets its slack from the thread that made it, and a process
// from the thread that forked it, and execve(2) keeps it. So the server
// sets its slack on one thread and execs itself again (Reexec), and the
// executor's guard sets it on the thread that starts the executor. Both
// first put the slack they had in UserVar, which their children inherit;
// whatever starts user code (a job's shell, a setup script, a session's
// shell) starts it with that slack (StartUser), so a job's timers are as
// precise as they would be without Ferry.
package timerslack

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Ferry is the timer slack of Ferry's long-lived processes.
const Ferry = time.Millisecond

// UserVar holds, in nanoseconds, the timer slack user code starts with:
// the slack the first Ferry process that raised its own had before. The
// runner leaves FERRY_ variables out of a job's environment.
const UserVar = "FERRY_USER_TIMER_SLACK"

const (
	prSetTimerSlack = 29 // PR_SET_TIMERSLACK of prctl(2)
	prGetTimerSlack = 30 // PR_GET_TIMERSLACK
)

// Thread is the calling thread's timer slack. The caller holds its
// thread (runtime.LockOSThread) if it means to set it back.
func Thread() (time.Duration, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prGetTimerSlack, 0, 0, 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return time.Duration(n), nil
}

// setThread sets the calling thread's timer slack to d (at least 1 ns: 0
// would mean the thread's default). The caller holds its thread.
func setThread(d time.Duration) error {
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetTimerSlack, uintptr(max(d, 1)), 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// With runs start on the calling goroutine's thread with the timer slack
// d, and sets the thread's own back after it, so that a process start
// forks with d. d of 0 runs start as it is, as does a thread whose slack
// cannot be changed. It holds the thread meanwhile, and leaves it held if
// the caller held it.
func With(d time.Duration, start func() error) error {
	if d <= 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := Thread()
	if err != nil || own == d || setThread(d) != nil {
		return start()
	}
	defer setThread(own)
	return start()
}

// User is the timer slack user code starts with: UserVar's, or 0 (as it
// is) when no Ferry process above this one raised its slack.
func User() time.Duration {
	n, err := strconv.ParseInt(os.Getenv(UserVar), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n)
}

// StartUser runs start, the start of a process that runs user code, with
// the user's timer slack (User).
func StartUser(start func() error) error {
	return With(User(), start)
}

// KeepUser puts the calling thread's slack in UserVar unless a process
// above this one did: what a process that raises its own slack calls
// first.
func KeepUser() {
	if User() > 0 {
		return
	}
	if own, err := Thread(); err == nil {
		os.Setenv(UserVar, strconv.FormatInt(int64(own), 10))
	}
}

// Reexec gives the calling process the timer slack Ferry on every thread:
// unless the calling thread has it already, it keeps the user's slack
// (KeepUser), sets Ferry on the calling thread and execs the process's own
// binary again with the same arguments and environment, in the same
// process. It returns only when it could not (the binary is gone, or
// prctl refused), with the slack as it was.
func Reexec() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := Thread()
	if err != nil {
		return err
	}
	if own == Ferry {
		return nil
	}
	KeepUser()
	if err := setThread(Ferry); err != nil {
		return err
	}
	err = syscall.Exec("/proc/self/exe", os.Args, os.Environ())
	_ = setThread(own)
	return err
}
