package autoscale

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/sizes"
)

// DefaultJoinTimeout is how long a launched node may take to join before it
// is given up and terminated, when a cluster sets no JoinTimeout.
const DefaultJoinTimeout = 10 * time.Minute

// Node is one node of a cluster: what placement sees, plus the times the
// autoscaler needs.
type Node struct {
	scheduler.Node
	// LaunchedAt is when the provider was asked for the node.
	LaunchedAt time.Time
	// IdleSince is when the node last became Idle (for a node that joined
	// and never ran anything, when it joined).
	IdleSince time.Time
}

// Cluster is one amlcompute cluster (or serverless size pool) with its
// nodes and the jobs queued for it.
type Cluster struct {
	Name        string
	Size        sizes.Size
	LowPriority bool // tier: low_priority, which counts against the low-priority quota
	// MinInstances and MaxInstances bound the node count: min_instances and
	// max_instances of the compute file.
	MinInstances, MaxInstances int
	// IdleTimeBeforeScaleDown is how long a node stays Idle before it is
	// removed: idle_time_before_scale_down.
	IdleTimeBeforeScaleDown time.Duration
	// JoinTimeout is how long a Provisioning node may take to join;
	// 0 means DefaultJoinTimeout.
	JoinTimeout time.Duration
	// LaunchRetryAt, while it is after now, holds back launches because the
	// last one failed (the loop's backoff); LaunchError is that failure.
	LaunchRetryAt time.Time
	LaunchError   string
	Nodes         []Node
	// Queued are the jobs waiting for this cluster, with their per-instance
	// demand and instance count; their Compute is not read.
	Queued []scheduler.Job
}

// State is the snapshot Decide works from. Decide only reads it.
type State struct {
	// Clusters are decided in this order, which is also the order in which
	// they get the quota left; pass them in a stable order (by name).
	Clusters []Cluster
	Quotas   sizes.Quotas
	// Usage is the cores the workspace's nodes hold now, every cluster's
	// Provisioning, Idle, Busy, Draining and not yet removed Lost nodes.
	Usage sizes.Usage
}

// Plan is what Decide decided, one entry per cluster in the order given.
type Plan struct {
	Clusters []ClusterPlan
}

// ClusterPlan is the decision for one cluster.
type ClusterPlan struct {
	Cluster string
	// Launch is how many nodes to launch now, and LaunchReasons why.
	Launch        int
	LaunchReasons []string
	// Terminate lists the nodes to remove, each with its reason.
	Terminate []Termination
	// Current is the nodes that count against max_instances now; Target is
	// that count once this plan is carried out (`ferry compute show`).
	Current, Target int
	// Blocked says why the cluster does not grow as far as its queue or
	// min_instances want; empty when nothing holds it back.
	Blocked string
	// Waiting are the queued jobs that neither existing nodes nor the nodes
	// launched now will run, each with the reason: Blocked, prefixed with
	// "queued: ".
	Waiting []JobReason
	// Unfit are the queued jobs no node of this size can ever run: they are
	// not demand, and launching would not help.
	Unfit []JobReason
}

// Termination is one node to remove.
type Termination struct {
	Node   string
	Reason string
}

// JobReason is a job and why it waits.
type JobReason struct {
	Job    string
	Reason string
}

// Decide decides launches and terminations for every cluster in s at time
// now. It does not modify s, and the same s and now give the same plan.
//
// Scale up: the queued jobs of a cluster are packed, in queue order and with
// the scheduler's own rules (scheduler.Place: priority, fit, gangs on
// distinct nodes), onto the free room of its Idle and Busy nodes, then onto
// its Provisioning nodes as if they had joined empty, then onto as many new
// nodes of the cluster's size as max_instances and the quota allow. The new
// nodes that receive work, or are reserved for a gang that will start once
// busy nodes free up, are launched; no more. So jobs that existing or coming
// nodes will run cause no launch, a job no node of the size can run is
// reported in Unfit and causes none either, and a gang that cannot get all
// of its nodes gets none launched. When the cluster has fewer than
// min_instances nodes, it is brought up to min_instances.
//
// Scale down: an Idle node is removed once it has been idle for
// idle_time_before_scale_down (counted from when it joined, for a node that
// never worked), oldest idle first, never below min_instances. Busy and
// Draining nodes are never removed. Idle nodes above a lowered max_instances
// are removed at once. Lost and Preempted nodes, and nodes that did not join
// within the join timeout, are removed and no longer counted, so that demand
// replaces them.
//
// Thrash: there is no separate cooldown, because the rules above already
// rule out the flapping one would guard against. A node that queued work
// fits is never removed (the packing uses it first), a cluster never
// launches and removes idle nodes in the same plan, Provisioning nodes
// count as capacity so a pass in the middle of a scale-up does not launch
// twice, and a node that just joined has its whole idle time ahead of it.
// What remains, a node removed a minute before a job arrives, is what
// idle_time_before_scale_down is for.
func Decide(s State, now time.Time) Plan {
	usage := s.Usage.Clone()
	plan := Plan{Clusters: make([]ClusterPlan, 0, len(s.Clusters))}
	for i := range s.Clusters {
		plan.Clusters = append(plan.Clusters, decide(&s.Clusters[i], s.Quotas, &usage, now))
	}
	return plan
}

// shape is a node of size s in placement's terms.
func shape(s sizes.Size) scheduler.Resources {
	return scheduler.Resources{MilliCPU: int64(s.VCPUs) * 1000, Memory: s.MemoryBytes(), GPUs: s.GPUs}
}

func decide(c *Cluster, q sizes.Quotas, usage *sizes.Usage, now time.Time) ClusterPlan {
	p := ClusterPlan{Cluster: c.Name}
	full := shape(c.Size)
	joinTimeout := cmp.Or(c.JoinTimeout, DefaultJoinTimeout)

	// Sort the nodes out: what counts against max_instances, what toward
	// min_instances, what takes work, what goes.
	var ready, coming []scheduler.Node
	var counted, live int
	for i := range c.Nodes {
		n := &c.Nodes[i]
		switch n.State {
		case scheduler.NodeLost:
			p.Terminate = append(p.Terminate, Termination{n.ID, "node lost: its lease expired"})
		case scheduler.NodePreempted:
			p.Terminate = append(p.Terminate, Termination{n.ID, "node preempted"})
		case scheduler.NodeDeprovisioned:
		case scheduler.NodeProvisioning:
			if !n.LaunchedAt.IsZero() && now.Sub(n.LaunchedAt) >= joinTimeout {
				p.Terminate = append(p.Terminate, Termination{n.ID, "did not join within " + joinTimeout.String()})
				continue
			}
			counted++
			live++
			coming = append(coming, asEmpty(n.ID, c.Name, full))
		case scheduler.NodeDraining:
			counted++
		default: // Idle, Busy
			counted++
			live++
			ready = append(ready, capped(n.Node, c.Name, full))
		}
	}
	p.Current = counted

	// Demand: queued jobs that one node of this size can run at all.
	var jobs []scheduler.Job
	instances := 0
	for _, j := range c.Queued {
		if why := unfit(c, j, full); why != "" {
			p.Unfit = append(p.Unfit, JobReason{j.Name, why})
			continue
		}
		j.Compute = c.Name
		jobs = append(jobs, j)
		instances += max(j.Instances, 1)
	}

	// Room to grow, and which limit sets it.
	const (
		byMax = iota
		byQuota
		byBackoff
	)
	room, limit := c.MaxInstances-counted, byMax
	if quotaRoom, _ := q.Headroom(*usage, c.Size, c.LowPriority); quotaRoom < room {
		room, limit = quotaRoom, byQuota
	}
	if now.Before(c.LaunchRetryAt) {
		room, limit = 0, byBackoff
	}
	room = max(room, 0)

	// Pack the queue onto existing, coming and new nodes.
	sim := scheduler.State{Jobs: jobs, Nodes: make([]scheduler.Node, 0, len(ready)+len(coming)+min(room, instances))}
	sim.Nodes = append(append(sim.Nodes, ready...), coming...)
	taken := make(map[string]bool, len(c.Nodes))
	for _, n := range c.Nodes {
		taken[n.ID] = true
	}
	fresh := map[string]bool{}
	for k := 0; len(fresh) < min(room, instances); k++ {
		id := "new-" + strconv.Itoa(k)
		if !taken[id] {
			fresh[id] = true
			sim.Nodes = append(sim.Nodes, asEmpty(id, c.Name, full))
		}
	}
	packed := scheduler.Place(sim)
	// A job counts toward the launch when it is placed on a new node, or
	// reserved one that no placement took: a gang waiting for busy nodes to
	// drain still needs the new ones. A job reserved only nodes that other
	// jobs took waits for them like any job the limit holds back.
	used := map[string]bool{}
	onNew := map[string]bool{}
	for _, pl := range packed.Placements {
		for _, a := range pl.Instances {
			used[a.Node] = true
			if fresh[a.Node] {
				onNew[pl.Job] = true
			}
		}
	}
	for _, r := range packed.Reservations {
		for _, id := range r.Nodes {
			if fresh[id] && !used[id] {
				onNew[r.Job] = true
			}
		}
		for _, id := range r.Nodes {
			used[id] = true
		}
	}
	forNew := len(onNew)
	for id := range fresh {
		if used[id] {
			p.Launch++
		}
	}
	if p.Launch > 0 {
		p.LaunchReasons = append(p.LaunchReasons, fmt.Sprintf("%d queued %s %d more %s", forNew, plural(forNew, "job needs", "jobs need"), p.Launch, plural(p.Launch, "node", "nodes")))
	}

	// Keep min_instances.
	minShort := false
	if short := c.MinInstances - live - p.Launch; short > 0 {
		add := min(short, room-p.Launch)
		if add > 0 {
			p.Launch += add
			p.LaunchReasons = append(p.LaunchReasons, fmt.Sprintf("%d %s to keep min_instances %d", add, plural(add, "node", "nodes"), c.MinInstances))
		}
		minShort = add < short
	}
	usage.Add(c.Size, p.Launch, c.LowPriority)

	// Say what holds the cluster back, with the quota as it stands after
	// this plan's launches.
	var why string
	switch limit {
	case byMax:
		why = fmt.Sprintf("cluster %s at max_instances %d", c.Name, c.MaxInstances)
	case byQuota:
		// The room the quota left is spent once this plan's launches are
		// counted, so one node more than what is left fails the check.
		why = "the quota for size " + c.Size.Name + " is reached"
		if err := q.Check(*usage, c.Size, room-p.Launch+1, c.LowPriority); err != nil {
			why = err.Error()
		}
	case byBackoff:
		why = fmt.Sprintf("launching a node for cluster %s failed", c.Name)
		if c.LaunchError != "" {
			why += " (" + c.LaunchError + ")"
		}
		why += "; next try in " + roundDuration(c.LaunchRetryAt.Sub(now))
	}
	for _, w := range packed.Waiting {
		if !onNew[w.Job] {
			p.Waiting = append(p.Waiting, JobReason{w.Job, "queued: " + why})
		}
	}
	switch {
	case len(p.Waiting) > 0:
		p.Blocked = why
	case minShort:
		p.Blocked = fmt.Sprintf("cannot keep min_instances %d: %s", c.MinInstances, why)
	}

	// Scale down, only when not scaling up: a plan that launches has demand
	// that any idle node would serve first.
	removed := 0
	if p.Launch == 0 {
		type idle struct {
			id      string
			idleFor time.Duration
		}
		var cands []idle
		for i := range c.Nodes {
			n := &c.Nodes[i]
			if n.State != scheduler.NodeIdle || used[n.ID] {
				continue
			}
			since := n.IdleSince
			if n.LaunchedAt.After(since) {
				since = n.LaunchedAt
			}
			d := time.Duration(0)
			if !since.IsZero() {
				d = now.Sub(since)
			}
			cands = append(cands, idle{n.ID, d})
		}
		slices.SortFunc(cands, func(a, b idle) int {
			return cmp.Or(cmp.Compare(b.idleFor, a.idleFor), cmp.Compare(a.id, b.id))
		})
		for _, n := range cands {
			if live-removed <= c.MinInstances {
				break
			}
			switch {
			case counted-removed > c.MaxInstances:
				p.Terminate = append(p.Terminate, Termination{n.id, fmt.Sprintf("above max_instances %d", c.MaxInstances)})
			case n.idleFor >= c.IdleTimeBeforeScaleDown && n.idleFor > 0:
				p.Terminate = append(p.Terminate, Termination{n.id, fmt.Sprintf("idle for %s (idle_time_before_scale_down %s)", roundDuration(n.idleFor), roundDuration(c.IdleTimeBeforeScaleDown))})
			default:
				continue
			}
			removed++
		}
	}
	p.Target = counted + p.Launch - removed
	return p
}

// unfit says why no node of the cluster's size can ever run j, or "".
func unfit(c *Cluster, j scheduler.Job, full scheduler.Resources) string {
	if n := max(j.Instances, 1); n > c.MaxInstances {
		return fmt.Sprintf("queued: instance_count %d is above max_instances %d of cluster %s", n, c.MaxInstances, c.Name)
	}
	d := j.Demand
	if d.MilliCPU <= full.MilliCPU && d.Memory <= full.Memory && d.GPUs <= full.GPUs {
		return ""
	}
	return fmt.Sprintf("queued: one instance needs %s CPUs, %s GiB and %d GPUs; a %s node of cluster %s has %d vCPUs, %s GiB and %d GPUs",
		strconv.FormatFloat(float64(d.MilliCPU)/1000, 'f', -1, 64), gibs(d.Memory), d.GPUs,
		c.Size.Name, c.Name, c.Size.VCPUs, strconv.FormatFloat(c.Size.MemoryGiB, 'f', -1, 64), c.Size.GPUs)
}

func gibs(b int64) string {
	return strconv.FormatFloat(math.Round(float64(b)/(1<<30)*100)/100, 'f', -1, 64)
}

// asEmpty is a node of the given shape with nothing on it, as a Provisioning
// node will be when it joins, or a new one.
func asEmpty(id, cluster string, full scheduler.Resources) scheduler.Node {
	n := scheduler.Node{ID: id, Compute: cluster, State: scheduler.NodeIdle, Total: full, FreeMilliCPU: full.MilliCPU, FreeMemory: full.Memory}
	for g := range full.GPUs {
		n.FreeGPUs = append(n.FreeGPUs, g)
	}
	return n
}

// capped is an existing node for the packing, its shape cut to the size's:
// a node that reports a little more memory than its size must still be
// packed before the new nodes (which have exactly the size), or the packing
// would launch a node while an idle one sits there.
func capped(n scheduler.Node, cluster string, full scheduler.Resources) scheduler.Node {
	n.Compute = cluster
	n.Total = scheduler.Resources{MilliCPU: min(n.Total.MilliCPU, full.MilliCPU), Memory: min(n.Total.Memory, full.Memory), GPUs: min(n.Total.GPUs, full.GPUs)}
	n.FreeMilliCPU = min(n.FreeMilliCPU, full.MilliCPU)
	n.FreeMemory = min(n.FreeMemory, full.Memory)
	if len(n.FreeGPUs) > full.GPUs {
		n.FreeGPUs = n.FreeGPUs[:full.GPUs:full.GPUs]
	}
	return n
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// roundDuration prints whole seconds: "2m0s", not "2m0.000312s".
func roundDuration(d time.Duration) string { return d.Round(time.Second).String() }
