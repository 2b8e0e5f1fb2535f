package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a test that records its failure instead of failing the
// real one; Fatalf ends the goroutine it runs on, as testing.T's does.
type fatalRecorder struct {
	testing.TB
	failure string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failureOf calls wait with a recorder on a goroutine of its own, so that the
// recorder's Fatalf ends that goroutine and not the test's, and returns
// the failure, "" for none.
func failureOf(wait func(testing.TB)) string {
	r := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait(r)
	}()
	<-done
	return r.failure
}

// WaitFor looks again until the condition holds, and then returns
// without failing.
func TestWaitForHolds(t *testing.T) {
	calls := 0
	failure := failureOf(func(tb testing.TB) {
		WaitFor(tb, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
	})
	if failure != "" || calls != 3 {
		t.Errorf("WaitFor failed %q after %d calls, want no failure after 3", failure, calls)
	}
}

// A condition that never holds fails the test naming what was waited for,
// and for WaitForReason the last reason given.
func TestWaitForTimesOut(t *testing.T) {
	failure := failureOf(func(tb testing.TB) {
		WaitFor(tb, 20*time.Millisecond, "a thing that never comes", func() bool { return false })
	})
	if want := "timed out after 20ms waiting for a thing that never comes"; failure != want {
		t.Errorf("WaitFor failed %q, want %q", failure, want)
	}
	calls := 0
	failure = failureOf(func(tb testing.TB) {
		WaitForReason(tb, 20*time.Millisecond, "a count of zero", func() (bool, string) {
			calls++
			return false, fmt.Sprintf("the count is %d", calls)
		})
	})
	if want := fmt.Sprintf("waiting for a count of zero; last seen: the count is %d", calls); calls < 2 || !strings.HasSuffix(failure, want) {
		t.Errorf("WaitForReason failed %q after %d calls, want it to end %q after two calls or more", failure, calls, want)
	}
}
