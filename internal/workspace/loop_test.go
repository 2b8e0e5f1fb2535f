package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// A kick runs the loop's passes except the tick-only ones (the lease
// check), which run first and then on ticks alone.
func TestLoopRunsTickOnlyPassesOnTicks(t *testing.T) {
	s, _ := newService(t, &fakeTarget{capacity: 1})
	ctx, cancel := context.WithCancel(context.Background())
	// Buffered, so a pass that ran when it should not is read by expect
	// instead of blocking the loop and the test.
	kick := make(chan struct{}, 1)
	tick := make(chan time.Time, 1)
	ran := make(chan string)
	pass := func(name string) func(context.Context) error {
		return func(context.Context) error { ran <- name; return nil }
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		s.loop(ctx, kick, tick, loopPass{name: "every", run: pass("every")}, loopPass{name: "tick", run: pass("tick"), tickOnly: true})
	})
	defer func() { cancel(); wg.Wait() }()

	expect := func(when string, want ...string) {
		t.Helper()
		for _, w := range want {
			if got := <-ran; got != w {
				t.Fatalf("%s: pass %q ran, want %q", when, got, w)
			}
		}
	}
	expect("start", "every", "tick")
	kick <- struct{}{}
	expect("after a kick", "every")
	kick <- struct{}{}
	expect("after a second kick", "every")
	tick <- time.Time{}
	expect("after a tick", "every", "tick")
}

// SubmitJob answers with the job as submitted, made from the record it
// stored (not read back): Queued, with its creation time and spec.
func TestSubmitJobAnswersTheJobAsSubmitted(t *testing.T) {
	s, _ := newService(t, &fakeTarget{capacity: 1})
	v, err := s.SubmitJob(context.Background(), owner, Submission{Spec: &spec.Job{Name: "a", Command: "echo hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "a" || v.Status != apitypes.StatusQueued || v.Created == nil || v.Spec == nil || v.Spec.Command != "echo hi" || v.Attempt != 0 {
		t.Errorf("SubmitJob = %+v, want job a Queued with its creation time and spec", v)
	}
}
