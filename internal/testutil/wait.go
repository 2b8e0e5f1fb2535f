package testutil

import (
	"testing"
	"time"
)

// The pause between two looks at a condition starts at pollFirst, so what
// happens at once in the test's own process is seen at once, and doubles
// up to pollMax, so a condition that asks a cluster, runs a command or
// types into a terminal is not asked hundreds of times a second.
const (
	pollFirst = 5 * time.Millisecond
	pollMax   = 100 * time.Millisecond
)

// WaitFor calls cond until it holds, and fails the test, naming what it
// waited for, when it does not within timeout. The timeout only keeps a
// broken test from hanging; nothing asserts how soon cond holds. cond runs
// on the test's goroutine, so it may fail the test itself (t.Fatal) on an
// error that no waiting mends.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if _, ok := poll(timeout, func() (bool, string) { return cond(), "" }); !ok {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// WaitForReason is WaitFor for a condition that says why it does not hold
// yet; the failure shows the last of those reasons, which is what was seen
// when the time ran out.
func WaitForReason(t testing.TB, timeout time.Duration, what string, cond func() (done bool, why string)) {
	t.Helper()
	if why, ok := poll(timeout, cond); !ok {
		t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, why)
	}
}

// poll calls cond until it holds or timeout has passed, and returns
// whether it held and its last reason.
func poll(timeout time.Duration, cond func() (bool, string)) (string, bool) {
	deadline := time.Now().Add(timeout)
	for pause := pollFirst; ; pause = min(2*pause, pollMax) {
		done, why := cond()
		if done {
			return why, true
		}
		if time.Now().After(deadline) {
			return why, false
		}
		time.Sleep(pause)
	}
}
