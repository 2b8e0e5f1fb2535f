package scheduler

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

// world is a simulated pool of clusters for TestSimulation: nodes with the
// attempts running on them, a queue, and a clock counted in rounds.
type world struct {
	r       *rand.Rand
	nodes   []Node
	byID    map[string]int
	queue   []Job
	running []run
	seq     int64
	round   int
}

type run struct {
	job  Job
	on   []Assignment
	ends int // round
}

var (
	cpuNode = cpus(4, 14, 0)   // Standard_DS3_v2
	gpuNode = cpus(24, 448, 4) // Standard_NC24s_v3
	cpuJobs = []Resources{cpus(0.5, 1, 0), cpus(1, 2, 0), cpus(2, 4, 0), cpus(1, 7, 0), cpuNode}
	gpuJobs = []Resources{cpus(6, 100, 1), cpus(12, 200, 2), gpuNode, cpus(2, 16, 0)}
)

// maxRun is the longest a simulated job runs, in rounds; a reservation must
// be honoured within it.
const maxRun = 4

func newWorld(seed uint64, cpuNodes, gpuNodes int) *world {
	w := &world{r: rand.New(rand.NewPCG(seed, seed+1)), byID: map[string]int{}}
	add := func(compute string, shape Resources, k int) {
		n := node(fmt.Sprintf("%s-%05d", compute, k), compute, shape)
		switch k % 97 {
		case 0:
			n.State = NodeDraining
		case 1:
			n.State = NodeProvisioning
		}
		w.byID[n.ID] = len(w.nodes)
		w.nodes = append(w.nodes, n)
	}
	for k := range cpuNodes {
		add("cpu-cluster", cpuNode, k)
	}
	for k := range gpuNodes {
		add("gpu-cluster", gpuNode, k)
	}
	return w
}

// arrive queues n jobs of the mixed shapes: mostly single-instance CPU jobs,
// some whole-node jobs, some gangs, a quarter on the GPU cluster, a few of
// higher priority.
func (w *world) arrive(n int) {
	for range n {
		w.seq++
		j := Job{Name: fmt.Sprintf("job-%07d", w.seq), Seq: w.seq, Instances: 1}
		if w.r.IntN(4) == 0 {
			j.Compute, j.Demand = "gpu-cluster", gpuJobs[w.r.IntN(len(gpuJobs))]
		} else {
			j.Compute, j.Demand = "cpu-cluster", cpuJobs[w.r.IntN(len(cpuJobs))]
		}
		if w.r.IntN(20) == 0 {
			j.Instances = []int{2, 4, 8}[w.r.IntN(3)]
		}
		if w.r.IntN(50) == 0 {
			j.Priority = 1 + w.r.IntN(2)
		}
		w.queue = append(w.queue, j)
	}
}

func (w *world) state() State { return State{Nodes: w.nodes, Jobs: w.queue} }

// apply starts what the plan placed and drops it from the queue. The
// checks of TestSimulation have already passed.
func (w *world) apply(p Plan) {
	placed := map[string]bool{}
	byName := map[string]Job{}
	for _, j := range w.queue {
		byName[j.Name] = j
	}
	for _, pl := range p.Placements {
		j := byName[pl.Job]
		placed[pl.Job] = true
		for _, a := range pl.Instances {
			n := &w.nodes[w.byID[a.Node]]
			n.FreeMilliCPU -= j.Demand.MilliCPU
			n.FreeMemory -= j.Demand.Memory
			n.FreeGPUs = slices.DeleteFunc(slices.Clone(n.FreeGPUs), func(g int) bool { return slices.Contains(a.GPUs, g) })
			n.State = NodeBusy
		}
		w.running = append(w.running, run{job: j, on: pl.Instances, ends: w.round + 1 + w.r.IntN(maxRun)})
	}
	w.queue = slices.DeleteFunc(w.queue, func(j Job) bool { return placed[j.Name] })
}

// tick advances the clock one round and frees what finished.
func (w *world) tick() {
	w.round++
	w.running = slices.DeleteFunc(w.running, func(r run) bool {
		if r.ends > w.round {
			return false
		}
		for _, a := range r.on {
			n := &w.nodes[w.byID[a.Node]]
			n.FreeMilliCPU += r.job.Demand.MilliCPU
			n.FreeMemory += r.job.Demand.Memory
			n.FreeGPUs = append(slices.Clone(n.FreeGPUs), a.GPUs...)
			if n.FreeMilliCPU == n.Total.MilliCPU && n.FreeMemory == n.Total.Memory && len(n.FreeGPUs) == n.Total.GPUs {
				n.State = NodeIdle
			}
		}
		return true
	})
}

// TestSimulation runs Place round after round on 10,000 nodes with 100,000
// queued jobs, finishing jobs on a simulated clock and queuing more, and
// checks every plan: no node over-committed, no GPU given twice, gangs whole
// on distinct nodes, nothing placed on a node reserved for a job ahead of it,
// no waiting job that fitted when its turn came (so priority and submit
// order hold), a reservation for exactly the first blocked job, and two gangs
// that each need 60% of their cluster's nodes, queued at a full cluster in
// front of a stream of small jobs, start within the longest run time. (With
// reservations turned off, backfill starves both for all 16 rounds tried.)
// SIM_SEED=n runs it on another random world.
func TestSimulation(t *testing.T) {
	cpuN, gpuN, queued, rounds := 8000, 2000, 100_000, 10
	if testing.Short() {
		cpuN, gpuN, queued = 800, 200, 10_000
	}
	seed := uint64(42)
	if s := os.Getenv("SIM_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	w := newWorld(seed, cpuN, gpuN)
	w.arrive(queued)
	// Fill the clusters with small and mid-sized work first, so that the
	// big jobs arrive at a busy cluster.
	w.apply(Place(w.state()))
	bigs := map[string]int{"big-gpu": -1, "big-cpu": -1}
	w.queue = append(w.queue,
		Job{Name: "big-gpu", Compute: "gpu-cluster", Seq: -2, Demand: gpuNode, Instances: gpuN * 6 / 10},
		Job{Name: "big-cpu", Compute: "cpu-cluster", Seq: -1, Demand: cpuNode, Instances: cpuN * 6 / 10},
	)
	arrivals := queued / 20
	for ; w.round <= maxRun+2 || w.round < rounds; w.tick() {
		st := w.state()
		p := Place(st)
		checkPlan(t, w, st, p)
		if t.Failed() {
			t.FailNow()
		}
		for _, pl := range p.Placements {
			if _, big := bigs[pl.Job]; big {
				bigs[pl.Job] = w.round
			}
		}
		t.Logf("round %d: %d queued, %d placed, %d running, reservations %v, bigs %v", w.round, len(w.queue), len(p.Placements), len(w.running), reservedJobs(p), bigs)
		w.apply(p)
		w.arrive(arrivals)
	}
	for name, at := range bigs {
		if at < 0 || at > 1+maxRun {
			t.Errorf("%s started in round %d; its reservation should free nodes within %d rounds", name, at, maxRun)
		}
	}
}

func reservedJobs(p Plan) []string {
	var out []string
	for _, r := range p.Reservations {
		out = append(out, r.Job)
	}
	return out
}

// checkPlan checks one plan against the state it was made from.
func checkPlan(t *testing.T, w *world, st State, p Plan) {
	t.Helper()
	jobs := map[string]Job{}
	for _, j := range st.Jobs {
		jobs[j.Name] = j
	}
	seen := map[string]bool{}
	for _, pl := range p.Placements {
		seen[pl.Job] = true
	}
	for _, wt := range p.Waiting {
		if seen[wt.Job] {
			t.Fatalf("%s both placed and waiting", wt.Job)
		}
		seen[wt.Job] = true
		if wt.Reason == "" {
			t.Errorf("%s waits with no reason", wt.Job)
		}
	}
	if len(seen) != len(st.Jobs) || len(p.Placements)+len(p.Waiting) != len(st.Jobs) {
		t.Fatalf("plan covers %d jobs (%d entries), queue has %d", len(seen), len(p.Placements)+len(p.Waiting), len(st.Jobs))
	}

	// Resources: apply the plan to a copy of the free amounts.
	free := make([]Resources, len(st.Nodes))
	gpuFree := make([]map[int]bool, len(st.Nodes))
	for i, n := range st.Nodes {
		free[i] = n.Free()
	}
	placedOn := map[string][]int{} // job → node indexes
	for _, pl := range p.Placements {
		j := jobs[pl.Job]
		if len(pl.Instances) != max(j.Instances, 1) {
			t.Fatalf("%s: %d instances placed, instance_count %d", pl.Job, len(pl.Instances), j.Instances)
		}
		distinct := map[string]bool{}
		for _, a := range pl.Instances {
			if distinct[a.Node] {
				t.Fatalf("%s: two instances on node %s", pl.Job, a.Node)
			}
			distinct[a.Node] = true
			i, ok := w.byID[a.Node]
			if !ok {
				t.Fatalf("%s: placed on unknown node %s", pl.Job, a.Node)
			}
			n := st.Nodes[i]
			if n.Compute != j.Compute || !n.State.Schedulable() {
				t.Fatalf("%s (compute %s): placed on %s node %s of %s", pl.Job, j.Compute, n.State, n.ID, n.Compute)
			}
			if len(a.GPUs) != j.Demand.GPUs {
				t.Fatalf("%s: %d GPUs on %s, wants %d", pl.Job, len(a.GPUs), a.Node, j.Demand.GPUs)
			}
			if gpuFree[i] == nil {
				gpuFree[i] = map[int]bool{}
				for _, g := range n.FreeGPUs {
					gpuFree[i][g] = true
				}
			}
			for _, g := range a.GPUs {
				if !gpuFree[i][g] {
					t.Fatalf("%s: GPU %d of %s is not free or given twice", pl.Job, g, a.Node)
				}
				delete(gpuFree[i], g)
			}
			free[i].MilliCPU -= j.Demand.MilliCPU
			free[i].Memory -= j.Demand.Memory
			free[i].GPUs -= j.Demand.GPUs
			if free[i].MilliCPU < 0 || free[i].Memory < 0 || free[i].GPUs < 0 {
				t.Fatalf("node %s over-committed after %s: free %+v", a.Node, pl.Job, free[i])
			}
			placedOn[pl.Job] = append(placedOn[pl.Job], i)
		}
	}

	// Order: replay each compute's queue in priority and submit order. A
	// waiting job must not have fitted on the nodes open to it when its turn
	// came; nodes reserved for a job are closed to every job after it.
	for _, compute := range []string{"cpu-cluster", "gpu-cluster"} {
		var queue []Job
		for _, j := range st.Jobs {
			if j.Compute == compute {
				queue = append(queue, j)
			}
		}
		slices.SortFunc(queue, func(x, y Job) int {
			return cmp.Or(cmp.Compare(y.Priority, x.Priority), cmp.Compare(x.Seq, y.Seq), cmp.Compare(x.Name, y.Name))
		})
		var res *Reservation
		for k := range p.Reservations {
			if p.Reservations[k].Compute == compute {
				res = &p.Reservations[k]
			}
		}
		var ready []int
		for i, n := range st.Nodes {
			if n.Compute == compute && n.State.Schedulable() {
				ready = append(ready, i)
			}
		}
		now := make(map[int]Resources, len(ready))
		for _, i := range ready {
			now[i] = st.Nodes[i].Free()
		}
		closed := map[int]bool{}
		failed := map[failure]bool{}
		firstBlocked := ""
		for _, j := range queue {
			d, n := demandOf(&j)
			if on, ok := placedOn[j.Name]; ok {
				for _, i := range on {
					if closed[i] {
						t.Fatalf("%s placed on %s, reserved for %s ahead of it", j.Name, st.Nodes[i].ID, res.Job)
					}
					r := now[i]
					now[i] = Resources{r.MilliCPU - d.MilliCPU, r.Memory - d.Memory, r.GPUs - d.GPUs}
				}
				continue
			}
			if !failed[failure{d, n}] {
				fits, ever := 0, 0
				for _, i := range ready {
					if !closed[i] && d.fitsIn(now[i]) {
						fits++
					}
					if d.fitsIn(st.Nodes[i].Total) {
						ever++
					}
				}
				if fits >= n {
					t.Fatalf("%s (priority %d, seq %d) waits, but %d nodes fitted it at its turn: %s", j.Name, j.Priority, j.Seq, fits, reasons(p)[j.Name])
				}
				if ever >= n && firstBlocked == "" {
					firstBlocked = j.Name
				}
				failed[failure{d, n}] = true
			}
			if res != nil && res.Job == j.Name {
				for _, id := range res.Nodes {
					closed[w.byID[id]] = true
				}
				// Resources are now fewer than when shapes failed before,
				// so the failures stay valid.
			}
		}
		switch {
		case res == nil && firstBlocked != "":
			t.Fatalf("%s: %s waits and would fit an emptied node, but nothing is reserved for it", compute, firstBlocked)
		case res != nil && res.Job != firstBlocked:
			t.Fatalf("%s: reserved for %s, but the first blocked job is %s", compute, res.Job, firstBlocked)
		}
	}
}
