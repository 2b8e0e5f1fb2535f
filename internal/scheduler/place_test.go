package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

const gib = 1 << 30

// cpus makes Resources of c CPUs, m GiB and g GPUs.
func cpus(c float64, m float64, g int) Resources {
	return Resources{MilliCPU: int64(c * 1000), Memory: int64(m * gib), GPUs: g}
}

// node is an empty Idle node of compute c with the given shape.
func node(id, c string, shape Resources) Node {
	n := Node{ID: id, Compute: c, State: NodeIdle, Total: shape, FreeMilliCPU: shape.MilliCPU, FreeMemory: shape.Memory}
	for g := range shape.GPUs {
		n.FreeGPUs = append(n.FreeGPUs, g)
	}
	return n
}

// busy is a Busy node of compute c with shape total and free the given
// amounts and GPU indices.
func busy(id, c string, total, free Resources, gpus ...int) Node {
	return Node{ID: id, Compute: c, State: NodeBusy, Total: total, FreeMilliCPU: free.MilliCPU, FreeMemory: free.Memory, FreeGPUs: gpus}
}

func job(name, c string, seq int64, d Resources, instances int) Job {
	return Job{Name: name, Compute: c, Seq: seq, Demand: d, Instances: instances}
}

// where summarises a plan as job → nodes (with GPUs), for readable diffs.
func where(p Plan) map[string][]string {
	out := map[string][]string{}
	for _, pl := range p.Placements {
		for _, a := range pl.Instances {
			s := a.Node
			if a.GPUs != nil {
				s += fmt.Sprint(a.GPUs)
			}
			out[pl.Job] = append(out[pl.Job], s)
		}
	}
	return out
}

func reasons(p Plan) map[string]string {
	out := map[string]string{}
	for _, w := range p.Waiting {
		out[w.Job] = w.Reason
	}
	return out
}

func TestPlace(t *testing.T) {
	small := cpus(1, 1, 0)
	box := cpus(4, 16, 0)
	gpuBox := cpus(24, 448, 4)
	for _, tc := range []struct {
		name    string
		state   State
		where   map[string][]string
		reasons map[string]string
		reserve []Reservation
	}{
		{
			name: "priority first, then submit order",
			state: State{
				Nodes: []Node{node("n1", "c", cpus(2, 8, 0))},
				Jobs: []Job{
					job("old", "c", 1, small, 1),
					{Name: "urgent", Compute: "c", Seq: 9, Priority: 5, Demand: small},
					job("newer", "c", 2, small, 1),
				},
			},
			where:   map[string][]string{"urgent": {"n1"}, "old": {"n1"}},
			reasons: map[string]string{"newer": "queued: cluster c has no node with 1 free CPU; node n1 is reserved for this job"},
			reserve: []Reservation{{Compute: "c", Job: "newer", Nodes: []string{"n1"}}},
		},
		{
			name: "memory is a dimension of fit",
			state: State{
				Nodes: []Node{node("n1", "c", box)},
				Jobs:  []Job{job("fat", "c", 1, cpus(1, 12, 0), 1), job("fatter", "c", 2, cpus(1, 8, 0), 1)},
			},
			where:   map[string][]string{"fat": {"n1"}},
			reasons: map[string]string{"fatter": "queued: cluster c has no node with 8 GiB of free memory; node n1 is reserved for this job"},
			reserve: []Reservation{{Compute: "c", Job: "fatter", Nodes: []string{"n1"}}},
		},
		{
			name: "GPU indices lowest first, never twice",
			state: State{
				Nodes: []Node{busy("g1", "gpu-cluster", gpuBox, cpus(20, 400, 0), 3, 1, 0)},
				Jobs: []Job{
					job("two", "gpu-cluster", 1, cpus(1, 1, 2), 1),
					job("one", "gpu-cluster", 2, cpus(1, 1, 1), 1),
					job("more", "gpu-cluster", 3, cpus(1, 1, 1), 1),
				},
			},
			where:   map[string][]string{"two": {"g1[0 1]"}, "one": {"g1[3]"}},
			reasons: map[string]string{"more": "queued: cluster gpu-cluster has no node with 1 free GPU; node g1 is reserved for this job"},
			reserve: []Reservation{{Compute: "gpu-cluster", Job: "more", Nodes: []string{"g1"}}},
		},
		{
			name: "a job that fits no node ever reserves nothing and blocks nobody",
			state: State{
				Nodes: []Node{node("g1", "gpu-cluster", gpuBox)},
				Jobs:  []Job{job("huge", "gpu-cluster", 1, cpus(1, 1, 8), 1), job("next", "gpu-cluster", 2, cpus(1, 1, 4), 1)},
			},
			where:   map[string][]string{"next": {"g1[0 1 2 3]"}},
			reasons: map[string]string{"huge": "queued: cluster gpu-cluster has no node with 8 GPUs"},
		},
		{
			name: "gang on distinct nodes",
			state: State{
				Nodes: []Node{node("a", "c", box), node("b", "c", box), node("d", "c", box)},
				Jobs:  []Job{job("ddp", "c", 1, cpus(1, 1, 0), 2)},
			},
			where: map[string][]string{"ddp": {"a", "b"}},
		},
		{
			name: "gang larger than the cluster",
			state: State{
				Nodes: []Node{node("a", "c", box), {ID: "p", Compute: "c", State: NodeProvisioning}},
				Jobs:  []Job{job("ddp", "c", 1, cpus(1, 1, 0), 3), job("after", "c", 2, small, 1)},
			},
			where:   map[string][]string{"after": {"a"}},
			reasons: map[string]string{"ddp": "queued: instance_count 3 needs 3 nodes with 1 CPU and 1 GiB of memory; cluster c has 1; 1 node provisioning"},
		},
		{
			name: "gang all or nothing, then reserved",
			state: State{
				Nodes: []Node{
					node("a", "c", box), node("b", "c", box),
					busy("full", "c", box, cpus(0.5, 2, 0)),
				},
				Jobs: []Job{job("big", "c", 1, cpus(2, 4, 0), 3), job("small", "c", 2, small, 1)},
			},
			reasons: map[string]string{
				"big":   "queued: waiting for 3 nodes for instance_count 3; 2 fit now; 3 nodes are reserved for this job",
				"small": "queued: nodes reserved for an earlier job big",
			},
			reserve: []Reservation{{Compute: "c", Job: "big", Nodes: []string{"a", "b", "full"}}},
		},
		{
			name: "backfill around the reservation, onto the node furthest from fitting",
			state: State{
				Nodes: []Node{
					busy("nearly", "c", box, cpus(3, 12, 0)),
					busy("barely", "c", box, cpus(1, 4, 0)),
				},
				Jobs: []Job{
					job("big", "c", 1, cpus(4, 8, 0), 1),
					job("s1", "c", 2, small, 1),
					job("s2", "c", 3, small, 1),
					job("odd", "c", 4, cpus(8, 1, 0), 1),
				},
			},
			where: map[string][]string{"s1": {"barely"}},
			reasons: map[string]string{
				"big": "queued: cluster c has no node with 4 free CPUs; node nearly is reserved for this job",
				"s2":  "queued: nodes reserved for an earlier job big",
				"odd": "queued: cluster c has no node with 8 CPUs",
				"s1":  "",
			},
			reserve: []Reservation{{Compute: "c", Job: "big", Nodes: []string{"nearly"}}},
		},
		{
			name: "higher priority goes before the head, reserved node or not",
			state: State{
				Nodes: []Node{busy("nearly", "c", box, cpus(3, 12, 0))},
				Jobs: []Job{
					job("big", "c", 1, cpus(4, 8, 0), 1),
					{Name: "vip", Compute: "c", Seq: 5, Priority: 1, Demand: small},
				},
			},
			where:   map[string][]string{"vip": {"nearly"}},
			reasons: map[string]string{"big": "queued: cluster c has no node with 4 free CPUs; node nearly is reserved for this job"},
			reserve: []Reservation{{Compute: "c", Job: "big", Nodes: []string{"nearly"}}},
		},
		{
			name: "pack onto busy nodes, CPU jobs onto CPU nodes",
			state: State{
				Nodes: []Node{
					node("gpu", "c", gpuBox),
					node("idle", "c", box),
					busy("busy", "c", box, cpus(2, 8, 0)),
				},
				Jobs: []Job{job("j1", "c", 1, small, 1), job("j2", "c", 2, small, 1), job("j3", "c", 3, small, 1), job("t", "c", 4, cpus(1, 1, 1), 1)},
			},
			where: map[string][]string{"j1": {"busy"}, "j2": {"busy"}, "j3": {"idle"}, "t": {"gpu[0]"}},
		},
		{
			name: "only Idle and Busy nodes take work",
			state: State{
				Nodes: []Node{
					{ID: "d", Compute: "c", State: NodeDraining, Total: box, FreeMilliCPU: 4000, FreeMemory: 16 * gib},
					{ID: "l", Compute: "c", State: NodeLost, Total: box, FreeMilliCPU: 4000, FreeMemory: 16 * gib},
					{ID: "p1", Compute: "c", State: NodeProvisioning, Total: box},
					{ID: "p2", Compute: "c", State: NodeProvisioning, Total: box},
				},
				Jobs: []Job{job("j", "c", 1, small, 1)},
			},
			reasons: map[string]string{"j": "queued: cluster c has no ready nodes; 2 nodes provisioning"},
		},
		{
			name: "computes are independent",
			state: State{
				Nodes: []Node{node("x1", "x", box), node("y1", "y", box)},
				Jobs:  []Job{job("a", "y", 1, box, 1), job("b", "x", 2, box, 1), job("c", "x", 3, box, 1), job("z", "nowhere", 4, small, 1)},
			},
			where: map[string][]string{"a": {"y1"}, "b": {"x1"}},
			reasons: map[string]string{
				"c": "queued: cluster x has no node with 4 free CPUs and 16 GiB of free memory; node x1 is reserved for this job",
				"z": "queued: cluster nowhere has no ready nodes",
			},
			reserve: []Reservation{{Compute: "x", Job: "c", Nodes: []string{"x1"}}},
		},
		{
			name: "joint shortage names every amount",
			state: State{
				Nodes: []Node{busy("m", "c", box, cpus(3, 1, 0)), busy("k", "c", box, cpus(1, 12, 0))},
				Jobs:  []Job{job("b", "c", 1, cpus(2, 2, 0), 1), job("a", "c", 2, cpus(4, 16, 0), 1)},
			},
			reasons: map[string]string{
				"b": "queued: cluster c has no node with 2 free CPUs and 2 GiB of free memory; node m is reserved for this job",
				"a": "queued: cluster c has no node with 4 free CPUs and 16 GiB of free memory",
			},
			reserve: []Reservation{{Compute: "c", Job: "b", Nodes: []string{"m"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Place(tc.state)
			want := tc.where
			if want == nil {
				want = map[string][]string{}
			}
			if diff := gocmp.Diff(want, where(p)); diff != "" {
				t.Errorf("placements (-want +got):\n%s", diff)
			}
			got := reasons(p)
			for job, r := range tc.reasons {
				if r == "" {
					if _, waiting := got[job]; waiting {
						t.Errorf("%s waits: %s", job, got[job])
					}
					continue
				}
				if got[job] != r {
					t.Errorf("reason for %s:\n got %q\nwant %q", job, got[job], r)
				}
			}
			if diff := gocmp.Diff(tc.reserve, p.Reservations); diff != "" {
				t.Errorf("reservations (-want +got):\n%s", diff)
			}
			if n := len(p.Waiting) + len(p.Placements); n != len(tc.state.Jobs) {
				t.Errorf("%d placed + waiting, want every one of %d jobs", n, len(tc.state.Jobs))
			}
		})
	}
}

func TestPlaceDoesNotModifyItsInputAndIsDeterministic(t *testing.T) {
	s := randomState(rand.New(rand.NewPCG(1, 2)), 40, 200)
	before := cloneState(s)
	p1 := Place(s)
	if diff := gocmp.Diff(before, s); diff != "" {
		t.Fatalf("Place modified its input (-before +after):\n%s", diff)
	}
	p2 := Place(cloneState(s))
	if diff := gocmp.Diff(p1, p2); diff != "" {
		t.Fatalf("two passes over the same state differ:\n%s", diff)
	}
	if len(p1.Placements) == 0 || len(p1.Waiting) == 0 {
		t.Fatalf("random state too easy or too hard: %d placed, %d waiting", len(p1.Placements), len(p1.Waiting))
	}
	// Jobs given in another order are the same queue.
	shuffled := cloneState(s)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(shuffled.Jobs), func(i, j int) {
		shuffled.Jobs[i], shuffled.Jobs[j] = shuffled.Jobs[j], shuffled.Jobs[i]
	})
	if diff := gocmp.Diff(p1, Place(shuffled)); diff != "" {
		t.Fatalf("job order in the input changed the plan:\n%s", diff)
	}
}

// TestPlaceMatchesReference compares Place with a plain O(jobs × nodes)
// implementation of the same rules on many random states: the tree, the memo
// of failed shapes and the reason cache must change nothing but speed.
func TestPlaceMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 500 {
		s := randomState(r, 1+r.IntN(30), 1+r.IntN(120))
		got := Place(s)
		wantWhere, wantRes := referencePlace(s)
		if diff := gocmp.Diff(wantWhere, where(got)); diff != "" {
			t.Fatalf("state %d: placements differ from the reference (-want +got):\n%s", i, diff)
		}
		if diff := gocmp.Diff(wantRes, got.Reservations); diff != "" {
			t.Fatalf("state %d: reservations differ from the reference (-want +got):\n%s", i, diff)
		}
	}
}

// referencePlace is Place without any of its speed: every job scans every
// node.
func referencePlace(s State) (map[string][]string, []Reservation) {
	wh := map[string][]string{}
	var res []Reservation
	computes := map[string]bool{}
	for _, j := range s.Jobs {
		computes[j.Compute] = true
	}
	for _, c := range slices.Sorted(maps.Keys(computes)) {
		var nodes []Node
		for _, n := range s.Nodes {
			if n.Compute == c && n.State.Schedulable() {
				nodes = append(nodes, n)
			}
		}
		slices.SortStableFunc(nodes, func(x, y Node) int {
			return cmp.Or(cmp.Compare(x.Total.GPUs, y.Total.GPUs), cmp.Compare(len(x.FreeGPUs), len(y.FreeGPUs)),
				cmp.Compare(x.FreeMilliCPU, y.FreeMilliCPU), cmp.Compare(x.FreeMemory, y.FreeMemory))
		})
		free := make([]Resources, len(nodes))
		gpus := make([][]int, len(nodes))
		reserved := make([]bool, len(nodes))
		for i, n := range nodes {
			free[i] = n.Free()
			gpus[i] = slices.Sorted(slices.Values(n.FreeGPUs))
		}
		var jobs []Job
		for _, j := range s.Jobs {
			if j.Compute == c {
				jobs = append(jobs, j)
			}
		}
		slices.SortFunc(jobs, func(x, y Job) int {
			return cmp.Or(cmp.Compare(y.Priority, x.Priority), cmp.Compare(x.Seq, y.Seq), cmp.Compare(x.Name, y.Name))
		})
		haveRes := false
		for _, j := range jobs {
			d, n := demandOf(&j)
			var fit []int
			for i := range nodes {
				if len(fit) < n && !reserved[i] && d.fitsIn(free[i]) {
					fit = append(fit, i)
				}
			}
			if len(fit) == n {
				for _, i := range fit {
					free[i].MilliCPU -= d.MilliCPU
					free[i].Memory -= d.Memory
					free[i].GPUs -= d.GPUs
					s := nodes[i].ID
					if d.GPUs > 0 {
						s += fmt.Sprint(gpus[i][:d.GPUs])
						gpus[i] = gpus[i][d.GPUs:]
					}
					wh[j.Name] = append(wh[j.Name], s)
				}
				continue
			}
			if haveRes {
				continue
			}
			type cand struct {
				i int
				f float64
			}
			var cands []cand
			for i, nd := range nodes {
				if d.fitsIn(nd.Total) {
					cands = append(cands, cand{i, shortfall(d.MilliCPU, free[i].MilliCPU, nd.Total.MilliCPU) +
						shortfall(d.Memory, free[i].Memory, nd.Total.Memory) +
						shortfall(int64(d.GPUs), int64(free[i].GPUs), int64(nd.Total.GPUs))})
				}
			}
			if len(cands) < n {
				continue
			}
			slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(a.f, b.f) })
			r := Reservation{Compute: c, Job: j.Name}
			for _, cd := range cands[:n] {
				reserved[cd.i] = true
				r.Nodes = append(r.Nodes, nodes[cd.i].ID)
			}
			res = append(res, r)
			haveRes = true
		}
	}
	return wh, res
}

// randomState makes a small cluster world with mixed node shapes, partly
// used nodes, GPUs, gangs and priorities, in two computes.
func randomState(r *rand.Rand, nodes, jobs int) State {
	shapes := []Resources{cpus(4, 14, 0), cpus(8, 28, 0), cpus(24, 448, 4), cpus(6, 112, 1)}
	states := []NodeState{NodeIdle, NodeBusy, NodeBusy, NodeIdle, NodeDraining, NodeProvisioning}
	var s State
	for i := range nodes {
		shape := shapes[r.IntN(len(shapes))]
		n := node(fmt.Sprintf("n%03d", i), []string{"c", "d"}[r.IntN(2)], shape)
		n.State = states[r.IntN(len(states))]
		if n.State == NodeBusy {
			n.FreeMilliCPU = r.Int64N(shape.MilliCPU + 1)
			n.FreeMemory = r.Int64N(shape.Memory + 1)
			r.Shuffle(len(n.FreeGPUs), func(a, b int) { n.FreeGPUs[a], n.FreeGPUs[b] = n.FreeGPUs[b], n.FreeGPUs[a] })
			n.FreeGPUs = n.FreeGPUs[:r.IntN(len(n.FreeGPUs)+1)]
		}
		s.Nodes = append(s.Nodes, n)
	}
	demands := []Resources{cpus(1, 2, 0), cpus(0.5, 1, 0), cpus(2, 8, 0), cpus(4, 14, 0), cpus(6, 100, 1), cpus(4, 40, 2), cpus(1, 4, 1), cpus(16, 8, 0), cpus(0, 0, 0)}
	for i := range jobs {
		j := job(fmt.Sprintf("j%04d", i), []string{"c", "d"}[r.IntN(2)], int64(r.IntN(jobs)), demands[r.IntN(len(demands))], 1)
		if r.IntN(6) == 0 {
			j.Instances = 2 + r.IntN(4)
		}
		j.Priority = r.IntN(3)
		s.Jobs = append(s.Jobs, j)
	}
	return s
}

func cloneState(s State) State {
	c := State{Nodes: slices.Clone(s.Nodes), Jobs: slices.Clone(s.Jobs)}
	for i := range c.Nodes {
		c.Nodes[i].FreeGPUs = slices.Clone(c.Nodes[i].FreeGPUs)
	}
	return c
}
