package runner

import (
	"runtime"
	"syscall"
	"time"
)

// The local executor runs with a timer slack of ExecutorTimerSlack, and
// its jobs with the slack its guard was started with.
//
// A Go program's sysmon thread sleeps 20 µs between its rounds for as
// long as the program is busy, and starts again at 20 µs each time the
// program wakes from idle (runtime/proc.go). The executor wakes from idle
// several times for every small job, so on a 2-core machine its sysmon's
// sleeps and the context switches they make were a fifth of the
// executor's CPU (bench/dispatch, tenth round). A thread's timer slack
// (prctl(2), PR_SET_TIMERSLACK) lets the kernel end such a sleep up to
// that much later, together with other timers: with 1 ms, sysmon wakes at
// most about a thousand times a second. Nothing in the executor needs a
// timer finer than that: its heartbeats are seconds apart, its log is
// shipped every 50 ms, and I/O and signals wake it as soon as they come
// whatever the slack. It is what systemd's TimerSlackNSec= sets for a
// service.
//
// A thread gets its slack from the thread that made it, and a process
// from the thread that forked it, so the guard sets it on the thread that
// starts the executor, and the executor puts the guard's own slack back
// on the thread that forks each job's shell: a job's timers are as
// precise as they would be without Ferry.

// ExecutorTimerSlack is the local executor's timer slack.
const ExecutorTimerSlack = time.Millisecond

const (
	prSetTimerSlack = 29 // PR_SET_TIMERSLACK of prctl(2)
	prGetTimerSlack = 30 // PR_GET_TIMERSLACK
)

// threadTimerSlack is the calling thread's timer slack. The caller holds
// its thread (runtime.LockOSThread) if it means to set it back.
func threadTimerSlack() (time.Duration, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prGetTimerSlack, 0, 0, 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return time.Duration(n), nil
}

// setThreadTimerSlack sets the calling thread's timer slack to d (at
// least 1 ns: 0 would mean the thread's default). The caller holds its
// thread (runtime.LockOSThread).
func setThreadTimerSlack(d time.Duration) error {
	if d < 1 {
		d = 1
	}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetTimerSlack, uintptr(d), 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// withTimerSlack runs start on the calling goroutine's thread with the
// timer slack d, and sets the thread's own back after it, so that a
// process start forks with d. d of 0 runs start as it is. It holds the
// thread meanwhile, and leaves it held if the caller held it.
func withTimerSlack(d time.Duration, start func() error) error {
	if d <= 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := threadTimerSlack()
	if err != nil || own == d || setThreadTimerSlack(d) != nil {
		return start() // the slack cannot be changed here: as it is
	}
	defer setThreadTimerSlack(own)
	return start()
}
