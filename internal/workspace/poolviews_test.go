package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/spec"
)

func newPoolHarness(t *testing.T) (*Service, *clock) {
	t.Helper()
	dir := t.TempDir()
	clk := &clock{now: time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)}
	return newPoolService(t, openStore(t, dir), dir, &schedProvider{}, clk), clk
}

func createFromYAML(t *testing.T, s *Service, yaml string) {
	t.Helper()
	c, err := spec.ParseCompute([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// joinWith joins every launched node of compute as an agent reporting facts.
func joinWith(t *testing.T, s *Service, compute string, f nodeproto.Facts) {
	t.Helper()
	for _, n := range mustNodes(t, s, compute) {
		if n.State == NodeProvisioning {
			if _, err := s.Nodes().JoinNode(context.Background(), auth.Principal{Kind: KindJoin, Subject: n.Name}, nodeproto.JoinRequest{Name: n.Name, Facts: f}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The compute view carries what `compute list` shows: the size, the node
// count with its bounds, and capacity as jobs at once.
func TestComputeViewCarriesSizeAndNodeCounts(t *testing.T) {
	s, _ := newPoolHarness(t)
	ctx := context.Background()
	createFromYAML(t, s, "name: cpu\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 1\nmax_instances: 4\n")
	createFromYAML(t, s, "name: dev-box\ntype: computeinstance\nsize: Standard_DS1_v2\n")
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if _, err := s.Nodes().StopInstance(ctx, owner, "dev-box"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		pass(t, s)
	}
	type row struct {
		Name, Size              string
		Now, Min, Max, Capacity int
		HasBounds               bool
	}
	vs, err := s.ListComputes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for _, v := range vs {
		r := row{Name: v.Name, Size: v.Size, Now: v.CurrentNodes, Capacity: v.Capacity, HasBounds: v.MinNodes != nil && v.MaxNodes != nil}
		if r.HasBounds {
			r.Min, r.Max = *v.MinNodes, *v.MaxNodes
		}
		got = append(got, r)
	}
	want := []row{
		{Name: "cpu", Size: "Standard_DS1_v2", Now: 1, Min: 1, Max: 4, Capacity: 4, HasBounds: true},
		{Name: "dev-box", Size: "Standard_DS1_v2", Now: 0, Min: 0, Max: 0, Capacity: 0, HasBounds: true},
		{Name: "local", Capacity: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("compute views (-want +got):\n%s", diff)
	}
}

// list-nodes says what a node does: how long an idle node has been idle
// and when it goes, which job a busy node runs; not "joined".
func TestListNodesSaysWhatEachNodeDoes(t *testing.T) {
	s, clk := newPoolHarness(t)
	ctx := context.Background()
	createFromYAML(t, s, "name: cpu\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 2\nmax_instances: 2\nidle_time_before_scale_down: 300\n")
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	clk.advance(90 * time.Second)
	if _, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Name: "train", Command: "true", Compute: "cpu"}}); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	ns, err := s.Nodes().ListNodes(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, n := range ns {
		reasons = append(reasons, n.State+": "+n.Reason)
	}
	// Placed in this pass, the node is Busy from the next one.
	want := []string{
		"Idle: idle for 1m30s; removed after 5m0s idle (idle_time_before_scale_down) unless min_instances 2 keeps it",
		"Idle: running job train",
	}
	slices.Sort(reasons)
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("node reasons (-want +got):\n%s", diff)
	}
}

// A node that joins with fewer CPUs, less memory or fewer GPUs than its
// size promises is warned about, on the node, the compute and in its
// events; it still takes work as a node of its size.
func TestNodeShortOfItsSizeIsWarnedAndStillUsed(t *testing.T) {
	s, _ := newPoolHarness(t)
	ctx := context.Background()
	createFromYAML(t, s, "name: ds3\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 1\nmax_instances: 1\n")
	createFromYAML(t, s, "name: ds1\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 1\nmax_instances: 1\n")
	pass(t, s)
	joinWith(t, s, "ds3", nodeproto.Facts{CPUs: 2, MemoryBytes: 14 << 30})
	joinWith(t, s, "ds1", nodeproto.Facts{CPUs: 2, MemoryBytes: 3400 << 20}) // the kernel keeps a little
	pass(t, s)

	ns, err := s.Nodes().ListNodes(ctx, "ds3")
	if err != nil {
		t.Fatal(err)
	}
	const want = "has 2 CPUs, not 4 as size Standard_DS3_v2 promises; jobs are still placed on it as a Standard_DS3_v2 node and get what it really has"
	if len(ns) != 1 || !strings.Contains(ns[0].Warning, want) {
		t.Fatalf("node warning %q, want it to say %q", ns[0].Warning, want)
	}
	v, err := s.GetCompute(ctx, "ds3")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], want) {
		t.Errorf("compute warnings %q", v.Warnings)
	}
	if ev := eventsOf(t, s, "ds3"); !strings.Contains(ev, "node_short node "+ns[0].Name+" "+want) {
		t.Errorf("events lack the shortfall:\n%s", ev)
	}
	if v, _ := s.GetCompute(ctx, "ds1"); len(v.Warnings) != 0 || strings.Contains(eventsOf(t, s, "ds1"), "node_short") {
		t.Errorf("a node with what its size promises was warned about: %q", v.Warnings)
	}

	if _, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Name: "on-short", Command: "true", Compute: "ds3"}}); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	if j, err := s.GetJob(ctx, "on-short", false); err != nil || j.Status != apitypes.StatusPreparing {
		t.Errorf("a job on the short node: %+v %v, want it placed", j, err)
	}
}
