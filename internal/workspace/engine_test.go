package workspace

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
)

// fakeEngine is a self-queueing target with every optional power, as a
// Slurm target has them: the compute.Target interface and its powers are a
// boundary Ferry owns, and these tests are about what the workspace does
// with them. Launch puts each attempt in the engine's queue as Pending.
type fakeEngine struct {
	mu        sync.Mutex
	capacity  int
	next      int
	launched  []compute.Launch
	states    map[compute.Handle]compute.EngineState
	inspects  [][]compute.Handle // the handles of each Inspect call
	canceled  []compute.Handle
	cancelErr error
	batches   []int // the size of each LaunchBatch call
	// onLaunch, when set, runs inside Launch after the attempt is queued
	// (a runner the engine starts before Launch has returned).
	onLaunch func(l compute.Launch, h compute.Handle)
	// fail, when set, is asked first: an error is Launch's (nothing is
	// queued).
	fail func(l compute.Launch) error
}

var (
	_ compute.Target        = (*fakeEngine)(nil)
	_ compute.Canceller     = (*fakeEngine)(nil)
	_ compute.Inspector     = (*fakeEngine)(nil)
	_ compute.SelfQueueing  = (*fakeEngine)(nil)
	_ compute.BatchLauncher = (*fakeEngine)(nil)
)

func newFakeEngine(capacity int) *fakeEngine {
	return &fakeEngine{capacity: capacity, states: map[compute.Handle]compute.EngineState{}}
}

func (f *fakeEngine) Type() string                             { return "fake-engine" }
func (f *fakeEngine) Admit(*spec.Job, *environment.Spec) error { return nil }
func (f *fakeEngine) Capacity() int                            { return f.capacity }
func (f *fakeEngine) QueuesItself() bool                       { return true }

func (f *fakeEngine) Launch(_ context.Context, l compute.Launch) (compute.Handle, error) {
	f.mu.Lock()
	if f.fail != nil {
		if err := f.fail(l); err != nil {
			f.mu.Unlock()
			return "", err
		}
	}
	f.next++
	h := compute.Handle(fmt.Sprint(4000 + f.next))
	f.launched = append(f.launched, l)
	f.states[h] = compute.EngineState{Phase: compute.PhasePending, Reason: "None"}
	hook := f.onLaunch
	f.mu.Unlock()
	if hook != nil {
		hook(l, h)
	}
	return h, nil
}

// LaunchBatch launches ls one after another, in their order, so the
// handles follow the dispatcher's picks; batches records each call.
func (f *fakeEngine) LaunchBatch(ctx context.Context, ls []compute.Launch) []compute.Launched {
	f.mu.Lock()
	f.batches = append(f.batches, len(ls))
	f.mu.Unlock()
	rs := make([]compute.Launched, len(ls))
	for i, l := range ls {
		rs[i].Handle, rs[i].Err = f.Launch(ctx, l)
	}
	return rs
}

func (f *fakeEngine) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

func (f *fakeEngine) Cancel(_ context.Context, h compute.Handle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancelErr != nil {
		return f.cancelErr
	}
	f.canceled = append(f.canceled, h)
	if st, ok := f.states[h]; ok && st.Phase != compute.PhaseEnded {
		f.states[h] = compute.EngineState{Phase: compute.PhaseEnded, Reason: "CANCELLED", Outcome: apitypes.StatusCanceled}
	}
	return nil
}

func (f *fakeEngine) Inspect(_ context.Context, hs []compute.Handle) (map[compute.Handle]compute.EngineState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inspects = append(f.inspects, slices.Clone(hs))
	out := map[compute.Handle]compute.EngineState{}
	for _, h := range hs {
		if st, ok := f.states[h]; ok {
			out[h] = st
		}
	}
	return out, nil
}

func (f *fakeEngine) set(h string, st compute.EngineState) {
	f.mu.Lock()
	f.states[compute.Handle(h)] = st
	f.mu.Unlock()
}

func (f *fakeEngine) forget(h string) {
	f.mu.Lock()
	delete(f.states, compute.Handle(h))
	f.mu.Unlock()
}

func (f *fakeEngine) launches() []compute.Launch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.launched)
}

func (f *fakeEngine) cancels() []compute.Handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.canceled)
}

func (f *fakeEngine) inspectCalls() [][]compute.Handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.inspects)
}

// engineStore opens a store that outlives the services made on it, so a
// test can start a second server on what the first left.
func engineStore(t *testing.T) (store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dir
}

// engineService makes a Service on st whose every compute is target.
func engineService(t *testing.T, st store.Store, dir string, target compute.Target, clk *clock) *Service {
	t.Helper()
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Config{
		PoolTypes: testPoolTypes,
		Store:     st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
		Targets:      func(*spec.Compute) (compute.Target, error) { return target, nil },
		LeaseTimeout: 10 * time.Second, CancelGrace: 10 * time.Second, Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newEngineService(t *testing.T, e *fakeEngine) (*Service, *clock) {
	t.Helper()
	st, dir := engineStore(t)
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return engineService(t, st, dir, e, clk), clk
}

// reconcile runs one engine reconcile pass.
func reconcile(t *testing.T, s *Service) {
	t.Helper()
	if err := s.reconcileEngines(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// queuedEvents are a job's status changes from Queued to Queued: the
// engine's reasons as they changed.
func queuedEvents(j *apitypes.Job) []string {
	var out []string
	for _, e := range j.History {
		if e.From == apitypes.StatusQueued && e.To == apitypes.StatusQueued {
			out = append(out, e.Reason)
		}
	}
	return out
}

func TestSelfQueueingAttemptIsQueuedWithTheEnginesReason(t *testing.T) {
	e := newFakeEngine(4)
	s, _ := newEngineService(t, e)
	submit(t, s, "a")
	dispatch(t, s)
	j := status(t, s, "a")
	if j.Status != apitypes.StatusQueued || j.Attempt != 1 || j.Handle != "4001" || !strings.Contains(j.StatusReason, "waiting in its queue") {
		t.Fatalf("after the launch: status %s, attempt %d, handle %q, reason %q; want Queued, 1, 4001, waiting in its queue", j.Status, j.Attempt, j.Handle, j.StatusReason)
	}
	dispatch(t, s)
	if n := len(e.launches()); n != 1 {
		t.Fatalf("an attempt waiting in the engine's queue was dispatched again: %d launches", n)
	}

	e.set("4001", compute.EngineState{Phase: compute.PhasePending, Reason: "Priority"})
	reconcile(t, s)
	e.set("4001", compute.EngineState{Phase: compute.PhasePending, Reason: "Resources"})
	reconcile(t, s)
	reconcile(t, s) // the same answer again changes nothing
	j = status(t, s, "a")
	if j.Status != apitypes.StatusQueued || !strings.HasSuffix(j.StatusReason, ": Resources") {
		t.Errorf("status %s (%s), want Queued with the engine's reason Resources", j.Status, j.StatusReason)
	}
	want := []string{
		"queued: handed to compute local (engine handle 4001); waiting in its queue",
		"queued: waiting in compute local's queue: Priority",
		"queued: waiting in compute local's queue: Resources",
	}
	if d := cmp.Diff(want, queuedEvents(j)); d != "" {
		t.Errorf("reason changes in the history (-want +got):\n%s", d)
	}
	if n := len(e.launches()); n != 1 {
		t.Errorf("%d launches, want 1", n)
	}
}

func TestSelfQueueingAttemptsCountAgainstCapacity(t *testing.T) {
	e := newFakeEngine(2)
	s, _ := newEngineService(t, e)
	for _, n := range []string{"a", "b", "c"} {
		submit(t, s, n)
	}
	dispatch(t, s)
	dispatch(t, s)
	if got := len(e.launches()); got != 2 {
		t.Fatalf("%d attempts handed to an engine of capacity 2", got)
	}
	if c := status(t, s, "c"); c.Status != apitypes.StatusQueued || c.Handle != "" || c.Attempt != 0 {
		t.Fatalf("c: %s, handle %q, attempt %d; want Queued, not launched", c.Status, c.Handle, c.Attempt)
	}
	// One ends in the engine: its slot goes to c.
	zero := 0
	e.set("4001", compute.EngineState{Phase: compute.PhaseEnded, Reason: "COMPLETED", Outcome: apitypes.StatusCompleted, ExitCode: &zero})
	reconcile(t, s)
	dispatch(t, s)
	if got := e.launches(); len(got) != 3 || got[2].Job != "c" {
		t.Fatalf("after a slot freed: launches %v, want c third", got)
	}
}

// An attempt waiting in its engine's queue is not failed by the runner
// lease, however long it waits; once its runner has called, the lease
// applies as everywhere, and a later Pending answer does not demote it.
func TestEngineQueuedAttemptIsNotLeased(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(2)
	s, clk := newEngineService(t, e)
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	clk.advance(time.Hour)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if j := status(t, s, n); j.Status != apitypes.StatusQueued {
			t.Fatalf("%s after an hour in the engine's queue: %s (%s)", n, j.Status, j.StatusReason)
		}
	}

	// a's runner starts: it is Preparing, and Running once it says so.
	if _, err := s.Assignment(ctx, runPrincipal("a", 1), "a", 1); err != nil {
		t.Fatal(err)
	}
	if j := status(t, s, "a"); j.Status != apitypes.StatusPreparing {
		t.Fatalf("a after its runner took its assignment: %s", j.Status)
	}
	if err := s.ReportStatus(ctx, runPrincipal("a", 1), "a", 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	e.set("4001", compute.EngineState{Phase: compute.PhasePending, Reason: "Resources"}) // a stale answer
	reconcile(t, s)
	if j := status(t, s, "a"); j.Status != apitypes.StatusRunning {
		t.Fatalf("a Pending answer demoted a running attempt to %s (%s)", j.Status, j.StatusReason)
	}

	// b's runner calls once, then falls silent: the lease fails it.
	if _, err := s.Assignment(ctx, runPrincipal("b", 1), "b", 1); err != nil {
		t.Fatal(err)
	}
	clk.advance(11 * time.Second)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if j := status(t, s, "b"); j.Status != apitypes.StatusFailed || !strings.Contains(j.StatusReason, "runner lost") {
		t.Errorf("b, silent after its runner started: %s (%s), want Failed as lost", j.Status, j.StatusReason)
	}
}

// A runner the engine starts before Launch has returned is not sent back
// to Queued when the handle is stored.
func TestRunnerFasterThanItsLaunchStaysStarted(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(1)
	s, _ := newEngineService(t, e)
	e.onLaunch = func(l compute.Launch, _ compute.Handle) {
		if _, err := s.Assignment(ctx, runPrincipal(l.Job, l.Attempt), l.Job, l.Attempt); err != nil {
			t.Error(err)
		}
	}
	submit(t, s, "a")
	dispatch(t, s)
	j := status(t, s, "a")
	if j.Status != apitypes.StatusPreparing || j.Handle != "4001" {
		t.Errorf("a whose runner called during its launch: %s with handle %q, want Preparing with 4001", j.Status, j.Handle)
	}
}

func TestEngineEndWithoutRunnerReport(t *testing.T) {
	e := newFakeEngine(2)
	s, _ := newEngineService(t, e)
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	code := 137
	e.set("4001", compute.EngineState{Phase: compute.PhaseEnded, Reason: "TIMEOUT", Outcome: apitypes.StatusFailed, ExitCode: &code})
	e.set("4002", compute.EngineState{Phase: compute.PhaseEnded, Reason: "CANCELLED by 0", Outcome: apitypes.StatusCanceled})
	reconcile(t, s)
	a := status(t, s, "a")
	if a.Status != apitypes.StatusFailed || a.ExitCode == nil || *a.ExitCode != 137 || !strings.Contains(a.StatusReason, "TIMEOUT") || a.Error == "" {
		t.Errorf("a: %s, exit %v, reason %q, error %q; want Failed, 137, the engine's TIMEOUT, an error", a.Status, a.ExitCode, a.StatusReason, a.Error)
	}
	if b := status(t, s, "b"); b.Status != apitypes.StatusCanceled || !strings.Contains(b.StatusReason, "CANCELLED") {
		t.Errorf("b: %s (%s), want Canceled as the engine says", b.Status, b.StatusReason)
	}
}

// An attempt its engine took back (preemption) is no failure: the job is
// queued again and runs as a new attempt.
func TestEngineRequeueMakesANewAttempt(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(1)
	s, _ := newEngineService(t, e)
	submit(t, s, "a")
	dispatch(t, s)
	if _, err := s.Assignment(ctx, runPrincipal("a", 1), "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportStatus(ctx, runPrincipal("a", 1), "a", 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	e.set("4001", compute.EngineState{Phase: compute.PhaseEnded, Reason: "PREEMPTED", Requeue: true})
	reconcile(t, s)
	j := status(t, s, "a")
	if j.Status != apitypes.StatusQueued || j.Handle != "" || !strings.Contains(j.StatusReason, "PREEMPTED") {
		t.Fatalf("after the engine took attempt 1 back: %s, handle %q (%s); want Queued without a handle", j.Status, j.Handle, j.StatusReason)
	}
	if len(j.Preemptions) != 1 || j.Preemptions[0].Attempt != 1 {
		t.Errorf("preemptions %+v, want attempt 1", j.Preemptions)
	}
	dispatch(t, s)
	got := e.launches()
	if len(got) != 2 || got[1].Job != "a" || got[1].Attempt != 2 {
		t.Fatalf("launches %+v, want a's attempt 2 second", got)
	}
	if j := status(t, s, "a"); j.Attempt != 2 || j.Handle != "4002" || j.Status != apitypes.StatusQueued {
		t.Errorf("a: attempt %d, handle %q, %s; want attempt 2 waiting as 4002", j.Attempt, j.Handle, j.Status)
	}
}

func TestEngineGoneIsLost(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(2)
	s, _ := newEngineService(t, e)
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	// b's runner spoke: its lease, not the engine's silence, decides.
	if _, err := s.Assignment(ctx, runPrincipal("b", 1), "b", 1); err != nil {
		t.Fatal(err)
	}
	e.forget("4001")
	e.forget("4002")
	reconcile(t, s)
	a := status(t, s, "a")
	if a.Status != apitypes.StatusFailed || !strings.Contains(a.StatusReason, "runner lost") || !strings.Contains(a.StatusReason, "4001") {
		t.Errorf("a, unknown to its engine: %s (%s), want Failed as lost naming the handle", a.Status, a.StatusReason)
	}
	if b := status(t, s, "b"); b.Status != apitypes.StatusPreparing {
		t.Errorf("b, whose runner spoke: %s (%s), want Preparing", b.Status, b.StatusReason)
	}
}

func TestCancelWhilePendingGoesThroughTheEngine(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(1)
	s, _ := newEngineService(t, e)
	submit(t, s, "a")
	dispatch(t, s)

	e.cancelErr = errors.New("scancel: connection refused")
	if _, err := s.CancelJob(ctx, owner, "a"); apperr.CodeOf(err) != apperr.CodeUnavailable || !strings.Contains(err.Error(), "try again") {
		t.Fatalf("cancel the engine refused: %v, want an Unavailable error saying to try again", err)
	}
	if j := status(t, s, "a"); j.Status != apitypes.StatusQueued {
		t.Fatalf("a after a failed engine cancel: %s, want still Queued", j.Status)
	}

	e.cancelErr = nil
	j, err := s.CancelJob(ctx, owner, "a")
	if err != nil || j.Status != apitypes.StatusCanceled {
		t.Fatalf("cancel: %+v %v; want Canceled at once", j, err)
	}
	if d := cmp.Diff([]compute.Handle{"4001"}, e.cancels()); d != "" {
		t.Errorf("engine cancels (-want +got):\n%s", d)
	}
	// The attempt's run token is revoked: a runner the engine started
	// anyway is refused.
	secret := e.launches()[0].RunToken
	if _, err := s.st.TokenByHash(ctx, auth.Hash(secret)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("run token after the cancel: %v, want it gone", err)
	}
	if _, err := s.CancelJob(ctx, owner, "a"); apperr.CodeOf(err) != apperr.CodeConflict {
		t.Errorf("cancel again: %v, want a conflict", err)
	}
	if n := len(e.cancels()); n != 1 {
		t.Errorf("%d engine cancels, want 1", n)
	}
	// Its slot is free again.
	submit(t, s, "b")
	dispatch(t, s)
	if got := e.launches(); len(got) != 2 || got[1].Job != "b" {
		t.Errorf("launches %v, want b second", got)
	}
}

// A running attempt is canceled by its runner; only when it has not ended
// the attempt after the grace is the engine told, once.
func TestCancelRunningAttemptThroughTheEngineAfterTheGrace(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(1)
	s, clk := newEngineService(t, e)
	submit(t, s, "a")
	dispatch(t, s)
	who := runPrincipal("a", 1)
	if _, err := s.Assignment(ctx, who, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	e.set("4001", compute.EngineState{Phase: compute.PhaseRunning})
	if j, err := s.CancelJob(ctx, owner, "a"); err != nil || j.Status != apitypes.StatusCancelRequested {
		t.Fatalf("cancel: %+v %v", j, err)
	}
	if n := len(e.cancels()); n != 0 {
		t.Fatalf("the engine was told at once (%d cancels); the runner has the grace first", n)
	}
	clk.advance(10 * time.Second) // the grace, not the slack
	if _, err := s.Heartbeat(ctx, who, "a", 1); err != nil {
		t.Fatal(err)
	}
	reconcile(t, s)
	if n := len(e.cancels()); n != 0 {
		t.Fatalf("the engine was told within the grace (%d cancels)", n)
	}
	clk.advance(cancelGraceSlack + time.Second)
	if _, err := s.Heartbeat(ctx, who, "a", 1); err != nil { // a runner that heartbeats but does not stop
		t.Fatal(err)
	}
	reconcile(t, s)
	if d := cmp.Diff([]compute.Handle{"4001"}, e.cancels()); d != "" {
		t.Fatalf("engine cancels after the grace (-want +got):\n%s", d)
	}
	e.set("4001", compute.EngineState{Phase: compute.PhaseRunning})
	reconcile(t, s)
	if n := len(e.cancels()); n != 1 {
		t.Errorf("%d engine cancels, want 1: it is told once", n)
	}
	// The engine ends it (the runner never reports): Canceled, by the owner.
	e.set("4001", compute.EngineState{Phase: compute.PhaseEnded, Reason: "CANCELLED", Outcome: apitypes.StatusFailed})
	reconcile(t, s)
	if j := status(t, s, "a"); j.Status != apitypes.StatusCanceled || j.StatusReason != "canceled by owner" {
		t.Errorf("a after the engine ended it: %s (%s), want Canceled by owner", j.Status, j.StatusReason)
	}
}

// A server started again asks the engine, in one call, about every handle
// the one before stored, and acts on each answer.
func TestEngineReconcileAfterRestart(t *testing.T) {
	st, dir := engineStore(t)
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	first := newFakeEngine(4)
	s1 := engineService(t, st, dir, first, clk)
	for _, n := range []string{"a", "b", "c"} {
		submit(t, s1, n)
	}
	dispatch(t, s1)

	// The second server's target knows the engine's jobs only by handle.
	again := newFakeEngine(4)
	zero := 0
	again.set("4001", compute.EngineState{Phase: compute.PhasePending, Reason: "QOSMaxJobsPerUserLimit"})
	again.set("4002", compute.EngineState{Phase: compute.PhaseEnded, Reason: "COMPLETED", Outcome: apitypes.StatusCompleted, ExitCode: &zero})
	clk.advance(time.Hour)
	s2 := engineService(t, st, dir, again, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s2.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// The reconcile's first pass runs at once; wait for c's end.
	for {
		changed := s2.Changes("c")
		if j := status(t, s2, "c"); apitypes.IsTerminal(j.Status) {
			break
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("the restarted server did not reconcile c")
		}
	}
	if a := status(t, s2, "a"); a.Status != apitypes.StatusQueued || !strings.HasSuffix(a.StatusReason, "QOSMaxJobsPerUserLimit") {
		t.Errorf("a: %s (%s), want Queued with the engine's reason", a.Status, a.StatusReason)
	}
	if b := status(t, s2, "b"); b.Status != apitypes.StatusCompleted || b.ExitCode == nil || *b.ExitCode != 0 {
		t.Errorf("b: %s, exit %v; want Completed, 0", b.Status, b.ExitCode)
	}
	if c := status(t, s2, "c"); c.Status != apitypes.StatusFailed || !strings.Contains(c.StatusReason, "runner lost") {
		t.Errorf("c, unknown to the engine: %s (%s), want Failed as lost", c.Status, c.StatusReason)
	}
	calls := again.inspectCalls()
	if len(calls) == 0 {
		t.Fatal("no Inspect call")
	}
	slices.Sort(calls[0])
	if d := cmp.Diff([]compute.Handle{"4001", "4002", "4003"}, calls[0]); d != "" {
		t.Errorf("the first pass's one Inspect call asked about (-want +got):\n%s", d)
	}
	if n := len(again.launches()); n != 0 {
		t.Errorf("the restarted server launched %d attempts again", n)
	}
}

// A cancel asked while the attempt is being handed to the engine reaches
// the engine as soon as the launch returns its handle.
func TestCancelDuringTheLaunchGoesThroughTheEngine(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(1)
	s, _ := newEngineService(t, e)
	e.onLaunch = func(l compute.Launch, _ compute.Handle) {
		if _, err := s.CancelJob(ctx, owner, l.Job); err != nil {
			t.Error(err)
		}
	}
	submit(t, s, "a")
	dispatch(t, s)
	if d := cmp.Diff([]compute.Handle{"4001"}, e.cancels()); d != "" {
		t.Fatalf("engine cancels (-want +got):\n%s", d)
	}
	reconcile(t, s)
	if j := status(t, s, "a"); j.Status != apitypes.StatusCanceled || j.StatusReason != "canceled by owner before it started" || j.Handle != "4001" {
		t.Errorf("a: %s (%s), handle %q; want Canceled by owner before it started, with the handle the engine gave", j.Status, j.StatusReason, j.Handle)
	}
	if n := len(e.cancels()); n != 1 {
		t.Errorf("%d engine cancels, want 1", n)
	}
}

// A runner its engine started (the pod is Running) that has not reached
// the server: the job stays Queued, and after runnerReachGrace its reason
// says which runner has not reached which URL, once (issue 29 #7); when
// the runner calls at last, the job goes on as ever.
func TestEngineStartedRunnerThatHasNotReachedTheServer(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(2)
	s, clk := newEngineService(t, e)
	submit(t, s, "a")
	dispatch(t, s)
	e.set("4001", compute.EngineState{Phase: compute.PhaseRunning, Reason: "Running", Runner: "pod a-1-0-x7k2q"})
	reconcile(t, s)
	clk.advance(runnerReachGrace - time.Second)
	reconcile(t, s)
	if j := status(t, s, "a"); strings.Contains(j.StatusReason, "has not reached") {
		t.Fatalf("before the grace: %s", j.StatusReason)
	}
	clk.advance(time.Second)
	reconcile(t, s)
	reconcile(t, s) // said once
	j := status(t, s, "a")
	want := "queued: the runner in pod a-1-0-x7k2q has not reached the server at http://test for 60 s; check that it can reach that address, which the server advertises (--advertise-url)"
	if j.Status != apitypes.StatusQueued || j.StatusReason != want {
		t.Fatalf("a's runner silent past the grace: %s (%s), want Queued (%s)", j.Status, j.StatusReason, want)
	}
	if got := queuedEvents(j); len(got) != 2 || got[1] != want {
		t.Errorf("reason changes in the history: %q, want the hand-off and then, once, %q", got, want)
	}

	if _, err := s.Assignment(ctx, runPrincipal("a", 1), "a", 1); err != nil {
		t.Fatal(err)
	}
	reconcile(t, s)
	if j := status(t, s, "a"); j.Status != apitypes.StatusPreparing || strings.Contains(j.StatusReason, "has not reached") {
		t.Errorf("after its runner called: %s (%s), want Preparing", j.Status, j.StatusReason)
	}
}

// A runner a target launched that never calls is failed by the lease, as
// ever, and the job says it never reached the server (not only that it
// fell silent); one that called and then fell silent keeps the old words.
func TestLeaseOfARunnerThatNeverReachedTheServer(t *testing.T) {
	ctx := context.Background()
	st, dir := engineStore(t)
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := engineService(t, st, dir, &launchOnly{}, clk)
	submit(t, s, "never")
	submit(t, s, "once")
	dispatch(t, s)
	if _, err := s.Heartbeat(ctx, runPrincipal("once", 1), "once", 1); err != nil {
		t.Fatal(err)
	}
	clk.advance(11 * time.Second) // the lease is 10 s
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	never, once := status(t, s, "never"), status(t, s, "once")
	if want := "runner lost: the runner on compute local has not reached the server at http://test for 11 s; check that it can reach that address, which the server advertises (--advertise-url)"; never.Status != apitypes.StatusFailed || never.StatusReason != want {
		t.Errorf("never: %s (%s), want Failed (%s)", never.Status, never.StatusReason, want)
	}
	if once.Status != apitypes.StatusFailed || once.StatusReason != "runner lost: no word from it for 11s" {
		t.Errorf("once: %s (%s), want Failed as silent", once.Status, once.StatusReason)
	}
}

// launchOnly is a target that launches runners and has no other power,
// as the local target without its executor.
type launchOnly struct{}

func (launchOnly) Type() string                                                   { return "launch-only" }
func (launchOnly) Admit(*spec.Job, *environment.Spec) error                       { return nil }
func (launchOnly) Capacity() int                                                  { return 4 }
func (launchOnly) Launch(context.Context, compute.Launch) (compute.Handle, error) { return "", nil }
