package autoscale

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/sizes"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func size(t *testing.T, name string) sizes.Size {
	t.Helper()
	s, ok := sizes.Builtin().Lookup(name)
	if !ok {
		t.Fatalf("no size %s", name)
	}
	return s
}

func res(c float64, gib float64, gpus int) scheduler.Resources {
	return scheduler.Resources{MilliCPU: int64(c * 1000), Memory: int64(gib * (1 << 30)), GPUs: gpus}
}

// idleNode has been Idle since t0-idleFor.
func idleNode(id string, s sizes.Size, idleFor time.Duration) Node {
	n := asEmpty(id, "", shape(s))
	return Node{Node: n, LaunchedAt: t0.Add(-idleFor - time.Hour), IdleSince: t0.Add(-idleFor)}
}

// busyNode has free the given amounts left.
func busyNode(id string, s sizes.Size, free scheduler.Resources) Node {
	n := asEmpty(id, "", shape(s))
	n.State = scheduler.NodeBusy
	n.FreeMilliCPU, n.FreeMemory, n.FreeGPUs = free.MilliCPU, free.Memory, n.FreeGPUs[:free.GPUs]
	return Node{Node: n, LaunchedAt: t0.Add(-time.Hour)}
}

func nodeIn(id string, state scheduler.NodeState, launched time.Time) Node {
	return Node{Node: scheduler.Node{ID: id, State: state}, LaunchedAt: launched}
}

func jobs(prefix string, n int, d scheduler.Resources, instances int) []scheduler.Job {
	var out []scheduler.Job
	for i := range n {
		out = append(out, scheduler.Job{Name: fmt.Sprintf("%s%02d", prefix, i), Seq: int64(i), Demand: d, Instances: instances})
	}
	return out
}

func reasonsOf(rs []JobReason) map[string]string {
	if len(rs) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, r := range rs {
		out[r.Job] = r.Reason
	}
	return out
}

// want is the part of a ClusterPlan a case checks; Waiting and Unfit as
// job → reason.
type want struct {
	Launch        int
	LaunchReasons []string
	Terminate     []Termination
	Current       int
	Target        int
	Blocked       string
	Waiting       map[string]string
	Unfit         map[string]string
}

func got(p ClusterPlan) want {
	return want{p.Launch, p.LaunchReasons, p.Terminate, p.Current, p.Target, p.Blocked, reasonsOf(p.Waiting), reasonsOf(p.Unfit)}
}

func TestDecide(t *testing.T) {
	ds3 := size(t, "Standard_DS3_v2") // 4 vCPUs, 14 GiB, standardDSv2Family
	nc24 := size(t, "Standard_NC24s_v3")
	nd := size(t, "Standard_ND96asr_v4")
	whole := res(4, 14, 0)
	cluster := func(min, max int, nodes []Node, queued []scheduler.Job) Cluster {
		return Cluster{Name: "cpu-cluster", Size: ds3, MinInstances: min, MaxInstances: max, IdleTimeBeforeScaleDown: 120 * time.Second, Nodes: nodes, Queued: queued}
	}
	quota16 := sizes.DefaultQuotas()
	quota16.FamilyCores = map[string]int{"standardDSv2Family": 16}
	gpuQuota := sizes.DefaultQuotas()
	gpuQuota.FamilyCores = map[string]int{"standardNCSv3Family": 96}

	for _, tc := range []struct {
		name   string
		c      Cluster
		quotas *sizes.Quotas
		usage  sizes.Usage
		want   want
	}{
		{
			name: "one job on an empty cluster launches one node",
			c:    cluster(0, 4, nil, jobs("j", 1, res(1, 2, 0), 1)),
			want: want{Launch: 1, LaunchReasons: []string{"1 queued job needs 1 more node"}, Target: 1},
		},
		{
			name: "small jobs are bin-packed onto new nodes",
			c:    cluster(0, 10, nil, jobs("j", 10, res(1, 2, 0), 1)),
			want: want{Launch: 3, LaunchReasons: []string{"10 queued jobs need 3 more nodes"}, Target: 3},
		},
		{
			name: "free room on existing nodes is used before launching",
			c: cluster(0, 10, []Node{busyNode("b", ds3, res(2, 8, 0)), idleNode("i", ds3, time.Hour)},
				jobs("j", 3, res(1, 2, 0), 1)),
			want: want{Current: 2, Target: 2},
		},
		{
			name: "provisioning nodes count as capacity on the way",
			c: cluster(0, 10, []Node{nodeIn("p", scheduler.NodeProvisioning, t0.Add(-time.Minute))},
				jobs("j", 2, whole, 1)),
			want: want{Launch: 1, LaunchReasons: []string{"1 queued job needs 1 more node"}, Current: 1, Target: 2},
		},
		{
			name: "never above max_instances",
			c:    cluster(0, 4, []Node{busyNode("b", ds3, res(0, 0, 0))}, jobs("j", 5, whole, 1)),
			want: want{
				Launch: 3, LaunchReasons: []string{"3 queued jobs need 3 more nodes"}, Current: 1, Target: 4,
				Blocked: "cluster cpu-cluster at max_instances 4",
				Waiting: map[string]string{"j03": "queued: cluster cpu-cluster at max_instances 4", "j04": "queued: cluster cpu-cluster at max_instances 4"},
			},
		},
		{
			name:   "never above the family quota",
			c:      cluster(0, 10, nil, jobs("j", 4, whole, 1)),
			quotas: &quota16,
			usage:  sizes.Usage{FamilyCores: map[string]int{"standardDSv2Family": 8}},
			want: want{
				Launch: 2, LaunchReasons: []string{"2 queued jobs need 2 more nodes"}, Target: 2,
				Blocked: "quota for family DSv2 is 16/16 cores",
				Waiting: map[string]string{"j02": "queued: quota for family DSv2 is 16/16 cores", "j03": "queued: quota for family DSv2 is 16/16 cores"},
			},
		},
		{
			name: "low priority counts against its own quota",
			c: func() Cluster {
				c := cluster(0, 10, nil, jobs("j", 2, whole, 1))
				c.LowPriority = true
				return c
			}(),
			quotas: &quota16,
			usage:  sizes.Usage{FamilyCores: map[string]int{"standardDSv2Family": 16}},
			want:   want{Launch: 2, LaunchReasons: []string{"2 queued jobs need 2 more nodes"}, Target: 2},
		},
		{
			name: "a restricted size needs an owner",
			c:    Cluster{Name: "a100", Size: nd, MaxInstances: 2, Queued: jobs("j", 1, res(8, 64, 8), 1)},
			want: want{
				Blocked: "size Standard_ND96asr_v4 is restricted: an owner must enable it for this workspace before clusters can use it",
				Waiting: map[string]string{"j00": "queued: size Standard_ND96asr_v4 is restricted: an owner must enable it for this workspace before clusters can use it"},
			},
		},
		{
			name: "jobs no node of the size can run are not demand",
			c: cluster(0, 4, nil, []scheduler.Job{
				{Name: "gpu", Demand: res(1, 1, 1)},
				{Name: "wide", Demand: res(1, 1, 0), Instances: 5},
				{Name: "fat", Demand: res(2, 20, 0)},
			}),
			want: want{Unfit: map[string]string{
				"gpu":  "queued: one instance needs 1 CPUs, 1 GiB and 1 GPUs; a Standard_DS3_v2 node of cluster cpu-cluster has 4 vCPUs, 14 GiB and 0 GPUs",
				"wide": "queued: instance_count 5 is above max_instances 4 of cluster cpu-cluster",
				"fat":  "queued: one instance needs 2 CPUs, 20 GiB and 0 GPUs; a Standard_DS3_v2 node of cluster cpu-cluster has 4 vCPUs, 14 GiB and 0 GPUs",
			}},
		},
		{
			name: "a gang gets new nodes to go with busy ones that will free",
			c: cluster(0, 4, []Node{busyNode("b1", ds3, res(0, 0, 0)), busyNode("b2", ds3, res(0, 0, 0))},
				jobs("ddp", 1, whole, 4)),
			want: want{Launch: 2, LaunchReasons: []string{"1 queued job needs 2 more nodes"}, Current: 2, Target: 4},
		},
		{
			name: "a gang that cannot get all its nodes gets none",
			c: cluster(0, 4, []Node{busyNode("b1", ds3, res(0, 0, 0)), busyNode("b2", ds3, res(0, 0, 0))},
				jobs("ddp", 1, whole, 4)),
			quotas: &quota16,
			usage:  sizes.Usage{FamilyCores: map[string]int{"standardDSv2Family": 12}},
			want: want{
				Current: 2, Target: 2, Blocked: "quota for family DSv2 is 12/16 cores; 2 Standard_DS3_v2 nodes need 8",
				Waiting: map[string]string{"ddp00": "queued: quota for family DSv2 is 12/16 cores; 2 Standard_DS3_v2 nodes need 8"},
			},
		},
		{
			name: "min_instances is kept by launching",
			c:    cluster(2, 4, nil, nil),
			want: want{Launch: 2, LaunchReasons: []string{"2 nodes to keep min_instances 2"}, Target: 2},
		},
		{
			name: "min_instances on top of demand",
			c:    cluster(3, 4, nil, jobs("j", 1, whole, 1)),
			want: want{Launch: 3, LaunchReasons: []string{"1 queued job needs 1 more node", "2 nodes to keep min_instances 3"}, Target: 3},
		},
		{
			name:   "min_instances the quota cannot give",
			c:      cluster(3, 4, nil, nil),
			quotas: &quota16,
			usage:  sizes.Usage{FamilyCores: map[string]int{"standardDSv2Family": 8}},
			want: want{
				Launch: 2, LaunchReasons: []string{"2 nodes to keep min_instances 3"}, Target: 2,
				Blocked: "cannot keep min_instances 3: quota for family DSv2 is 16/16 cores",
			},
		},
		{
			name: "an idle node goes after the idle time",
			c:    cluster(0, 4, []Node{idleNode("old", ds3, 120*time.Second), idleNode("young", ds3, 119*time.Second)}, nil),
			want: want{Current: 2, Target: 1, Terminate: []Termination{{"old", "idle for 2m0s (idle_time_before_scale_down 2m0s)"}}},
		},
		{
			name: "never below min_instances, longest idle goes first",
			c: cluster(1, 4, []Node{
				idleNode("a", ds3, 10*time.Minute), idleNode("b", ds3, 30*time.Minute), idleNode("c", ds3, 20*time.Minute),
			}, nil),
			want: want{Current: 3, Target: 1, Terminate: []Termination{
				{"b", "idle for 30m0s (idle_time_before_scale_down 2m0s)"},
				{"c", "idle for 20m0s (idle_time_before_scale_down 2m0s)"},
			}},
		},
		{
			name: "a busy node is never removed",
			c:    cluster(0, 4, []Node{busyNode("b", ds3, res(4, 14, 0))}, nil),
			want: want{Current: 1, Target: 1},
		},
		{
			name: "a node that just joined has its idle time ahead of it",
			c: cluster(0, 4, []Node{
				{Node: asEmpty("new", "", shape(ds3)), LaunchedAt: t0.Add(-10 * time.Second), IdleSince: t0.Add(-time.Hour)},
				{Node: asEmpty("unknown", "", shape(ds3))},
			}, nil),
			want: want{Current: 2, Target: 2},
		},
		{
			name: "an idle node that queued work fits is kept",
			c:    cluster(0, 4, []Node{idleNode("i", ds3, time.Hour)}, jobs("j", 1, res(1, 1, 0), 1)),
			want: want{Current: 1, Target: 1},
		},
		{
			name: "an idle node a waiting gang needs is kept",
			c: cluster(0, 2, []Node{idleNode("i", ds3, time.Hour), busyNode("b", ds3, res(0, 0, 0))},
				jobs("ddp", 1, whole, 2)),
			want: want{Current: 2, Target: 2, Blocked: "cluster cpu-cluster at max_instances 2",
				Waiting: map[string]string{"ddp00": "queued: cluster cpu-cluster at max_instances 2"}},
		},
		{
			name: "idle nodes above a lowered max_instances go at once",
			c: cluster(0, 2, []Node{
				idleNode("a", ds3, time.Second), idleNode("b", ds3, 2*time.Second), idleNode("c", ds3, 3*time.Second), busyNode("d", ds3, res(1, 1, 0)),
			}, nil),
			want: want{Current: 4, Target: 2, Terminate: []Termination{{"c", "above max_instances 2"}, {"b", "above max_instances 2"}}},
		},
		{
			name: "draining nodes count against max_instances, not toward min_instances",
			c:    cluster(1, 2, []Node{nodeIn("d", scheduler.NodeDraining, t0.Add(-time.Hour))}, jobs("j", 3, whole, 1)),
			want: want{
				Launch: 1, LaunchReasons: []string{"1 queued job needs 1 more node"}, Current: 1, Target: 2,
				Blocked: "cluster cpu-cluster at max_instances 2",
				Waiting: map[string]string{"j01": "queued: cluster cpu-cluster at max_instances 2", "j02": "queued: cluster cpu-cluster at max_instances 2"},
			},
		},
		{
			name: "lost and preempted nodes are removed and replaced",
			c: cluster(0, 2, []Node{nodeIn("l", scheduler.NodeLost, t0.Add(-time.Hour)), nodeIn("p", scheduler.NodePreempted, t0.Add(-time.Hour))},
				jobs("j", 2, whole, 1)),
			want: want{
				Launch: 2, LaunchReasons: []string{"2 queued jobs need 2 more nodes"}, Target: 2,
				Terminate: []Termination{{"l", "node lost: its lease expired"}, {"p", "node preempted"}},
			},
		},
		{
			name: "a node that never joins is given up and replaced",
			c: cluster(0, 1, []Node{nodeIn("slow", scheduler.NodeProvisioning, t0.Add(-DefaultJoinTimeout))},
				jobs("j", 1, whole, 1)),
			want: want{
				Launch: 1, LaunchReasons: []string{"1 queued job needs 1 more node"}, Target: 1,
				Terminate: []Termination{{"slow", "did not join within 10m0s"}},
			},
		},
		{
			name: "launches wait out the backoff after a failed one",
			c: func() Cluster {
				c := cluster(1, 4, nil, jobs("j", 1, whole, 1))
				c.LaunchRetryAt, c.LaunchError = t0.Add(30*time.Second), "exec provider: exit status 1"
				return c
			}(),
			want: want{
				Blocked: "launching a node for cluster cpu-cluster failed (exec provider: exit status 1); next try in 30s",
				Waiting: map[string]string{"j00": "queued: launching a node for cluster cpu-cluster failed (exec provider: exit status 1); next try in 30s"},
			},
		},
		{
			name: "the default GPU quota is one NC24s_v3",
			c:    Cluster{Name: "gpu-cluster", Size: nc24, MaxInstances: 8, Queued: jobs("j", 2, res(1, 1, 4), 1)},
			want: want{
				Launch: 1, LaunchReasons: []string{"1 queued job needs 1 more node"}, Target: 1,
				Blocked: "quota for family NCSv3 is 24/24 cores",
				Waiting: map[string]string{"j01": "queued: quota for family NCSv3 is 24/24 cores"},
			},
		},
		{
			name: "GPU jobs pack by GPUs",
			c: Cluster{Name: "gpu-cluster", Size: nc24, MaxInstances: 8,
				Queued: append(jobs("one", 6, res(6, 100, 1), 1), jobs("two", 2, res(6, 100, 2), 1)...)},
			quotas: &gpuQuota,
			want:   want{Launch: 3, LaunchReasons: []string{"8 queued jobs need 3 more nodes"}, Target: 3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := sizes.DefaultQuotas()
			if tc.quotas != nil {
				q = *tc.quotas
			}
			plan := Decide(State{Clusters: []Cluster{tc.c}, Quotas: q, Usage: tc.usage}, t0)
			if len(plan.Clusters) != 1 || plan.Clusters[0].Cluster != tc.c.Name {
				t.Fatalf("plan for %d clusters: %+v", len(plan.Clusters), plan)
			}
			if diff := cmp.Diff(tc.want, got(plan.Clusters[0]), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideSharesQuotaAcrossClusters(t *testing.T) {
	ds3 := size(t, "Standard_DS3_v2")
	ds2 := size(t, "Standard_DS2_v2") // same family, 2 cores
	q := sizes.DefaultQuotas()
	q.FamilyCores = map[string]int{"standardDSv2Family": 16}
	s := State{
		Clusters: []Cluster{
			{Name: "a", Size: ds3, MaxInstances: 10, Queued: jobs("a", 3, res(4, 14, 0), 1)},
			{Name: "b", Size: ds2, MaxInstances: 10, Queued: jobs("b", 3, res(2, 7, 0), 1)},
		},
		Quotas: q,
		Usage:  sizes.Usage{FamilyCores: map[string]int{"standardDSv2Family": 2}},
	}
	plan := Decide(s, t0)
	if a, b := plan.Clusters[0].Launch, plan.Clusters[1].Launch; a != 3 || b != 1 {
		t.Fatalf("launches a=%d b=%d, want 3 and 1 (2+12+2 = 16 cores)", a, b)
	}
	if got, want := plan.Clusters[1].Blocked, "quota for family DSv2 is 16/16 cores"; got != want {
		t.Errorf("b blocked: %q, want %q", got, want)
	}
	if s.Usage.FamilyCores["standardDSv2Family"] != 2 {
		t.Error("Decide changed the usage it was given")
	}
}

func TestDecideDoesNotModifyItsInputAndIsDeterministic(t *testing.T) {
	ds3 := size(t, "Standard_DS3_v2")
	c := Cluster{Name: "c", Size: ds3, MinInstances: 1, MaxInstances: 50, IdleTimeBeforeScaleDown: time.Minute,
		Queued: append(jobs("s", 40, res(1, 2, 0), 1), jobs("g", 3, res(4, 14, 0), 3)...)}
	for i := range 10 {
		c.Nodes = append(c.Nodes, idleNode(fmt.Sprintf("i%d", i), ds3, time.Duration(i)*time.Minute), busyNode(fmt.Sprintf("b%d", i), ds3, res(1, 3, 0)))
	}
	s := State{Clusters: []Cluster{c}, Quotas: sizes.DefaultQuotas()}
	before := State{Clusters: []Cluster{c}, Quotas: sizes.DefaultQuotas()}
	before.Clusters[0].Nodes = slices.Clone(c.Nodes)
	before.Clusters[0].Queued = slices.Clone(c.Queued)
	p1 := Decide(s, t0)
	if diff := cmp.Diff(before, s); diff != "" {
		t.Fatalf("Decide changed its input:\n%s", diff)
	}
	if diff := cmp.Diff(p1, Decide(s, t0)); diff != "" {
		t.Fatalf("same state, different plans:\n%s", diff)
	}
	if p1.Clusters[0].Launch == 0 {
		t.Fatalf("expected a scale-up: %+v", p1.Clusters[0])
	}
}
