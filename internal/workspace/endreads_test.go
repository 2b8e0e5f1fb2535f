package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"sync/atomic"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

// countingStore counts the reads of one job record (GetJob) made through it.
type countingStore struct {
	store.Store
	gets atomic.Int64
}

func (c *countingStore) GetJob(ctx context.Context, name string) (store.Job, error) {
	c.gets.Add(1)
	return c.Store.GetJob(ctx, name)
}

// The final report of a job that declares no output to register as a
// data asset is one transaction: the registration's read of the record
// after it is skipped, as nothing is owed (bench/dispatch).
func TestFinalReportOwingNoRegistrationReadsNoRecord(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1}
	s, _ := newService(t, target)
	cs := &countingStore{Store: s.st}
	s.st = cs
	submit(t, s, "plain")
	dispatch(t, s)
	zero := 0
	before := cs.gets.Load()
	if err := s.ReportStatus(ctx, runPrincipal("plain", 1), "plain", 1, apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero, Running: "command started"}); err != nil {
		t.Fatal(err)
	}
	if n := cs.gets.Load() - before; n != 0 {
		t.Errorf("the final report read the job's record %d times; want 0 (nothing is owed)", n)
	}
	if j := status(t, s, "plain"); j.Status != apitypes.StatusCompleted {
		t.Fatalf("status %s, want Completed", j.Status)
	}
}

// drained empties a kick channel and says whether it held a kick.
func drained(k chan struct{}) bool {
	select {
	case <-k:
		return true
	default:
		return false
	}
}

// The end of an attempt on a compute the dispatcher starts jobs on wakes
// the dispatcher alone: the pool loop, which would read the computes and
// nodes to find nothing changed, is not woken (bench/dispatch). The end
// of an attempt on a compute the dispatcher does not know as its own
// still wakes both.
func TestSlotEndWakesTheDispatcherAlone(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 2}
	s, _ := newService(t, target)
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	zero := 0
	end := apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero}

	drained(s.kick)
	drained(s.kickPools)
	if err := s.ReportStatus(ctx, runPrincipal("a", 1), "a", 1, end); err != nil {
		t.Fatal(err)
	}
	if !drained(s.kick) {
		t.Error("the end of a's attempt did not wake the dispatcher")
	}
	if drained(s.kickPools) {
		t.Error("the end of a's attempt, on the local compute, woke the pool loop")
	}

	// As if the compute were one the pool loop places.
	s.slotComputes.Store(&map[string]bool{})
	if err := s.ReportStatus(ctx, runPrincipal("b", 1), "b", 1, end); err != nil {
		t.Fatal(err)
	}
	if !drained(s.kick) || !drained(s.kickPools) {
		t.Error("the end of b's attempt, on a compute not the dispatcher's, did not wake both loops")
	}
}

// A job submitted to a compute the dispatcher starts jobs on wakes the
// dispatcher alone; before the dispatcher's first pass, or on a compute
// it does not know as its own, a submit wakes both loops.
func TestSlotSubmitWakesTheDispatcherAlone(t *testing.T) {
	s, _ := newService(t, &fakeTarget{capacity: 1})
	drained(s.kick)
	drained(s.kickPools)
	submit(t, s, "first")
	if !drained(s.kick) || !drained(s.kickPools) {
		t.Error("a submit before the dispatcher's first pass did not wake both loops")
	}
	dispatch(t, s)
	submit(t, s, "second")
	if !drained(s.kick) {
		t.Error("the submit of second did not wake the dispatcher")
	}
	if drained(s.kickPools) {
		t.Error("the submit of second, to the local compute, woke the pool loop")
	}
	s.slotComputes.Store(&map[string]bool{}) // as if the compute were one the pool loop places
	submit(t, s, "third")
	if !drained(s.kick) || !drained(s.kickPools) {
		t.Error("the submit of third, to a compute not the dispatcher's, did not wake both loops")
	}
}

// A job submitted to a compute whose slots were all taken when the last
// dispatch pass began wakes nothing: a pass would find no free slot. A
// wake that may free one (an end) makes the next submit wake the
// dispatcher again, until a pass finds the compute full once more.
func TestSubmitToAFullComputeWakesNothing(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "first")
	dispatch(t, s) // first starts: the pass began with a free slot
	submit(t, s, "second")
	if !drained(s.kick) {
		t.Fatal("a submit after a pass that found a free slot did not wake the dispatcher")
	}
	dispatch(t, s) // the pass begins with first holding the slot
	drained(s.kick)
	drained(s.kickPools)
	submit(t, s, "third")
	if drained(s.kick) || drained(s.kickPools) {
		t.Error("a submit to a compute whose slots were all taken woke a loop")
	}
	zero := 0
	if err := s.ReportStatus(ctx, runPrincipal("first", 1), "first", 1, apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	if !drained(s.kick) {
		t.Fatal("the end of first did not wake the dispatcher")
	}
	submit(t, s, "fourth")
	if !drained(s.kick) {
		t.Error("a submit after an end, before the next pass, did not wake the dispatcher")
	}
	dispatch(t, s) // second starts
	if j := status(t, s, "second"); j.Status != apitypes.StatusPreparing {
		t.Errorf("second is %s after the pass, want Preparing", j.Status)
	}
	dispatch(t, s) // second holds the slot
	submit(t, s, "fifth")
	if drained(s.kick) {
		t.Error("a submit to the compute full again woke the dispatcher")
	}
}
