package workspace

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// These tests drive the pool loop (poolLoop.pass) with the paper provider
// and an injected clock: nodes join and heartbeat through the same methods
// the agent protocol's handlers call, and runners report through the same
// methods their run tokens reach.

// newPaperCluster makes a workspace with one cluster of Standard_DS3_v2
// (4 cores) nodes.
func newPaperCluster(t *testing.T, minN, maxN, idleSeconds int) (*Service, *schedProvider, *clock) {
	t.Helper()
	dir := t.TempDir()
	clk := &clock{now: time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)}
	prov := &schedProvider{}
	s := newPoolService(t, openStore(t, dir), dir, prov, clk)
	c := &spec.Compute{Name: "gpu", Type: "amlcompute", Size: "Standard_DS3_v2",
		MinInstances: intp(minN), MaxInstances: intp(maxN), IdleTimeBeforeScaleDown: intp(idleSeconds)}
	if _, err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return s, prov, clk
}

// liveMachines are the machines launched and not terminated.
func liveMachines(p *schedProvider) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.launched {
		if !slices.Contains(p.terminated, m) {
			out = append(out, m)
		}
	}
	return out
}

// settle runs passes, joining launched nodes, until nothing changes.
func settle(t *testing.T, s *Service) {
	t.Helper()
	for range 4 {
		pass(t, s)
		joinAll(t, s)
	}
	pass(t, s)
}

// finishJob reports the job's current attempt Completed on every rank, as
// its runners do.
func finishJob(t *testing.T, s *Service, name string) {
	t.Helper()
	j := mustJob(t, s, name)
	for rank := range placementOf(j).Ranks {
		if err := s.ReportStatus(context.Background(), runPrincipal(name, j.Attempt), name, j.Attempt, apitypes.Report{Rank: rank, Status: apitypes.StatusCompleted, ExitCode: new(int)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := status(t, s, name).Status; got != apitypes.StatusCompleted {
		t.Fatalf("job %s is %s after every rank reported Completed", name, got)
	}
}

func countStatus(t *testing.T, s *Service, names []string, st string) int {
	t.Helper()
	n := 0
	for _, name := range names {
		if status(t, s, name).Status == st {
			n++
		}
	}
	return n
}

// A cluster grows from 0 to the nodes its queue needs, bounded by the
// family quota and by max_instances; a finished job frees its node for the
// next; idle nodes go after idle_time_before_scale_down, down to
// min_instances.
func TestClusterScalesWithItsQueue(t *testing.T) {
	ctx := context.Background()
	s, prov, clk := newPaperCluster(t, 1, 3, 60)
	if err := s.Nodes().SetQuota(ctx, owner, "standardDSv2Family", 8); err != nil {
		t.Fatal(err)
	}
	jobs := []string{"a", "b", "c", "d"}
	for _, j := range jobs {
		submitTo(t, s, j, "gpu")
	}
	settle(t, s)
	if n := len(liveMachines(prov)); n != 2 {
		t.Fatalf("with a quota of 8 cores: %d machines, want 2", n)
	}
	if n := countStatus(t, s, jobs, apitypes.StatusPreparing); n != 2 {
		t.Fatalf("%d jobs placed on 2 nodes, want 2", n)
	}
	if r := status(t, s, "d").StatusReason; !strings.Contains(r, "quota") {
		t.Errorf("a job held back by the quota says %q", r)
	}

	if err := s.Nodes().SetQuota(ctx, owner, "standardDSv2Family", 100); err != nil {
		t.Fatal(err)
	}
	settle(t, s)
	if n := len(liveMachines(prov)); n != 3 {
		t.Fatalf("with room in the quota: %d machines, want max_instances 3", n)
	}
	if n := countStatus(t, s, jobs, apitypes.StatusPreparing); n != 3 {
		t.Fatalf("%d jobs placed on 3 nodes, want 3", n)
	}
	if r := status(t, s, "d").StatusReason; !strings.Contains(r, "max_instances") {
		t.Errorf("a job held back by max_instances says %q", r)
	}

	// A finished job frees its node, and the waiting job takes it: no launch.
	var done string
	for _, j := range jobs[:3] {
		if status(t, s, j).Status == apitypes.StatusPreparing {
			done = j
			break
		}
	}
	finishJob(t, s, done)
	settle(t, s)
	if j := status(t, s, "d"); j.Status != apitypes.StatusPreparing {
		t.Fatalf("after %s finished, d is %s (%s)", done, j.Status, j.StatusReason)
	}
	if n := len(prov.launched); n != 3 {
		t.Errorf("%d launches; a freed node should have been reused", n)
	}

	// All done: the nodes go after the idle time, down to min_instances.
	for _, j := range jobs {
		if status(t, s, j).Status == apitypes.StatusPreparing {
			finishJob(t, s, j)
		}
	}
	settle(t, s)
	if n := len(liveMachines(prov)); n != 3 {
		t.Fatalf("before the idle time: %d machines, want 3", n)
	}
	clk.advance(61 * time.Second)
	settle(t, s)
	if n := len(liveMachines(prov)); n != 1 {
		t.Fatalf("after the idle time: %d machines, want min_instances 1", n)
	}
	if n := len(mustNodes(t, s, "gpu")); n != 1 {
		t.Errorf("%d nodes stored, want 1", n)
	}
}

// Lowering max_instances removes idle nodes at once and leaves busy ones.
func TestResizeDownRemovesIdleNodesFirst(t *testing.T) {
	ctx := context.Background()
	s, prov, clk := newPaperCluster(t, 0, 3, 600)
	for _, j := range []string{"a", "b", "c"} {
		submitTo(t, s, j, "gpu")
	}
	settle(t, s)
	// The busy node is the one up longest without idling: a scale-down
	// that counted it as idle would pick it first.
	clk.advance(10 * time.Second)
	finishJob(t, s, "a")
	finishJob(t, s, "b")
	settle(t, s)
	busy := placementOf(mustJob(t, s, "c")).Ranks[0].Node
	if n := len(liveMachines(prov)); n != 3 {
		t.Fatalf("%d machines, want 3", n)
	}
	if _, err := s.Nodes().ResizeCompute(ctx, "gpu", nil, intp(1), nil); err != nil {
		t.Fatal(err)
	}
	settle(t, s)
	if got := liveMachines(prov); !slices.Equal(got, []string{busy}) {
		t.Fatalf("after resizing to 1: machines %v, want the busy one %s alone", got, busy)
	}
	if j := status(t, s, "c"); j.Status != apitypes.StatusPreparing {
		t.Errorf("the job on the busy node is %s", j.Status)
	}
}

func mustJob(t *testing.T, s *Service, name string) store.Job {
	t.Helper()
	j, err := s.st.GetJob(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Deleting a cluster terminates every machine, trying a failing Terminate
// again on the next pass, and only then forgets the compute. A cluster
// with unfinished jobs is not deleted.
func TestDeleteClusterTerminatesEveryMachine(t *testing.T) {
	ctx := context.Background()
	s, prov, _ := newPaperCluster(t, 2, 2, 600)
	submitTo(t, s, "a", "gpu")
	settle(t, s)
	err := s.DeleteCompute(ctx, "gpu")
	wantCode(t, "deleting a cluster with a job", err, apperr.CodeConflict, "unfinished job")
	if got := computeState(t, s, "gpu"); got == StateDeleting {
		t.Fatalf("a refused delete left the compute %s", got)
	}
	finishJob(t, s, "a")
	settle(t, s)

	prov.mu.Lock()
	prov.failTerminate = 1
	prov.mu.Unlock()
	if err := s.DeleteCompute(ctx, "gpu"); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	if got := computeState(t, s, "gpu"); got != StateDeleting {
		t.Fatalf("with a machine not yet terminated the compute is %s, want Deleting", got)
	}
	if n := len(liveMachines(prov)); n != 1 {
		t.Fatalf("after a failed Terminate: %d machines left, want 1", n)
	}
	pass(t, s)
	if n := len(liveMachines(prov)); n != 0 {
		t.Fatalf("%d machines left, want none", n)
	}
	if _, err := s.GetCompute(ctx, "gpu"); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Fatalf("the deleted compute: %v, want not found", err)
	}
	if n := len(mustNodes(t, s, "gpu")); n != 0 {
		t.Errorf("%d nodes left", n)
	}
}

// A serverless job gets an implicit cluster sized for its instance_count,
// nodes made for it, and the nodes go once it is done and they idled.
func TestServerlessJobGetsNodesAndGivesThemBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := &clock{now: time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)}
	prov := &schedProvider{}
	s := newPoolService(t, openStore(t, dir), dir, prov, clk)
	s.cfg.ServerlessMax = 1
	j := &spec.Job{Name: "pair", Command: "true", Resources: &spec.Resources{InstanceType: "Standard_DS3_v2", InstanceCount: 2}}
	v, err := s.SubmitJob(ctx, owner, Submission{Spec: j})
	if err != nil {
		t.Fatal(err)
	}
	if v.Compute != "serverless-standard-ds3-v2" {
		t.Fatalf("compute %s", v.Compute)
	}
	c, err := s.GetCompute(ctx, v.Compute)
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.MaxInstances == nil || *c.Spec.MaxInstances != 2 || *c.Spec.MinInstances != 0 {
		t.Fatalf("implicit cluster min %v max %v, want 0 and the job's 2", c.Spec.MinInstances, c.Spec.MaxInstances)
	}
	settle(t, s)
	if got := status(t, s, "pair"); got.Status != apitypes.StatusPreparing {
		t.Fatalf("the serverless job is %s (%s)", got.Status, got.StatusReason)
	}
	if n := len(placementOf(mustJob(t, s, "pair")).Ranks); n != 2 {
		t.Fatalf("placed on %d nodes, want 2", n)
	}
	if n := len(liveMachines(prov)); n != 2 {
		t.Fatalf("%d machines, want 2", n)
	}
	finishJob(t, s, "pair")
	settle(t, s)
	clk.advance(s.cfg.ServerlessIdle + time.Second)
	settle(t, s)
	if n := len(liveMachines(prov)); n != 0 {
		t.Fatalf("after the serverless idle time: %d machines, want none", n)
	}
}

// A node silent past the node lease is Lost: the attempt it ran is failed
// (lost-node semantics, unlike preemption, which requeues), the machine is
// terminated, and the queue gets a new node.
func TestLostNodeFailsItsJobAndIsReplaced(t *testing.T) {
	ctx := context.Background()
	s, prov, clk := newPaperCluster(t, 0, 1, 600)
	submitTo(t, s, "a", "gpu")
	settle(t, s)
	node := placementOf(mustJob(t, s, "a")).Ranks[0].Node
	submitTo(t, s, "b", "gpu")

	clk.advance(s.cfg.NodeLease + time.Second)
	if err := s.pools.pass(ctx); err != nil { // no heartbeat first
		t.Fatal(err)
	}
	j := status(t, s, "a")
	if j.Status != apitypes.StatusFailed || !strings.Contains(j.Error, "lost") {
		t.Fatalf("the job of a lost node is %s (%s); want Failed, node lost", j.Status, j.Error)
	}
	settle(t, s)
	prov.mu.Lock()
	terminated := slices.Contains(prov.terminated, node)
	prov.mu.Unlock()
	if !terminated {
		t.Errorf("the lost node's machine %s was not terminated", node)
	}
	if _, err := s.st.GetNode(ctx, node); err == nil {
		t.Errorf("the lost node %s is still stored", node)
	}
	if j := status(t, s, "b"); j.Status != apitypes.StatusPreparing {
		t.Fatalf("the next job is %s (%s); want it on a new node", j.Status, j.StatusReason)
	}
	if n := len(prov.launched); n != 2 {
		t.Errorf("%d launches, want 2", n)
	}
}

// A node that does not join within the join timeout is terminated and
// replaced; a failed launch is retried after its backoff.
func TestNodeThatNeverJoinsIsReplaced(t *testing.T) {
	ctx := context.Background()
	s, prov, clk := newPaperCluster(t, 0, 1, 600)
	prov.failLaunch = 1
	submitTo(t, s, "a", "gpu")
	pass(t, s)
	pass(t, s) // within the backoff
	if n := len(prov.launched); n != 0 {
		t.Fatalf("%d launches, want the first to fail and no retry within the backoff", n)
	}
	if r := status(t, s, "a").StatusReason; !strings.Contains(r, "launching a node") {
		t.Errorf("a job waiting for a failed launch says %q", r)
	}
	clk.advance(5 * time.Second)
	pass(t, s) // no join
	if n := len(prov.launched); n != 1 {
		t.Fatalf("after the backoff: %d launches, want 1", n)
	}
	first := prov.launched[0]
	clk.advance(s.cfg.JoinTimeout)
	pass(t, s)
	pass(t, s)
	if got := liveMachines(prov); len(got) != 1 || got[0] == first {
		t.Fatalf("after the join timeout: live machines %v, want one other than %s", got, first)
	}
	if _, err := s.st.GetNode(ctx, first); err == nil {
		t.Errorf("the node that never joined is still stored")
	}
	settle(t, s)
	if j := status(t, s, "a"); j.Status != apitypes.StatusPreparing {
		t.Errorf("the job is %s on the replacement", j.Status)
	}
}

func launchCalls(p *schedProvider) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.launchCalls
}

// Launches that keep failing are tried again after 5 s, then 10 s, then
// 20 s; one that works ends the backoff, so the next failure waits 5 s
// again.
func TestLaunchBackoffDoubles(t *testing.T) {
	ctx := context.Background()
	s, prov, clk := newPaperCluster(t, 0, 2, 600)
	prov.failLaunch = 3
	submitTo(t, s, "a", "gpu")
	for i, c := range []struct {
		advance time.Duration
		calls   int
	}{
		{0, 1},               // fails: next in 5 s
		{4 * time.Second, 1}, // within the backoff
		{time.Second, 2},     // fails: next in 10 s
		{9 * time.Second, 2},
		{time.Second, 3}, // fails: next in 20 s
		{19 * time.Second, 3},
		{time.Second, 4}, // works
	} {
		clk.advance(c.advance)
		pass(t, s)
		if got := launchCalls(prov); got != c.calls {
			t.Fatalf("step %d (+%s): %d launch calls, want %d", i, c.advance, got, c.calls)
		}
	}
	events, err := s.Nodes().ComputeEvents(ctx, "gpu", 20)
	if err != nil {
		t.Fatal(err)
	}
	var waits []string
	for _, e := range events {
		if e.Kind == "launch_failed" {
			waits = append(waits, e.Message[strings.LastIndex(e.Message, " ")+1:])
		}
	}
	if want := []string{"5s", "10s", "20s"}; !slices.Equal(waits, want) {
		t.Errorf("launch_failed events retry in %v, want %v", waits, want)
	}

	// After a launch that worked, a failure waits 5 s again.
	prov.mu.Lock()
	prov.failLaunch = 1
	prov.mu.Unlock()
	submitTo(t, s, "b", "gpu")
	pass(t, s)
	if got := launchCalls(prov); got != 5 {
		t.Fatalf("%d launch calls, want a 5th for b", got)
	}
	clk.advance(5 * time.Second)
	pass(t, s)
	if got := launchCalls(prov); got != 6 {
		t.Errorf("5 s after the failure that followed a success: %d launch calls, want 6", got)
	}
}

// A cluster deleted while its launches were backing off and made again
// under the same name starts afresh: its first pass launches.
func TestRecreatedClusterDoesNotInheritLaunchBackoff(t *testing.T) {
	ctx := context.Background()
	s, prov, _ := newPaperCluster(t, 0, 1, 600)
	prov.failLaunch = 1
	submitTo(t, s, "a", "gpu")
	pass(t, s)
	if _, err := s.CancelJob(ctx, owner, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCompute(ctx, "gpu"); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	if _, err := s.GetCompute(ctx, "gpu"); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Fatalf("the deleted compute: %v, want not found", err)
	}
	c := &spec.Compute{Name: "gpu", Type: "amlcompute", Size: "Standard_DS3_v2",
		MinInstances: intp(0), MaxInstances: intp(1), IdleTimeBeforeScaleDown: intp(600)}
	if _, err := s.CreateCompute(ctx, c); err != nil {
		t.Fatal(err)
	}
	submitTo(t, s, "b", "gpu")
	pass(t, s)
	if got := launchCalls(prov); got != 2 {
		t.Errorf("the new cluster's first pass: %d launch calls in all, want 2 (no backoff inherited)", got)
	}
}
