package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// storeRaw stores a job or compute as a buggy or older server might have,
// past today's validation, as the attack in issue 10 left them.
func storeRawJob(t *testing.T, s *Service, name, computeName string, js *spec.Job) {
	t.Helper()
	raw, err := json.Marshal(js)
	if err != nil {
		t.Fatal(err)
	}
	now := s.now()
	if _, err := s.st.CreateJob(context.Background(), store.Job{Name: name, Compute: computeName, Status: apitypes.StatusQueued, Spec: raw, Created: now},
		store.Event{Job: name, Time: now, To: apitypes.StatusQueued, Reason: "submitted"}); err != nil {
		t.Fatal(err)
	}
}

func storeRawCompute(t *testing.T, s *Service, c *spec.Compute) {
	t.Helper()
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	now := s.now()
	if err := s.st.CreateCompute(context.Background(), store.Compute{Name: c.Name, Type: c.Type, Spec: raw, State: "Succeeded", Created: now, Modified: now}); err != nil {
		t.Fatal(err)
	}
}

// A stored job asking for 2^31 instances on a serverless cluster of 2^31
// nodes, with a quota of 2^63-1 cores, once made every pool pass run out of
// memory, so the server died on each start. Now the pass marks the cluster
// and the job Failed with the field that is out of bounds, and a server
// started on the same store goes on working.
func TestOutOfBoundsRecordsAreFailedNotFatal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := newPoolService(t, st, dir, &schedProvider{}, clk)

	if err := st.SetQuota(ctx, "standardDSv2Family", 1<<62); err != nil {
		t.Fatal(err)
	}
	huge := 1 << 31
	storeRawCompute(t, s, &spec.Compute{Name: "serverless-standard_ds1_v2", Type: "amlcompute", Size: "Standard_DS1_v2",
		Tier: "dedicated", MinInstances: intp(0), MaxInstances: &huge, IdleTimeBeforeScaleDown: intp(120)})
	storeRawJob(t, s, "huge", "serverless-standard_ds1_v2", &spec.Job{Type: "command", Command: "true",
		Resources: &spec.Resources{InstanceType: "Standard_DS1_v2", InstanceCount: huge}})
	mustCreate(t, s, "cpu", 2)
	storeRawJob(t, s, "many-procs", "cpu", &spec.Job{Type: "command", Command: "true",
		Distribution: &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 100000000}})
	storeRawJob(t, s, "unreadable", "cpu", nil)
	if _, err := st.UpdateJob(ctx, "unreadable", func(j *store.Job) (*store.Event, error) {
		j.Spec = json.RawMessage(`{"command": 5}`)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}

	// A fresh service on the same store, as a restarted server.
	s = newPoolService(t, st, dir, &schedProvider{}, clk)
	pass(t, s)

	if got := computeState(t, s, "serverless-standard_ds1_v2"); got != StateFailed {
		t.Errorf("cluster with max_instances 2^31: state %s, want %s", got, StateFailed)
	}
	events, err := s.Nodes().ComputeEvents(ctx, "serverless-standard_ds1_v2", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || !strings.Contains(events[len(events)-1].Message, "max_instances") {
		t.Errorf("the cluster's events do not say max_instances is out of bounds: %+v", events)
	}
	if j := status(t, s, "huge"); j.Status != apitypes.StatusQueued || !strings.Contains(j.StatusReason, "unusable") {
		t.Errorf("job on the failed cluster: %s (%s), want Queued saying the compute is unusable", j.Status, j.StatusReason)
	}
	for name, field := range map[string]string{"many-procs": "distribution.process_count_per_instance", "unreadable": "cannot be read"} {
		if j := status(t, s, name); j.Status != apitypes.StatusFailed || !strings.Contains(j.StatusReason, field) {
			t.Errorf("job %s: %s (%s), want Failed naming %q", name, j.Status, j.StatusReason, field)
		}
	}

	// The owner can cancel the job and delete the cluster: nothing is stuck.
	if _, err := s.CancelJob(ctx, owner, "huge"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCompute(ctx, "serverless-standard_ds1_v2"); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	if _, err := st.GetCompute(ctx, "serverless-standard_ds1_v2"); err == nil {
		t.Error("the failed cluster was not forgotten after delete")
	}
	// And the cluster that was fine still works.
	submitTo(t, s, "ok", "cpu")
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if j := status(t, s, "ok"); j.Status != apitypes.StatusPreparing {
		t.Errorf("job on the good cluster: %s (%s), want Preparing", j.Status, j.StatusReason)
	}
}

// panicTarget panics when it launches: a stand-in for any bug that one
// record trips. The Target interface is a boundary Ferry owns.
type panicTarget struct{ fakeTarget }

func (p *panicTarget) Launch(_ context.Context, l compute.Launch) (compute.Handle, error) {
	if l.Job == "bad" {
		panic("bug triggered by job bad")
	}
	return p.fakeTarget.Launch(context.Background(), l)
}

// A panic while one job is started fails that job with the reason and the
// loop goes on to the next; the process does not die.
func TestPanicOnOneRecordFailsOnlyThatRecord(t *testing.T) {
	target := &panicTarget{fakeTarget: fakeTarget{capacity: 4}}
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := newPoolService(t, st, dir, &schedProvider{}, clk)
	s.cfg.Targets = func(*spec.Compute) (compute.Target, error) { return target, nil }
	s.targets = map[string]compute.Target{} // made again with the panicking target
	submit(t, s, "bad")
	submit(t, s, "good")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if status(t, s, "bad").Status == apitypes.StatusFailed && len(target.jobs()) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j := status(t, s, "bad"); j.Status != apitypes.StatusFailed || !strings.Contains(j.StatusReason, "internal error") {
		t.Errorf("job bad: %s (%s), want Failed with an internal error", j.Status, j.StatusReason)
	}
	if got := target.jobs(); len(got) != 1 || got[0] != "good" {
		t.Errorf("launched %v, want [good]", got)
	}
}

// mustCreate makes a cluster of Standard_DS1_v2 nodes with max nodes.
func mustCreate(t *testing.T, s *Service, name string, max int) {
	t.Helper()
	c := &spec.Compute{Name: name, Type: "amlcompute", Size: "Standard_DS1_v2", MaxInstances: &max}
	if _, err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// hangingProvider's Terminate blocks until released: a Docker stop that
// waits out its grace, or an engine that does not answer.
type hangingProvider struct {
	schedProvider
	entered chan struct{}
	release chan struct{}
}

func (p *hangingProvider) Terminate(ctx context.Context, _ string) error {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// While a node provider hangs in the pool loop, the local target's jobs
// are still dispatched: the pool loop runs beside the dispatcher.
func TestHangingProviderDoesNotHoldTheDispatcher(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	prov := &hangingProvider{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := newPoolService(t, st, dir, prov, clk)
	target := &fakeTarget{capacity: 2}
	s.cfg.Targets = func(*spec.Compute) (compute.Target, error) { return target, nil }
	s.targets = map[string]compute.Target{}

	mustCreate(t, s, "cpu", 1)
	submitTo(t, s, "pooled", "cpu")
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if _, err := s.CancelJob(ctx, owner, "pooled"); err != nil {
		t.Fatal(err)
	}
	if err := s.finish(ctx, "pooled", 1, apitypes.StatusCanceled, "canceled on request", nil, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCompute(ctx, "cpu"); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(runCtx); close(done) }()
	defer func() { close(prov.release); cancel(); <-done }()
	select {
	case <-prov.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the pool loop never terminated the deleted cluster's node")
	}
	submit(t, s, "local-while-hung")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if slices.Contains(target.jobs(), "local-while-hung") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a local job was not dispatched while a provider hung: launched %v", target.jobs())
		}
	}
}

// A store write refused for want of disk space is answered as a full disk
// (507), not as an internal error.
func TestStoreFullIsNoSpace(t *testing.T) {
	for _, err := range []error{fmt.Errorf("commit: %w", store.ErrNoSpace), fmt.Errorf("write: %w", syscall.ENOSPC)} {
		if got := apperr.CodeOf(err); got != apperr.CodeNoSpace {
			t.Errorf("apperr.CodeOf(%v) = %v, want apperr.CodeNoSpace", err, got)
		}
	}
}

// A stored job out of bounds on the local target is failed with its field
// when the dispatcher would start it, and nothing is launched for it.
func TestOutOfBoundsLocalJobIsFailedAtStart(t *testing.T) {
	target := &fakeTarget{capacity: 2}
	s, _ := newService(t, target)
	storeRawJob(t, s, "overflow", "local", &spec.Job{Type: "command", Command: "true", Limits: &spec.Limits{Timeout: 9300000000}})
	dispatch(t, s)
	if j := status(t, s, "overflow"); j.Status != apitypes.StatusFailed || !strings.Contains(j.StatusReason, "limits.timeout") {
		t.Errorf("job overflow: %s (%s), want Failed naming limits.timeout", j.Status, j.StatusReason)
	}
	if got := target.jobs(); len(got) != 0 {
		t.Errorf("launched %v for a job out of bounds", got)
	}
}
