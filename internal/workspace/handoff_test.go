package workspace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/store"
)

// history is a job's status changes as "From -> To: reason".
func history(j *apitypes.Job) []string {
	var out []string
	for _, e := range j.History {
		out = append(out, fmt.Sprintf("%s -> %s: %s", e.From, e.To, e.Reason))
	}
	return out
}

// An attempt handed to a target that queues itself stays Queued from
// submit until its runner calls: the hand-off is no status, and while it
// is under way the job shows no handle and says it is being handed over.
func TestHandOffIsNoStatus(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(2)
	s, _ := newEngineService(t, e)
	var during *apitypes.Job
	e.onLaunch = func(l compute.Launch, _ compute.Handle) {
		j, err := s.GetJob(ctx, l.Job, true)
		if err != nil {
			t.Error(err)
			return
		}
		during = j
	}
	submit(t, s, "a")
	dispatch(t, s)
	if during == nil {
		t.Fatal("no launch")
	}
	if during.Status != apitypes.StatusQueued || during.Handle != "" || during.Attempt != 1 || !strings.Contains(during.StatusReason, "being handed to compute local's queue") {
		t.Errorf("during the hand-off: %s, handle %q, attempt %d, reason %q; want Queued, no handle, attempt 1, being handed over", during.Status, during.Handle, during.Attempt, during.StatusReason)
	}
	if _, err := s.Assignment(ctx, runPrincipal("a", 1), "a", 1); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Queued -> Queued: queued: handed to compute local (engine handle 4001); waiting in its queue",
		"Queued -> Preparing: runner started by compute local's engine",
	}
	if d := cmp.Diff(want, history(status(t, s, "a"))[1:]); d != "" { // [0] is the submit
		t.Errorf("history after the submit (-want +got):\n%s", d)
	}
}

// A burst of submissions reaches the engine in few calls: each dispatcher
// pass hands a target all its picks at once, and while maxHandOffs calls
// are under way new jobs wait and go in the next batch.
func TestBurstIsHandedOverInBatches(t *testing.T) {
	e := newFakeEngine(100)
	s, _ := newEngineService(t, e)
	for i := range 10 {
		submit(t, s, fmt.Sprintf("j%02d", i))
	}
	dispatch(t, s)
	if d := cmp.Diff([]int{10}, e.batchSizes()); d != "" {
		t.Fatalf("batch sizes (-want +got):\n%s", d)
	}
	for i, l := range e.launches() {
		j := status(t, s, l.Job)
		if want := fmt.Sprint(4001 + i); j.Handle != want || j.Status != apitypes.StatusQueued {
			t.Errorf("%s: %s with handle %q, want Queued with %s (the handle its launch got)", l.Job, j.Status, j.Handle, want)
		}
	}

	// maxHandOffs calls held open: later jobs are not picked meanwhile,
	// and all of them go in the batch after.
	release := make(chan struct{})
	var held sync.WaitGroup
	held.Add(maxHandOffs)
	e.onLaunch = func(compute.Launch, compute.Handle) {
		held.Done()
		<-release
	}
	ctx := context.Background()
	for i := range maxHandOffs {
		submit(t, s, fmt.Sprintf("h%d", i))
		if err := s.dispatch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held.Wait()
	for i := range 5 {
		submit(t, s, fmt.Sprintf("w%d", i))
	}
	if err := s.dispatch(ctx); err != nil {
		t.Fatal(err)
	}
	if w := status(t, s, "w0"); w.Attempt != 0 {
		t.Fatalf("w0 was picked while %d hand-offs were under way (attempt %d)", maxHandOffs, w.Attempt)
	}
	e.mu.Lock()
	e.onLaunch = nil
	e.mu.Unlock()
	close(release)
	s.handOffs.Wait()
	dispatch(t, s)
	if d := cmp.Diff([]int{10, 1, 1, 1, 1, 5}, e.batchSizes()); d != "" {
		t.Errorf("batch sizes (-want +got):\n%s", d)
	}
}

// plainEngine is a fakeEngine without LaunchBatch: the workspace launches
// its attempts one call each, several at once.
type plainEngine struct {
	compute.Target
	compute.Canceller
	compute.Inspector
	compute.SelfQueueing
}

func TestHandOffToATargetWithoutBatches(t *testing.T) {
	e := newFakeEngine(10)
	var inFlight, most int
	var mu sync.Mutex
	gate := make(chan struct{})
	e.onLaunch = func(compute.Launch, compute.Handle) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == 3 {
			close(gate)
		}
		mu.Unlock()
		select { // the first three wait for each other: they are launched at once
		case <-gate:
		case <-time.After(10 * time.Second):
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
	}
	st, dir := engineStore(t)
	s := engineService(t, st, dir, plainEngine{e, e, e, e}, &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	for _, n := range []string{"a", "b", "c"} {
		submit(t, s, n)
	}
	dispatch(t, s)
	if most != 3 || len(e.batchSizes()) != 0 {
		t.Errorf("%d launches at once, %d batches; want 3 Launch calls at once", most, len(e.batchSizes()))
	}
	for _, l := range e.launches() {
		j := status(t, s, l.Job)
		if j.Status != apitypes.StatusQueued || j.Handle == "" || !strings.Contains(j.StatusReason, "engine handle "+j.Handle) {
			t.Errorf("%s: %s, handle %q (%s)", l.Job, j.Status, j.Handle, j.StatusReason)
		}
	}
}

// A hand-off the engine refuses fails the job with the engine's words,
// revokes the attempt's token and frees its slot; a target that answers
// without a handle is refused the same way.
func TestFailedHandOffFailsTheJob(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(1)
	s, _ := newEngineService(t, e)
	tokens := map[string]string{}
	e.fail = func(l compute.Launch) error {
		tokens[l.Job] = l.RunToken
		if l.Job == "a" {
			return errors.New("sbatch: error: invalid partition specified: gpu")
		}
		return nil
	}
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	a := status(t, s, "a")
	if a.Status != apitypes.StatusFailed || !strings.Contains(a.StatusReason, "compute local could not take the attempt: sbatch: error: invalid partition") || a.Handle != "" {
		t.Fatalf("a: %s (%s), handle %q; want Failed with the engine's words", a.Status, a.StatusReason, a.Handle)
	}
	if _, err := s.st.TokenByHash(ctx, auth.Hash(tokens["a"])); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a's run token after its failed hand-off: %v, want revoked", err)
	}
	dispatch(t, s) // a's slot is free
	if b := status(t, s, "b"); b.Status != apitypes.StatusQueued || b.Handle != "4001" {
		t.Fatalf("b: %s, handle %q; want handed over in a's freed slot", b.Status, b.Handle)
	}
	if _, err := s.st.TokenByHash(ctx, auth.Hash(tokens["b"])); err != nil {
		t.Errorf("b's token: %v", err)
	}

	// A target that answers without a handle.
	e.fail = nil
	e.onLaunch = nil
	st, dir := engineStore(t)
	s2 := engineService(t, st, dir, noHandle{e}, &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	submit(t, s2, "c")
	dispatch(t, s2)
	if c := status(t, s2, "c"); c.Status != apitypes.StatusFailed || !strings.Contains(c.StatusReason, "returned no handle") {
		t.Errorf("c: %s (%s), want Failed: no handle", c.Status, c.StatusReason)
	}
}

// noHandle is a self-queueing target whose launches return no handle.
type noHandle struct{ *fakeEngine }

func (noHandle) LaunchBatch(_ context.Context, ls []compute.Launch) []compute.Launched {
	return make([]compute.Launched, len(ls))
}

// A server killed (or stopped) while it hands an attempt over leaves its
// mark; the next server takes the attempt back, revokes its token (a
// runner the engine starts for it anyway is refused) and hands the job
// over again as a new attempt. An attempt whose runner called before the
// restart is left to its runner.
// interruptedHandOffs makes a store where a first server handed jobs a and
// b over and stopped during the engine call; it returns the store, its
// folder, the clock and the first server's target.
func interruptedHandOffs(t *testing.T) (store.Store, string, *clock, *fakeEngine) {
	t.Helper()
	st, dir := engineStore(t)
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	first := newFakeEngine(4)
	s1 := engineService(t, st, dir, first, clk)
	submit(t, s1, "a")
	submit(t, s1, "b")
	ctx, stop := context.WithCancel(context.Background())
	first.fail = func(compute.Launch) error {
		stop() // the server is stopping while the engine call runs
		return errors.New("ssh: connection closed")
	}
	if err := s1.dispatch(ctx); err != nil {
		t.Fatal(err)
	}
	s1.handOffs.Wait()
	return st, dir, clk, first
}

func TestInterruptedHandOffIsTakenBackByTheNextServer(t *testing.T) {
	st, dir, clk, first := interruptedHandOffs(t)
	var tokens []string
	for _, l := range first.launches() {
		tokens = append(tokens, l.RunToken)
	}
	for _, n := range []string{"a", "b"} {
		j, err := st.GetJob(context.Background(), n)
		if err != nil || j.Status != apitypes.StatusQueued || j.Attempt != 1 || !isHandOffMark(j.Handle) {
			t.Fatalf("%s after an interrupted hand-off: %s, attempt %d, handle %q, %v; want Queued (not failed), attempt 1, marked", n, j.Status, j.Attempt, j.Handle, err)
		}
	}

	again := newFakeEngine(4)
	s2 := engineService(t, st, dir, again, clk)
	// b's runner, started by the engine after all, calls before the new
	// server's first pass: b is its runner's.
	if _, err := s2.Assignment(context.Background(), runPrincipal("b", 1), "b", 1); err != nil {
		t.Fatal(err)
	}
	dispatch(t, s2)
	a := status(t, s2, "a")
	if a.Status != apitypes.StatusQueued || a.Attempt != 2 || a.Handle != "4001" {
		t.Fatalf("a on the new server: %s, attempt %d, handle %q; want Queued as attempt 2 with handle 4001", a.Status, a.Attempt, a.Handle)
	}
	if !strings.Contains(strings.Join(history(a), "\n"), "a server restart cut short handing attempt 1 to compute local; it is handed over again as a new attempt") {
		t.Errorf("a's history does not say why it was handed over again:\n%s", strings.Join(history(a), "\n"))
	}
	if _, err := s2.Assignment(context.Background(), runPrincipal("a", 1), "a", 1); err == nil {
		t.Error("attempt 1's runner was given an assignment after the retake")
	}
	if b := status(t, s2, "b"); b.Status != apitypes.StatusPreparing || b.Attempt != 1 || b.Handle != "" {
		t.Errorf("b: %s, attempt %d, handle %q; want Preparing, attempt 1, no handle", b.Status, b.Attempt, b.Handle)
	}
	if got := again.launches(); len(got) != 1 || got[0].Job != "a" || got[0].Attempt != 2 {
		t.Errorf("the new server launched %v, want a's attempt 2 only", got)
	}
	// a's first token is revoked; b's is not.
	for i, l := range first.launches() {
		_, err := st.TokenByHash(context.Background(), auth.Hash(tokens[i]))
		if l.Job == "a" && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a's attempt 1 token: %v, want revoked", err)
		}
		if l.Job == "b" && err != nil {
			t.Errorf("b's token: %v, want kept for its runner", err)
		}
	}
}

// A runner of an attempt taken back from its engine is refused its
// assignment: a new attempt replaces it.
func TestTakenBackAttemptsRunnerIsRefused(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine(1)
	s, _ := newEngineService(t, e)
	submit(t, s, "a")
	dispatch(t, s)
	zero := 0
	e.set("4001", compute.EngineState{Phase: compute.PhaseEnded, Reason: "PREEMPTED", Outcome: apitypes.StatusFailed, Requeue: true, ExitCode: &zero})
	reconcile(t, s)
	if j := status(t, s, "a"); j.Status != apitypes.StatusQueued || j.Handle != "" {
		t.Fatalf("a after its engine took it back: %s, handle %q", j.Status, j.Handle)
	}
	if _, err := s.Assignment(ctx, runPrincipal("a", 1), "a", 1); apperr.CodeOf(err) != apperr.CodeConflict {
		t.Errorf("assignment of the taken-back attempt: %v, want a conflict", err)
	}
}

// findingEngine is a fakeEngine that keeps a record of its launches'
// handles (compute.Finder), as the Slurm target keeps them in each
// attempt's folder.
type findingEngine struct {
	*fakeEngine
	found map[compute.Attempt]compute.Handle
	asked [][]compute.Attempt
}

func (f *findingEngine) FindHandles(_ context.Context, as []compute.Attempt) (map[compute.Attempt]compute.Handle, error) {
	f.asked = append(f.asked, as)
	out := map[compute.Attempt]compute.Handle{}
	for _, a := range as {
		if h, ok := f.found[a]; ok {
			out[a] = h
		}
	}
	return out, nil
}

// A restarted server adopts the handle a target recorded for an attempt
// whose hand-off the restart cut short: the attempt the engine has is the
// one followed, and nothing is launched again.
func TestInterruptedHandOffIsAdoptedWhenTheTargetFindsIt(t *testing.T) {
	st, dir, clk, _ := interruptedHandOffs(t)

	again := &findingEngine{fakeEngine: newFakeEngine(4), found: map[compute.Attempt]compute.Handle{{Job: "a", Attempt: 1}: "4999"}}
	again.set("4999", compute.EngineState{Phase: compute.PhasePending, Reason: "Priority"})
	s2 := engineService(t, st, dir, again, clk)
	dispatch(t, s2)
	a := status(t, s2, "a")
	if a.Status != apitypes.StatusQueued || a.Attempt != 1 || a.Handle != "4999" || !strings.Contains(a.StatusReason, "by the server before a restart") {
		t.Fatalf("a: %s, attempt %d, handle %q (%s); want Queued, attempt 1, the handle found", a.Status, a.Attempt, a.Handle, a.StatusReason)
	}
	if b := status(t, s2, "b"); b.Status != apitypes.StatusQueued || b.Attempt != 2 {
		t.Errorf("b, not found: %s, attempt %d; want handed over again as attempt 2", b.Status, b.Attempt)
	}
	if got := again.launches(); len(got) != 1 || got[0].Job != "b" {
		t.Errorf("the new server launched %v, want only b again", got)
	}
	if len(again.asked) != 1 || len(again.asked[0]) != 2 {
		t.Errorf("FindHandles calls %v, want one, for both attempts", again.asked)
	}
	reconcile(t, s2)
	if a := status(t, s2, "a"); !strings.HasSuffix(a.StatusReason, ": Priority") {
		t.Errorf("a after the reconcile: %s; want the engine's reason for the adopted handle", a.StatusReason)
	}
	dispatch(t, s2)
	if len(again.asked) != 1 {
		t.Errorf("FindHandles asked again on a later pass: %v", again.asked)
	}
}
