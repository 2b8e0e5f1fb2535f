package autoscale

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/sizes"
)

// TestSimulation drives one cluster through a burst with Decide and
// scheduler.Place on a simulated clock: nodes join a minute after launch,
// jobs run for minutes, a small second burst comes later. It checks every
// step: never above max_instances or the quota, no busy node removed, no
// node removed before its idle time, every job run; and over the run: the
// burst grows the cluster to what the quota allows, nothing is launched
// while the cluster winds down with an empty queue, and once the work is
// done the cluster is back to zero within the idle time (plus the join time
// of a node launched just before the queue emptied).
func TestSimulation(t *testing.T) {
	ds3, _ := sizes.Builtin().Lookup("Standard_DS3_v2")
	const (
		step     = 10 * time.Second
		joinTime = time.Minute
		idleTime = 120 * time.Second
		maxNodes = 50
	)
	quotas := sizes.DefaultQuotas()
	quotas.FamilyCores = map[string]int{"standardDSv2Family": 160} // 40 nodes: the quota binds before max
	r := rand.New(rand.NewPCG(9, 10))

	c := Cluster{Name: "cpu-cluster", Size: ds3, MaxInstances: maxNodes, IdleTimeBeforeScaleDown: idleTime}
	type running struct {
		job  scheduler.Job
		on   []scheduler.Assignment
		ends time.Time
	}
	var (
		now       = t0
		runs      []running
		seq       int64
		done      int
		submitted int
		launches  []time.Time
		nextID    int
		peak      int
	)
	shapes := []scheduler.Resources{res(0.5, 1, 0), res(1, 2, 0), res(2, 6, 0), res(4, 14, 0)}
	submit := func(n int) {
		for range n {
			seq++
			j := scheduler.Job{Name: fmt.Sprintf("job-%05d", seq), Compute: c.Name, Seq: seq, Demand: shapes[r.IntN(len(shapes))], Instances: 1}
			if r.IntN(10) == 0 {
				j.Instances = 2 + r.IntN(3)
			}
			c.Queued = append(c.Queued, j)
			submitted++
		}
	}
	byID := func(id string) *Node {
		for i := range c.Nodes {
			if c.Nodes[i].ID == id {
				return &c.Nodes[i]
			}
		}
		t.Fatalf("no node %s", id)
		return nil
	}
	usage := func() sizes.Usage {
		var u sizes.Usage
		u.Add(ds3, len(c.Nodes), false)
		return u
	}

	submit(2000)
	secondBurst := t0.Add(3 * time.Hour)
	var emptySince, firstScaleDown time.Time
	for now.Before(t0.Add(6 * time.Hour)) {
		if !now.Before(secondBurst) && !secondBurst.IsZero() {
			submit(30)
			secondBurst = time.Time{}
		}
		plan := Decide(State{Clusters: []Cluster{c}, Quotas: quotas, Usage: usage()}, now)
		cp := plan.Clusters[0]
		for _, term := range cp.Terminate {
			n := byID(term.Node)
			if n.State == scheduler.NodeBusy {
				t.Fatalf("%s: busy node %s terminated: %s", now.Sub(t0), n.ID, term.Reason)
			}
			if n.State == scheduler.NodeIdle && now.Sub(n.IdleSince) < idleTime {
				t.Fatalf("%s: node %s removed after %s idle: %s", now.Sub(t0), n.ID, now.Sub(n.IdleSince), term.Reason)
			}
			if firstScaleDown.IsZero() {
				firstScaleDown = now
			}
			c.Nodes = slices.DeleteFunc(c.Nodes, func(x Node) bool { return x.ID == term.Node })
		}
		for range cp.Launch {
			nextID++
			c.Nodes = append(c.Nodes, Node{Node: scheduler.Node{ID: fmt.Sprintf("node-%04d", nextID), State: scheduler.NodeProvisioning}, LaunchedAt: now})
			launches = append(launches, now)
		}
		if !emptySince.IsZero() && len(c.Queued) == 0 && now.Sub(emptySince) >= idleTime+joinTime && len(c.Nodes) > 0 {
			t.Fatalf("%s: %d nodes left %s after the last job ended", now.Sub(t0), len(c.Nodes), now.Sub(emptySince))
		}
		if len(c.Nodes) > maxNodes {
			t.Fatalf("%s: %d nodes, max_instances %d", now.Sub(t0), len(c.Nodes), maxNodes)
		}
		if usage().FamilyCores["standardDSv2Family"] > 160 {
			t.Fatalf("%s: %d cores in use, quota 160", now.Sub(t0), usage().FamilyCores["standardDSv2Family"])
		}
		peak = max(peak, len(c.Nodes))

		// Nodes join; the scheduler places; time passes; jobs end.
		for i := range c.Nodes {
			n := &c.Nodes[i]
			if n.State == scheduler.NodeProvisioning && now.Sub(n.LaunchedAt) >= joinTime {
				n.Node = asEmpty(n.ID, c.Name, shape(ds3))
				n.IdleSince = now
			}
		}
		var sn []scheduler.Node
		for _, n := range c.Nodes {
			sn = append(sn, n.Node)
		}
		placed := scheduler.Place(scheduler.State{Nodes: sn, Jobs: c.Queued})
		started := map[string]bool{}
		for _, pl := range placed.Placements {
			j := c.Queued[slices.IndexFunc(c.Queued, func(q scheduler.Job) bool { return q.Name == pl.Job })]
			for _, a := range pl.Instances {
				n := byID(a.Node)
				n.FreeMilliCPU -= j.Demand.MilliCPU
				n.FreeMemory -= j.Demand.Memory
				n.State = scheduler.NodeBusy
			}
			runs = append(runs, running{j, pl.Instances, now.Add(time.Duration(30+r.IntN(570)) * time.Second)})
			started[j.Name] = true
		}
		c.Queued = slices.DeleteFunc(c.Queued, func(j scheduler.Job) bool { return started[j.Name] })

		now = now.Add(step)
		runs = slices.DeleteFunc(runs, func(x running) bool {
			if x.ends.After(now) {
				return false
			}
			for _, a := range x.on {
				n := byID(a.Node)
				n.FreeMilliCPU += x.job.Demand.MilliCPU
				n.FreeMemory += x.job.Demand.Memory
				if n.FreeMilliCPU == n.Total.MilliCPU && n.FreeMemory == n.Total.Memory {
					n.State, n.IdleSince = scheduler.NodeIdle, now
				}
			}
			done++
			return true
		})
		switch {
		case len(c.Queued) > 0 || len(runs) > 0:
			emptySince = time.Time{}
		case emptySince.IsZero():
			emptySince = now
		}
	}

	if done != submitted {
		t.Fatalf("%d of %d jobs ran", done, submitted)
	}
	if peak != 40 {
		t.Errorf("the burst grew the cluster to %d nodes; the quota allows 40", peak)
	}
	if len(c.Nodes) != 0 {
		t.Errorf("%d nodes left at the end, want 0", len(c.Nodes))
	}
	for _, at := range launches {
		if at.After(firstScaleDown) && at.Before(t0.Add(3*time.Hour)) {
			t.Errorf("launch at %s while the cluster was winding down with an empty queue", at.Sub(t0))
		}
	}
	t.Logf("%d jobs, %d launches, peak %d nodes, first scale-down at %s", submitted, len(launches), peak, firstScaleDown.Sub(t0))
}
