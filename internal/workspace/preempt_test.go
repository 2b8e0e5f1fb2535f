package workspace

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
)

// spotProvider makes machines on paper and takes them back when told to,
// as a cloud does low-priority machines: the provider interface is a
// boundary Ferry owns, and these tests are about what the workspace does.
type spotProvider struct {
	schedProvider
	mu         sync.Mutex
	preempted  map[string]bool // by machine ID
	terminated []string
}

func (p *spotProvider) Preempt(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preempted[id] = true
	return nil
}

func (p *spotProvider) List(_ context.Context, pool string) ([]provider.Machine, error) {
	p.schedProvider.mu.Lock()
	names := slices.Clone(p.launched)
	p.schedProvider.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Machine
	for _, id := range names {
		if slices.Contains(p.terminated, id) {
			continue
		}
		m := provider.Machine{ID: id, Pool: pool, State: provider.StateRunning}
		if p.preempted[id] {
			m.State = provider.StatePreempted
		}
		out = append(out, m)
	}
	return out, nil
}

func (p *spotProvider) Terminate(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.terminated = append(p.terminated, id)
	return nil
}

var _ provider.Preempter = (*spotProvider)(nil)

// newSpotService is a workspace whose pool computes get their machines
// from prov.
func newSpotService(t *testing.T, prov *spotProvider) (*Service, *clock) {
	t.Helper()
	dir := t.TempDir()
	clk := &clock{now: time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)}
	s := newPoolService(t, openStore(t, dir), dir, prov, clk)
	return s, clk
}

// lowPriorityCluster makes a cluster of Standard_DS3_v2 (4 cores) nodes
// of tier.
func lowPriorityCluster(t *testing.T, s *Service, name, tier string) {
	t.Helper()
	c := &spec.Compute{Name: name, Type: "amlcompute", Size: "Standard_DS3_v2", Tier: tier,
		MinInstances: intp(0), MaxInstances: intp(2), IdleTimeBeforeScaleDown: intp(600)}
	if _, err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// outputsSnapshot stores a snapshot of one file as who, as a runner uploads ./outputs.
func outputsSnapshot(t *testing.T, s *Service, who auth.Principal, name, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	m, files, err := snapshot.Build(dir, snapshot.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for digest, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = s.PutBlob(context.Background(), who, digest, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.CreateSnapshot(context.Background(), who, raw)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// placedOn runs pool passes, joining launched nodes, until job is placed,
// and returns the node of its attempt.
func placedOn(t *testing.T, s *Service, job string) string {
	t.Helper()
	for range 5 {
		pass(t, s)
		joinAll(t, s)
		rec, err := s.st.GetJob(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status == apitypes.StatusPreparing {
			return placementOf(rec).Ranks[0].Node
		}
	}
	t.Fatalf("job %s was not placed: %+v", job, status(t, s, job))
	return ""
}

func submitTo(t *testing.T, s *Service, name, compute string) {
	t.Helper()
	if _, err := s.SubmitJob(context.Background(), owner, Submission{Spec: &spec.Job{Name: name, Command: "true", Compute: compute}}); err != nil {
		t.Fatal(err)
	}
}

// A preempted node's runner is told to stop; it uploads ./outputs and
// reports Preempted; the job is queued again, not failed, and its next
// attempt, on a new node, is given those outputs to resume from. The
// node is terminated, and the job lists the preemption.
func TestPreemptedAttemptIsRequeuedWithItsOutputs(t *testing.T) {
	ctx := context.Background()
	prov := &spotProvider{preempted: map[string]bool{}}
	s, clk := newSpotService(t, prov)
	lowPriorityCluster(t, s, "spot", "low_priority")
	submitTo(t, s, "train", "spot")
	node := placedOn(t, s, "train")

	a1, err := s.Assignment(ctx, runPrincipal("train", 1), "train", 1)
	if err != nil {
		t.Fatal(err)
	}
	if a1.ResumeOutputs != "" {
		t.Errorf("attempt 1 resumes from %q; want nothing", a1.ResumeOutputs)
	}
	if err := s.ReportStatus(ctx, runPrincipal("train", 1), "train", 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	if hb, err := s.Heartbeat(ctx, runPrincipal("train", 1), "train", 1); err != nil || hb.Preempt || hb.Cancel {
		t.Fatalf("heartbeat before the preemption = %+v, %v", hb, err)
	}

	if _, err := s.Nodes().PreemptNode(ctx, runPrincipal("train", 1), "spot", node); apperr.CodeOf(err) != apperr.CodeForbidden {
		t.Errorf("a run token preempted a node: %v", err)
	}
	v, err := s.Nodes().PreemptNode(ctx, owner, "spot", node)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != NodePreempted || !prov.preempted[node] {
		t.Fatalf("node after PreemptNode: %+v; provider marked it: %v", v, prov.preempted[node])
	}
	hb, err := s.Heartbeat(ctx, runPrincipal("train", 1), "train", 1)
	if err != nil || !hb.Preempt || hb.Cancel {
		t.Fatalf("heartbeat on a preempted node = %+v, %v; want Preempt", hb, err)
	}
	// While its runner stops the job, the node is neither given work nor
	// terminated.
	pass(t, s)
	if len(prov.terminated) != 0 {
		t.Fatalf("terminated %v while its attempt was stopping", prov.terminated)
	}

	ckpt := outputsSnapshot(t, s, runPrincipal("train", 1), "step.txt", "41")
	if err := s.SetOutputs(ctx, runPrincipal("train", 1), "train", 1, apitypes.Outputs{Artifacts: ckpt}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportStatus(ctx, runPrincipal("train", 1), "train", 1, apitypes.Report{Status: apitypes.StatusPreempted, Reason: "node preempted"}); err != nil {
		t.Fatal(err)
	}
	j := status(t, s, "train")
	if j.Status != apitypes.StatusQueued || j.Attempt != 1 {
		t.Fatalf("after the preempted report: %s attempt %d (%s); want Queued", j.Status, j.Attempt, j.StatusReason)
	}

	clk.advance(time.Second)
	node2 := placedOn(t, s, "train")
	if node2 == node {
		t.Fatalf("attempt 2 placed on the preempted node %s", node)
	}
	if !slices.Contains(prov.terminated, node) {
		t.Errorf("the preempted node %s was not terminated (terminated: %v)", node, prov.terminated)
	}
	a2, err := s.Assignment(ctx, runPrincipal("train", 2), "train", 2)
	if err != nil {
		t.Fatal(err)
	}
	if a2.ResumeOutputs != ckpt {
		t.Errorf("attempt 2 resumes from %q; want the outputs of attempt 1, %q", a2.ResumeOutputs, ckpt)
	}
	if err := s.ReportStatus(ctx, runPrincipal("train", 2), "train", 2, apitypes.Report{Status: apitypes.StatusCompleted, ExitCode: new(int)}); err != nil {
		t.Fatal(err)
	}
	j = status(t, s, "train")
	if j.Status != apitypes.StatusCompleted || j.Attempt != 2 {
		t.Fatalf("at the end: %s attempt %d; want Completed on attempt 2", j.Status, j.Attempt)
	}
	want := []apitypes.Preemption{{Attempt: 1, Node: node}}
	if d := cmp.Diff(want, j.Preemptions, cmpPreemption); d != "" {
		t.Errorf("preemptions (-want +got):\n%s", d)
	}
	var queuedAgain bool
	for _, e := range j.History {
		if e.To == apitypes.StatusFailed {
			t.Errorf("the history has a failure: %+v", e)
		}
		queuedAgain = queuedAgain || (e.From == apitypes.StatusRunning && e.To == apitypes.StatusQueued)
	}
	if !queuedAgain {
		t.Errorf("the history does not show the requeue: %+v", j.History)
	}
}

var cmpPreemption = cmp.Comparer(func(a, b apitypes.Preemption) bool { return a.Attempt == b.Attempt && a.Node == b.Node })

// A machine its provider lists as preempted makes its node Preempted; an
// attempt whose runner does not report within the grace is queued again
// all the same, with no outputs of its own to resume from, and is not
// failed as lost meanwhile.
func TestProviderPreemptionAndSilentRunner(t *testing.T) {
	ctx := context.Background()
	prov := &spotProvider{preempted: map[string]bool{}}
	s, clk := newSpotService(t, prov)
	s.pools.preemptGrace = 2 * s.cfg.LeaseTimeout
	lowPriorityCluster(t, s, "spot", "low_priority")
	submitTo(t, s, "train", "spot")
	node := placedOn(t, s, "train")
	n, err := s.st.GetNode(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	prov.Preempt(ctx, n.Machine)
	clk.advance(s.pools.preemptPoll)
	pass(t, s)
	if n, _ := s.st.GetNode(ctx, node); n.State != NodePreempted {
		t.Fatalf("node listed preempted by its provider is %s", n.State)
	}
	if j := status(t, s, "train"); j.Status != apitypes.StatusPreparing {
		t.Fatalf("within the grace the job is %s; want it left to its runner", j.Status)
	}
	// The runner, told to stop, heartbeats no more: past its lease, the
	// attempt is not failed as lost.
	clk.advance(s.cfg.LeaseTimeout + time.Second)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if j := status(t, s, "train"); j.Status != apitypes.StatusPreparing {
		t.Fatalf("past the runner's lease, within the grace: %s (%s); want it left to its runner", j.Status, j.StatusReason)
	}
	clk.advance(s.pools.preemptGrace - s.cfg.LeaseTimeout)
	pass(t, s)
	j := status(t, s, "train")
	if j.Status != apitypes.StatusQueued || len(j.Preemptions) != 1 {
		t.Fatalf("after the grace: %s, preemptions %+v; want Queued with one", j.Status, j.Preemptions)
	}
	node2 := placedOn(t, s, "train")
	a2, err := s.Assignment(ctx, runPrincipal("train", 2), "train", 2)
	if err != nil {
		t.Fatal(err)
	}
	if node2 == node || a2.ResumeOutputs != "" {
		t.Errorf("attempt 2 on %s (preempted %s), resuming from %q", node2, node, a2.ResumeOutputs)
	}
}

// Only the nodes of low-priority clusters are preempted.
func TestPreemptNodeOfDedicatedClusterIsRefused(t *testing.T) {
	ctx := context.Background()
	prov := &spotProvider{preempted: map[string]bool{}}
	s, _ := newSpotService(t, prov)
	lowPriorityCluster(t, s, "steady", "dedicated")
	submitTo(t, s, "train", "steady")
	node := placedOn(t, s, "train")
	_, err := s.Nodes().PreemptNode(ctx, owner, "steady", node)
	wantCode(t, "preempting a dedicated node", err, apperr.CodeInvalid, "low_priority")
	_, err = s.Nodes().PreemptNode(ctx, owner, "steady", "nope")
	wantCode(t, "preempting a node of a dedicated cluster that is not there", err, apperr.CodeInvalid)
}

// Low-priority nodes count against the low-priority quota, which all
// families share, and not against their family's dedicated quota; a
// low-priority cluster at its quota does not grow.
func TestLowPriorityQuotaIsSeparate(t *testing.T) {
	ctx := context.Background()
	prov := &spotProvider{preempted: map[string]bool{}}
	s, _ := newSpotService(t, prov)
	lowPriorityCluster(t, s, "spot", "low_priority")
	lowPriorityCluster(t, s, "steady", "dedicated")
	if err := s.Nodes().SetQuota(ctx, owner, "LOWPRIORITY", 4); err != nil {
		t.Fatal(err)
	}
	submitTo(t, s, "a", "spot")
	submitTo(t, s, "b", "spot")
	submitTo(t, s, "c", "steady")
	for range 3 {
		pass(t, s)
		joinAll(t, s)
	}
	qs, err := s.Nodes().ListQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]apitypes.Quota{}
	for _, q := range qs {
		got[q.Family] = q
	}
	want := map[string]apitypes.Quota{
		"standardDSv2Family": {Family: "standardDSv2Family", Limit: 100, Used: 4},
		LowPriorityQuota:     {Family: LowPriorityQuota, Limit: 4, Used: 4, Set: true, LowPriority: true},
	}
	for f, w := range want {
		if d := cmp.Diff(w, got[f]); d != "" {
			t.Errorf("quota %s (-want +got):\n%s", f, d)
		}
	}
	if n := len(mustNodes(t, s, "spot")); n != 1 {
		t.Errorf("the low-priority cluster has %d nodes; its quota of 4 cores allows one", n)
	}
	if j := status(t, s, "b"); j.Status != apitypes.StatusQueued {
		t.Errorf("job b is %s; want it queued for quota", j.Status)
	}
}

// A serverless job with queue_settings.job_tier: spot runs on a
// low-priority implicit cluster: its node counts against the low-priority
// quota, and it can be preempted.
func TestSpotServerlessJobIsLowPriority(t *testing.T) {
	ctx := context.Background()
	prov := &spotProvider{preempted: map[string]bool{}}
	s, _ := newSpotService(t, prov)
	j := &spec.Job{Name: "spot-job", Command: "true", Resources: &spec.Resources{InstanceType: "Standard_DS3_v2"},
		QueueSettings: &spec.QueueSettings{JobTier: "spot"}}
	v, err := s.SubmitJob(ctx, owner, Submission{Spec: j})
	if err != nil {
		t.Fatal(err)
	}
	if v.Compute != "serverless-standard-ds3-v2-spot" {
		t.Fatalf("compute %s", v.Compute)
	}
	node := placedOn(t, s, "spot-job")
	qs, err := s.Nodes().ListQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Family == LowPriorityQuota && q.Used != 4 || q.Family == "standardDSv2Family" && q.Used != 0 {
			t.Errorf("quota %+v; want the spot node's 4 cores on %s alone", q, LowPriorityQuota)
		}
	}
	if _, err := s.Nodes().PreemptNode(ctx, owner, v.Compute, node); err != nil {
		t.Fatal(err)
	}
}

// Only an attempt on a cluster node can end preempted: a runner of the
// local target that reports it is refused, and its job goes on.
func TestPreemptedReportOffAClusterIsRefused(t *testing.T) {
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "j")
	dispatch(t, s)
	err := s.ReportStatus(context.Background(), runPrincipal("j", 1), "j", 1, apitypes.Report{Status: apitypes.StatusPreempted})
	wantCode(t, "a Preempted report of a local job", err, apperr.CodeInvalid, "no cluster node")
	if j := status(t, s, "j"); j.Status != apitypes.StatusPreparing || len(j.Preemptions) != 0 {
		t.Errorf("job after the refused report: %s, preemptions %+v", j.Status, j.Preemptions)
	}
}
