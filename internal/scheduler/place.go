package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Resources is an amount of CPU, memory and GPUs: what a node has or has
// free, or what one instance of a job needs.
type Resources struct {
	MilliCPU int64 // thousandths of a CPU
	Memory   int64 // bytes
	GPUs     int
}

// fitsIn reports whether r fits in free in every dimension.
func (r Resources) fitsIn(free Resources) bool {
	return r.MilliCPU <= free.MilliCPU && r.Memory <= free.Memory && r.GPUs <= free.GPUs
}

// NodeState is where a node is in its life (docs/architecture.md, "State machines").
type NodeState string

// The node states. Only Idle and Busy nodes take new work: a Busy node may
// still have room for another job.
const (
	NodeProvisioning  NodeState = "Provisioning"
	NodeIdle          NodeState = "Idle"
	NodeBusy          NodeState = "Busy"
	NodeDraining      NodeState = "Draining"
	NodeDeprovisioned NodeState = "Deprovisioned"
	NodeLost          NodeState = "Lost"
	NodePreempted     NodeState = "Preempted"
)

// Schedulable reports whether a node in state s takes new work.
func (s NodeState) Schedulable() bool { return s == NodeIdle || s == NodeBusy }

// Node is one node of a pool compute target as placement sees it.
type Node struct {
	ID      string
	Compute string // the cluster or instance the node belongs to
	Size    string
	State   NodeState
	// Total is the node's whole shape.
	Total Resources
	// FreeMilliCPU and FreeMemory are what the attempts already on the node
	// leave free.
	FreeMilliCPU int64
	FreeMemory   int64
	// FreeGPUs lists the indices (as CUDA_VISIBLE_DEVICES counts them) of
	// the GPUs no attempt holds; its length is the free GPU count.
	FreeGPUs []int
}

// Free is what the node has free.
func (n Node) Free() Resources {
	return Resources{MilliCPU: n.FreeMilliCPU, Memory: n.FreeMemory, GPUs: len(n.FreeGPUs)}
}

// Job is a queued job attempt as placement sees it.
type Job struct {
	Name     string
	Compute  string
	Priority int   // higher first
	Seq      int64 // submit order: lower first among equal priority
	// Demand is what one instance needs; how the instance splits it among
	// its processes (process_count_per_instance) is not placement's business.
	Demand Resources
	// Instances is resources.instance_count: the job runs on this many
	// distinct nodes at once or not at all. Below 1 counts as 1.
	Instances int
}

// State is the snapshot placement decides from. Place only reads it.
type State struct {
	Nodes []Node // node IDs unique
	Jobs  []Job  // job names unique
}

// Plan is what Place decided.
type Plan struct {
	// Placements are the jobs to start now, grouped by compute (by name)
	// and in queue order within each.
	Placements []Placement
	// Waiting are the jobs left queued, in the same grouping and order,
	// each with the reason a user reads in `ferry job show`.
	Waiting []Waiting
	// Reservations are the nodes held back for a job that does not fit yet,
	// at most one per compute.
	Reservations []Reservation
}

// Placement starts one job.
type Placement struct {
	Job     string
	Compute string
	// Instances has one entry per instance, in rank order, each on a
	// different node.
	Instances []Assignment
}

// Assignment is one instance of a job on one node.
type Assignment struct {
	Node string
	GPUs []int // indices of the node's GPUs given to the instance; nil without GPUs
}

// Waiting is a job left in the queue, and why.
type Waiting struct {
	Job     string
	Compute string
	Reason  string // "queued: cluster gpu-cluster has no node with 4 free GPUs"
}

// Reservation holds nodes for the job at the head of a compute's queue.
type Reservation struct {
	Compute string
	Job     string
	Nodes   []string
}

// Place decides which queued jobs start now and where, for every pool
// compute target in s. It does not modify s, and the same s gives the same
// plan.
//
// Order: jobs are taken by priority (higher first), then submit order
// (Seq), then name, each compute target on its own. A job starts only if
// all of its instances fit, each on a different Idle or Busy node, in CPU,
// memory and GPUs; a job that does not fit does not stop later jobs from
// being tried (backfill).
//
// Node choice: first fit over the nodes ordered most-loaded first (fewest
// total GPUs, then fewest free GPUs, CPU and memory, then input order). That
// packs work onto busy nodes, which keeps whole nodes free for large jobs and
// lets idle nodes go idle long enough for the autoscaler to remove them, and
// keeps CPU-only jobs off GPU nodes while CPU nodes have room. GPUs are given
// lowest index first.
//
// Starvation: backfill alone would let a stream of small jobs starve a large
// one forever, since some small job always fits first. So the first job in
// queue order that does not fit now, but would fit on the compute's ready
// nodes once they are empty, gets a reservation: the instance_count nodes
// closest to fitting it (smallest shortfall, summed over CPU, memory and GPUs
// as fractions of each node's total). Later jobs backfill only onto the other
// nodes. Closest-to-fitting stands in for "frees soonest" because placement
// knows no run times; reserved nodes take no new work, so the chosen nodes
// only drain, and the reservation ends when the job fits. One reservation per
// compute is enough to free every job in turn (when the head starts, the next
// blocked job becomes the head) and idles as little capacity as possible. A
// job of higher priority is still taken before the head, reserved nodes or
// not: priority means exactly that.
//
// Cost: one sort of the queue and of the nodes, then about log(nodes) work
// per placement, using a tree of per-dimension maxima of free resources. A
// job whose shape is at least that of one that already failed in this pass
// is refused without a search, since resources only shrink within a pass.
func Place(s State) Plan {
	nodesBy := map[string][]int32{}
	provisioning := map[string]int{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		switch {
		case n.State.Schedulable():
			nodesBy[n.Compute] = append(nodesBy[n.Compute], int32(i))
		case n.State == NodeProvisioning:
			provisioning[n.Compute]++
		}
	}
	jobsBy := map[string][]int32{}
	for i := range s.Jobs {
		jobsBy[s.Jobs[i].Compute] = append(jobsBy[s.Jobs[i].Compute], int32(i))
	}
	var plan Plan
	for _, c := range slices.Sorted(maps.Keys(jobsBy)) {
		p := newPass(&s, c, nodesBy[c], provisioning[c])
		p.run(jobsBy[c], &plan)
	}
	return plan
}

// pass places the queue of one compute target.
type pass struct {
	s            *State
	compute      string
	nodes        []int32 // position → index in s.Nodes, in first-fit order
	free, total  *tree   // by position
	avail        int     // ready nodes not reserved
	gpus         [][]int // by position: free GPU indices, copied on first use
	provisioning int

	failed  []failure
	reasons map[failure]cachedReason
	epoch   int // bumped whenever resources change, to expire reasons

	resJob   string
	resFree  []Resources // free resources of the reserved nodes
	resCount int         // reservations made: 0 or 1
}

type failure struct {
	d Resources
	n int
}

type cachedReason struct {
	epoch  int
	reason string
}

// maxFailures bounds the memo of failed shapes; it only saves work, so a
// full memo costs speed, never correctness.
const maxFailures = 64

func newPass(s *State, compute string, idx []int32, provisioning int) *pass {
	nodes := slices.Clone(idx)
	slices.SortStableFunc(nodes, func(a, b int32) int {
		x, y := &s.Nodes[a], &s.Nodes[b]
		if c := cmp.Compare(x.Total.GPUs, y.Total.GPUs); c != 0 {
			return c
		}
		if c := cmp.Compare(len(x.FreeGPUs), len(y.FreeGPUs)); c != 0 {
			return c
		}
		if c := cmp.Compare(x.FreeMilliCPU, y.FreeMilliCPU); c != 0 {
			return c
		}
		return cmp.Compare(x.FreeMemory, y.FreeMemory)
	})
	p := &pass{
		s: s, compute: compute, nodes: nodes, avail: len(nodes), provisioning: provisioning,
		free: newTree(len(nodes)), total: newTree(len(nodes)),
		gpus: make([][]int, len(nodes)), reasons: map[failure]cachedReason{},
	}
	for pos, i := range nodes {
		n := &s.Nodes[i]
		p.free.setLeaf(pos, n.Free())
		p.total.setLeaf(pos, n.Total)
	}
	p.free.build()
	p.total.build()
	return p
}

func (p *pass) run(jobs []int32, plan *Plan) {
	order := slices.Clone(jobs)
	js := p.s.Jobs
	slices.SortFunc(order, func(a, b int32) int {
		x, y := &js[a], &js[b]
		if c := cmp.Compare(y.Priority, x.Priority); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Seq, y.Seq); c != 0 {
			return c
		}
		if c := strings.Compare(x.Name, y.Name); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	buf := make([]int32, 0, 16)
	for _, ji := range order {
		j := &js[ji]
		d, n := demandOf(j)
		var ok bool
		if buf, ok = p.fit(d, n, buf[:0]); ok {
			plan.Placements = append(plan.Placements, p.take(j, d, buf))
			continue
		}
		plan.Waiting = append(plan.Waiting, Waiting{Job: j.Name, Compute: p.compute, Reason: p.why(j, d, n, plan)})
	}
}

// demandOf is a job's per-instance demand, negative amounts read as zero,
// and its instance count, at least 1.
func demandOf(j *Job) (Resources, int) {
	d := Resources{MilliCPU: max(j.Demand.MilliCPU, 0), Memory: max(j.Demand.Memory, 0), GPUs: max(j.Demand.GPUs, 0)}
	return d, max(j.Instances, 1)
}

// fit finds n available nodes that each fit d, or reports that there are
// not n.
func (p *pass) fit(d Resources, n int, out []int32) ([]int32, bool) {
	if n > p.avail || !d.fitsIn(p.free.root()) {
		return out, false
	}
	for _, f := range p.failed {
		if n >= f.n && f.d.fitsIn(d) {
			return out, false
		}
	}
	out = p.free.collect(d, n, out)
	if len(out) < n {
		p.remember(failure{d, n})
		return out, false
	}
	return out, true
}

// remember adds a failed shape to the memo, keeping only the shapes no other
// entry already covers.
func (p *pass) remember(f failure) {
	kept := p.failed[:0]
	for _, g := range p.failed {
		if !(g.n >= f.n && f.d.fitsIn(g.d)) {
			kept = append(kept, g)
		}
	}
	p.failed = kept
	if len(p.failed) < maxFailures {
		p.failed = append(p.failed, f)
	}
}

// take gives the nodes at positions to one job.
func (p *pass) take(j *Job, d Resources, positions []int32) Placement {
	pl := Placement{Job: j.Name, Compute: p.compute, Instances: make([]Assignment, len(positions))}
	for k, pos := range positions {
		node := &p.s.Nodes[p.nodes[pos]]
		a := Assignment{Node: node.ID}
		if d.GPUs > 0 {
			g := p.gpus[pos]
			if g == nil {
				g = slices.Sorted(slices.Values(node.FreeGPUs))
			}
			a.GPUs = g[:d.GPUs:d.GPUs]
			p.gpus[pos] = g[d.GPUs:]
		}
		pl.Instances[k] = a
		left := p.free.leaf(int(pos))
		left.MilliCPU -= d.MilliCPU
		left.Memory -= d.Memory
		left.GPUs -= d.GPUs
		p.free.set(int(pos), left)
	}
	p.epoch++
	return pl
}

// why explains a job that does not fit, reserving nodes for it if it is
// the first job that would fit the compute's nodes once they are empty.
func (p *pass) why(j *Job, d Resources, n int, plan *Plan) string {
	key := failure{d, n}
	if c, ok := p.reasons[key]; ok && c.epoch == p.epoch {
		return c.reason
	}
	r := p.explain(j, d, n, plan)
	if p.resJob != j.Name {
		p.reasons[key] = cachedReason{p.epoch, r}
	}
	return r
}

func (p *pass) explain(j *Job, d Resources, n int, plan *Plan) string {
	cluster := "cluster " + p.compute
	if len(p.nodes) == 0 {
		return "queued: " + cluster + " has no ready nodes" + p.provisioningNote()
	}
	if ever := len(p.total.collect(d, n, nil)); ever < n {
		if ever == 0 {
			return "queued: " + cluster + " has no node with " + describe(d, p.total.root(), "") + p.provisioningNote()
		}
		return fmt.Sprintf("queued: instance_count %d needs %d nodes with %s; %s has %d", n, n, describe(d, Resources{}, ""), cluster, ever) + p.provisioningNote()
	}
	now := len(p.free.collect(d, n, nil))
	if p.resCount == 0 {
		shape := describe(d, p.free.root(), "free")
		p.reserve(j, d, n, plan)
		if n == 1 {
			return fmt.Sprintf("queued: %s has no node with %s; node %s is reserved for this job", cluster, shape, plan.Reservations[len(plan.Reservations)-1].Nodes[0])
		}
		return fmt.Sprintf("queued: waiting for %d nodes for instance_count %d; %d %s now; %d nodes are reserved for this job", n, n, now, fitVerb(now), n)
	}
	held := 0
	for _, f := range p.resFree {
		if d.fitsIn(f) {
			held++
		}
	}
	switch {
	case now+held >= n:
		return "queued: nodes reserved for an earlier job " + p.resJob
	case n == 1:
		if shape := describe(d, p.free.root(), "free"); shape != "" {
			return "queued: " + cluster + " has no node with " + shape
		}
		return "queued: " + cluster + " has no free node"
	default:
		return fmt.Sprintf("queued: waiting for %d nodes for instance_count %d; %d %s now", n, n, now, fitVerb(now))
	}
}

func fitVerb(n int) string {
	if n == 1 {
		return "fits"
	}
	return "fit"
}

func (p *pass) provisioningNote() string {
	if p.provisioning == 0 {
		return ""
	}
	return fmt.Sprintf("; %d %s provisioning", p.provisioning, plural(p.provisioning, "node", "nodes"))
}

// reserve holds for j the n nodes closest to fitting d, and takes them out
// of what later jobs may use.
func (p *pass) reserve(j *Job, d Resources, n int, plan *Plan) {
	type cand struct {
		pos     int32
		deficit float64
	}
	var cands []cand
	for pos := range p.nodes {
		tot := p.total.leaf(pos)
		if !d.fitsIn(tot) {
			continue
		}
		f := p.free.leaf(pos)
		cands = append(cands, cand{int32(pos), shortfall(d.MilliCPU, f.MilliCPU, tot.MilliCPU) +
			shortfall(d.Memory, f.Memory, tot.Memory) + shortfall(int64(d.GPUs), int64(f.GPUs), int64(tot.GPUs))})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(a.deficit, b.deficit); c != 0 {
			return c
		}
		return cmp.Compare(a.pos, b.pos)
	})
	res := Reservation{Compute: p.compute, Job: j.Name, Nodes: make([]string, n)}
	for k, c := range cands[:n] {
		res.Nodes[k] = p.s.Nodes[p.nodes[c.pos]].ID
		p.resFree = append(p.resFree, p.free.leaf(int(c.pos)))
		p.free.set(int(c.pos), unavailable)
	}
	p.avail -= n
	p.resJob = j.Name
	p.resCount++
	p.epoch++
	plan.Reservations = append(plan.Reservations, res)
}

// shortfall is how much of total is missing for want to fit in free.
func shortfall(want, free, total int64) float64 {
	if want <= free || total <= 0 {
		return 0
	}
	return float64(want-max(free, 0)) / float64(total)
}

// describe names d's amounts in words: only those above most when some
// are, all of them otherwise (no single node has them together).
func describe(d, most Resources, adj string) string {
	var all, over []string
	word := func(amount, unit string) string {
		if adj == "" {
			return amount + " " + unit
		}
		return amount + " " + adj + " " + unit
	}
	if d.GPUs > 0 {
		s := word(strconv.Itoa(d.GPUs), plural(d.GPUs, "GPU", "GPUs"))
		all = append(all, s)
		if d.GPUs > most.GPUs {
			over = append(over, s)
		}
	}
	if d.MilliCPU > 0 {
		cpus := strconv.FormatFloat(float64(d.MilliCPU)/1000, 'f', -1, 64)
		unit := "CPUs"
		if d.MilliCPU == 1000 {
			unit = "CPU"
		}
		s := word(cpus, unit)
		all = append(all, s)
		if d.MilliCPU > most.MilliCPU {
			over = append(over, s)
		}
	}
	if d.Memory > 0 {
		s := formatBytes(d.Memory) + " of " + strings.TrimPrefix(adj+" memory", " ")
		all = append(all, s)
		if d.Memory > most.Memory {
			over = append(over, s)
		}
	}
	if len(over) > 0 {
		return joinAnd(over)
	}
	return joinAnd(all)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func joinAnd(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

func formatBytes(b int64) string {
	if b >= 1<<30 {
		return strconv.FormatFloat(math.Round(float64(b)/(1<<30)*100)/100, 'f', -1, 64) + " GiB"
	}
	return strconv.FormatInt((b+(1<<20)-1)>>20, 10) + " MiB"
}
