package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/autoscale"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/store"
)

// poolLoop is the pool loop: it keeps the nodes of pool computes (clusters,
// compute instances, attached machines) in line with their queues. It is
// level-triggered: every pass reads the stored computes, nodes and jobs,
// marks nodes whose lease ran out Lost, gives back the machines of computes
// being deleted, places queued jobs with scheduler.Place, asks
// autoscale.Decide for launches and terminations (join timeout, idle time,
// quotas, launch backoff) and applies both.
//
// It owns the machines (through the node providers), the node records and
// the memory of its passes (launch backoff, node targets). What it does to
// jobs (start a placed attempt, fail a lost node's attempts, say why a job
// waits) goes through poolWorkspace, the rest of the workspace, which
// owns jobs. Its passes run one at a time; its methods other than pass are
// safe to call from other goroutines.
type poolLoop struct {
	st            store.Store
	ws            poolWorkspace
	providers     ProviderFactory // nil: no pool compute can get machines
	checkProvider ProviderCheck   // nil: stored provider blocks are not checked again
	sizes         *sizes.Catalog
	types         map[string]*compute.Pool // the pool types, as Config.PoolTypes
	apiURL        string                   // what a launched node's agent is told to reach
	// nodeLease: a joined node silent this long is Lost. joinTimeout: a
	// launched node that has not joined this long is replaced.
	nodeLease, joinTimeout time.Duration
	// preemptPoll, preemptGrace: see Config.
	preemptPoll, preemptGrace time.Duration
	now                       func() time.Time
	// started is when the server started: a node's silence while the
	// server was down does not count against its lease.
	started time.Time
	log     *slog.Logger

	mu          sync.Mutex
	launchFails map[string]int       // per compute: launches failed in a row
	launchRetry map[string]time.Time // per compute: no launch before
	launchErr   map[string]string    // per compute: the last launch error
	nodeTargets map[string]int       // per compute: the node count the autoscaler last aimed at
	// Preemption (preempt.go).
	preemptedAt   map[string]time.Time // per node: when it was found preempted
	preemptPolled map[string]time.Time // per compute: when its machines were last listed for preemption
}

// poolWorkspace is what the pool loop needs of the rest of the workspace:
// the job side, the agent protocol's memory, and the concerns that ride on
// each pass (preemption, compute instances). *Service implements it.
type poolWorkspace interface {
	// forgetDelivered is told the active attempts at the start of a pass.
	forgetDelivered(active []store.Job)
	// failCompute marks a compute Failed with why, once.
	failCompute(ctx context.Context, name, why string)
	// computeUnusable logs that a compute cannot be used for why, and
	// computeUsable that it can, each once per change.
	computeUnusable(name, why string)
	computeUsable(name string)
	// setQueuedReason says why a queued job waits; failQueued fails one
	// that can never run.
	setQueuedReason(ctx context.Context, name, reason string)
	failQueued(ctx context.Context, name, why string)
	// startPlaced starts a new attempt of a job on the nodes it was
	// placed on (nothing when the job is no longer queued); false when
	// starting it failed, which startPlaced logs and handles.
	startPlaced(ctx context.Context, p scheduler.Placement) bool
	// finish ends an attempt (see Service.finish).
	finish(ctx context.Context, name string, attempt int, status, reason string, exit *int, msg string) error
	// requeuePreempted ends an attempt its node's preemption stopped and
	// queues the job again (see Service.requeuePreempted).
	requeuePreempted(ctx context.Context, name string, attempt int, node, why string) error
	// instanceStates is compute instances' part of a pass; it returns
	// live with the nodes' new states.
	instanceStates(ctx context.Context, pools map[string]*poolCompute, live []store.Node, onNode map[string][]store.Job) []store.Node
}

var _ poolWorkspace = (*Service)(nil)

// newPoolLoop makes the pool loop of a workspace set up by cfg (with its
// defaults filled in), started at started.
func newPoolLoop(cfg Config, ws poolWorkspace, started time.Time) *poolLoop {
	return &poolLoop{
		st: cfg.Store, ws: ws, providers: cfg.Providers, checkProvider: cfg.CheckProvider, sizes: cfg.Sizes, types: cfg.PoolTypes,
		apiURL: cfg.APIURL, nodeLease: cfg.NodeLease, joinTimeout: cfg.JoinTimeout,
		preemptPoll: cfg.PreemptPoll, preemptGrace: cfg.PreemptGrace,
		now: cfg.Now, started: started, log: cfg.Log,
		launchFails: map[string]int{}, launchRetry: map[string]time.Time{}, launchErr: map[string]string{}, nodeTargets: map[string]int{},
		preemptedAt: map[string]time.Time{}, preemptPolled: map[string]time.Time{},
	}
}

// target is the node count the autoscaler last aimed at for compute (0
// before the first pass that saw it).
func (l *poolLoop) target(compute string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nodeTargets[compute]
}

// pass is one pass of the pool loop.
func (l *poolLoop) pass(ctx context.Context) error {
	recs, err := l.st.ListComputes(ctx)
	if err != nil {
		return err
	}
	pools, names, broken := l.loadPools(ctx, recs)
	nodes, err := l.st.ListNodes(ctx, "")
	if err != nil {
		return err
	}
	if len(pools) == 0 && len(nodes) == 0 {
		return nil
	}
	active, err := l.st.ListJobs(ctx, store.JobFilter{Statuses: activeStatuses})
	if err != nil {
		return err
	}
	l.ws.forgetDelivered(active)
	// Which node runs which active attempt.
	onNode := map[string][]store.Job{}
	for _, j := range active {
		if _, ok := pools[j.Compute]; !ok {
			continue
		}
		for _, r := range placementOf(j).Ranks {
			onNode[r.Node] = append(onNode[r.Node], j)
		}
	}
	now := l.now()

	live := l.leases(ctx, pools, broken, nodes, onNode, now)
	l.forgetBroken(ctx, recs, broken)
	live, names = l.deletePools(ctx, pools, names, live)
	live = l.preemptions(ctx, pools, live, onNode, now)
	live = l.ws.instanceStates(ctx, pools, live, onNode)
	queued, placed, err := l.place(ctx, pools, broken, live, onNode)
	if err != nil {
		return err
	}
	return l.scale(ctx, pools, names, live, onNode, queued, placed, now)
}

// loadPools reads the pool computes of recs: those usable by name (and
// their names, in recs' order), and why each unusable one is. An unusable
// compute is marked Failed; its nodes are retired as for a deleted
// compute, and one being deleted is forgotten once none is left.
func (l *poolLoop) loadPools(ctx context.Context, recs []store.Compute) (pools map[string]*poolCompute, names []string, broken map[string]string) {
	pools, broken = map[string]*poolCompute{}, map[string]string{}
	for _, r := range recs {
		pt := l.types[r.Type]
		if pt == nil {
			continue
		}
		pc := &poolCompute{typ: pt, rec: r}
		c, err := storedComputeSpec(r)
		if err == nil {
			pc.spec = *c
			pc.size, err = poolSize(l.sizes, pt, &pc.spec)
		}
		if err == nil && l.checkProvider != nil {
			if perr := l.checkProvider(&pc.spec); perr != nil {
				err = fmt.Errorf("its stored provider block is no longer valid: %w", perr)
			}
		}
		if err != nil {
			broken[r.Name] = err.Error()
			l.ws.failCompute(ctx, r.Name, err.Error())
			continue
		}
		pools[r.Name] = pc
		names = append(names, r.Name)
		if usesSSH(pt, &pc.spec) && l.providers != nil {
			// Making the provider re-opens the reverse tunnels of its
			// machines after a server restart (it is made once and kept).
			if _, err := l.providers(&pc.spec); err != nil {
				l.ws.computeUnusable(r.Name, "its ssh provider cannot be made: "+err.Error())
				continue
			}
		}
		l.ws.computeUsable(r.Name)
	}
	return pools, names, broken
}

// leases retires the nodes of computes that are gone or unusable (broken
// holds why each unusable one is), marks Lost the joined nodes silent for
// longer than the node lease (failing what ran there), and moves the others
// between Idle and Busy by what runs on them. It returns the nodes left,
// with their new states.
func (l *poolLoop) leases(ctx context.Context, pools map[string]*poolCompute, broken map[string]string, nodes []store.Node, onNode map[string][]store.Job, now time.Time) []store.Node {
	var live []store.Node
	for _, n := range nodes {
		if _, ok := pools[n.Compute]; !ok {
			why := "its compute was deleted"
			if reason, bad := broken[n.Compute]; bad {
				why = "its compute is unusable: " + reason
			}
			l.retireNode(ctx, n, why)
			continue
		}
		if n.State == NodeIdle || n.State == NodeBusy || n.State == NodeDraining {
			last := n.Heartbeat
			if last.Before(l.started) {
				last = l.started // silence while the server was down is not the node's fault
			}
			if now.Sub(last) > l.nodeLease {
				n = l.loseNode(ctx, n, onNode[n.Name], now.Sub(last))
			}
		}
		if n.State == NodeIdle || n.State == NodeBusy {
			busy := len(onNode[n.Name]) > 0
			want, idleSince := NodeIdle, n.IdleSince
			if busy {
				want, idleSince = NodeBusy, time.Time{}
			} else if n.State == NodeBusy || idleSince.IsZero() {
				idleSince = now
			}
			if want != n.State || !idleSince.Equal(n.IdleSince) {
				if u, err := l.st.UpdateNode(ctx, n.Name, func(x *store.Node) error {
					if x.State != NodeIdle && x.State != NodeBusy {
						return nil
					}
					x.State, x.IdleSince = want, idleSince
					return nil
				}); err == nil {
					n = u
				}
			}
		}
		live = append(live, n)
	}
	return live
}

// place puts the queued jobs of pool computes on free nodes with
// scheduler.Place and starts those placed; the others are told why they
// wait. It returns the queued jobs as the scheduler saw them and which of
// them were placed, for scaling.
func (l *poolLoop) place(ctx context.Context, pools map[string]*poolCompute, broken map[string]string, live []store.Node, onNode map[string][]store.Job) ([]scheduler.Job, map[string]bool, error) {
	queued, err := l.st.ListJobs(ctx, store.JobFilter{Statuses: []string{apitypes.StatusQueued}})
	if err != nil {
		return nil, nil, err
	}
	var st scheduler.State
	for _, n := range live {
		pc := pools[n.Compute]
		if n.State != NodeIdle && n.State != NodeBusy {
			continue
		}
		if pc.typ.Instance && pc.rec.State != InstanceRunning && pc.rec.State != InstanceJobRunning {
			continue // setting up, failed setup, stopping: no work
		}
		st.Nodes = append(st.Nodes, schedNode(n, pc, onNode[n.Name]))
	}
	for _, j := range queued {
		pc, ok := pools[j.Compute]
		if !ok {
			if why, bad := broken[j.Compute]; bad {
				l.ws.setQueuedReason(ctx, j.Name, fmt.Sprintf("compute %s is unusable: %s", j.Compute, why))
			}
			continue
		}
		js, err := storedJobSpec(j)
		if err != nil {
			l.ws.failQueued(ctx, j.Name, err.Error())
			continue
		}
		st.Jobs = append(st.Jobs, scheduler.Job{Name: j.Name, Compute: j.Compute, Priority: j.Priority, Seq: j.Seq,
			Demand: shapeOf(pc.size), Instances: instancesOf(js)})
	}
	placed := map[string]bool{}
	if len(st.Jobs) == 0 {
		return nil, placed, nil
	}
	plan := scheduler.Place(st)
	for _, p := range plan.Placements {
		if l.ws.startPlaced(ctx, p) {
			placed[p.Job] = true
		}
	}
	for _, w := range plan.Waiting {
		l.ws.setQueuedReason(ctx, w.Job, w.Reason)
	}
	return st.Jobs, placed, nil
}

// forgetBroken deletes the records of unusable pool computes that are being
// deleted once their nodes, which the pass retires, are gone.
func (l *poolLoop) forgetBroken(ctx context.Context, recs []store.Compute, broken map[string]string) {
	for _, r := range recs {
		if _, bad := broken[r.Name]; !bad || r.State != StateDeleting {
			continue
		}
		if left, err := l.st.ListNodes(ctx, r.Name); err != nil || len(left) > 0 {
			continue
		}
		if err := l.st.DeleteCompute(ctx, r.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
			l.log.Error("delete compute", "compute", r.Name, "err", err)
			continue
		}
		l.forgetCompute(r.Name)
	}
}

// deletePools gives back the machines of pool computes being deleted and
// forgets the computes once none is left. It returns the live nodes and
// pool names that remain for placement and scaling.
func (l *poolLoop) deletePools(ctx context.Context, pools map[string]*poolCompute, names []string, live []store.Node) ([]store.Node, []string) {
	var keepNames []string
	deleting := map[string]int{}
	for _, name := range names {
		if pools[name].rec.State == StateDeleting {
			deleting[name] = 0
			continue
		}
		keepNames = append(keepNames, name)
	}
	if len(deleting) == 0 {
		return live, names
	}
	var keep []store.Node
	for _, n := range live {
		if _, ok := deleting[n.Compute]; !ok {
			keep = append(keep, n)
			continue
		}
		l.retireNode(ctx, n, "its compute is being deleted")
		if _, err := l.st.GetNode(ctx, n.Name); err == nil {
			deleting[n.Compute]++ // terminate failed; tried again next pass
		}
	}
	for name, left := range deleting {
		if left > 0 {
			continue
		}
		if err := l.st.DeleteCompute(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			l.log.Error("delete compute", "compute", name, "err", err)
			continue
		}
		delete(pools, name)
		l.forgetCompute(name)
		l.log.Info("compute deleted", "compute", name)
	}
	return keep, keepNames
}

// forgetCompute drops what the loop remembers of a deleted compute, so
// that a compute made again under its name starts afresh (no launch
// backoff of its predecessor) and the memory does not grow with every
// compute ever made.
func (l *poolLoop) forgetCompute(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.launchFails, name)
	delete(l.launchRetry, name)
	delete(l.launchErr, name)
	delete(l.nodeTargets, name)
	delete(l.preemptPolled, name)
}

// schedNode is a node as the scheduler sees it: jobs on clusters take whole
// nodes, as on Azure ML, so a node is either wholly free or wholly taken.
func schedNode(n store.Node, pc *poolCompute, jobs []store.Job) scheduler.Node {
	full := shapeOf(pc.size)
	sn := scheduler.Node{ID: n.Name, Compute: n.Compute, Size: pc.size.Name, State: scheduler.NodeState(n.State), Total: full}
	if len(jobs) == 0 {
		sn.FreeMilliCPU, sn.FreeMemory = full.MilliCPU, full.Memory
		for i := range full.GPUs {
			sn.FreeGPUs = append(sn.FreeGPUs, i)
		}
	}
	return sn
}

// scale asks autoscale.Decide what to launch and terminate and does it.
func (l *poolLoop) scale(ctx context.Context, pools map[string]*poolCompute, names []string, live []store.Node, onNode map[string][]store.Job, queued []scheduler.Job, placed map[string]bool, now time.Time) error {
	quotas, err := loadQuotas(ctx, l.st)
	if err != nil {
		return err
	}
	var state autoscale.State
	state.Quotas = quotas
	state.Usage = sizes.Usage{FamilyCores: map[string]int{}}
	byCompute := map[string][]store.Node{}
	for _, n := range live {
		byCompute[n.Compute] = append(byCompute[n.Compute], n)
		if pc := pools[n.Compute]; pc != nil {
			state.Usage.Add(pc.size, 1, pc.spec.Tier == "low_priority")
		}
	}
	for _, name := range names {
		pc := pools[name]
		cl := autoscale.Cluster{Name: name, Size: pc.size, LowPriority: pc.spec.Tier == "low_priority", JoinTimeout: l.joinTimeout}
		if pc.rec.State != StateDeleting { // a compute being deleted aims at no node
			b := pc.typ.Bounds(&pc.spec, instanceWantsNode(pc.rec.State))
			cl.MinInstances, cl.MaxInstances, cl.IdleTimeBeforeScaleDown = b.Min, b.Max, b.IdleBeforeRemoval
		}
		l.mu.Lock()
		cl.LaunchRetryAt, cl.LaunchError = l.launchRetry[name], l.launchErr[name]
		l.mu.Unlock()
		for _, n := range byCompute[name] {
			an := autoscale.Node{Node: scheduler.Node{ID: n.Name, Compute: name, Size: pc.size.Name, State: autoscaleState(n, onNode[n.Name]), Total: shapeOf(pc.size)},
				LaunchedAt: n.Created, IdleSince: n.IdleSince}
			if n.State == NodeIdle {
				an.Node = schedNode(n, pc, nil)
			}
			cl.Nodes = append(cl.Nodes, an)
		}
		for _, j := range queued {
			if j.Compute == name && !placed[j.Name] {
				cl.Queued = append(cl.Queued, j)
			}
		}
		state.Clusters = append(state.Clusters, cl)
	}
	plan := autoscale.Decide(state, now)
	for _, cp := range plan.Clusters {
		pc := pools[cp.Cluster]
		l.mu.Lock()
		l.nodeTargets[cp.Cluster] = cp.Target
		l.mu.Unlock()
		for _, t := range cp.Terminate {
			for _, n := range byCompute[cp.Cluster] {
				if n.Name == t.Node {
					l.event(ctx, cp.Cluster, "scale_down", fmt.Sprintf("node %s removed: %s", n.Name, t.Reason))
					l.retireNode(ctx, n, t.Reason)
				}
			}
		}
		if cp.Launch > 0 {
			l.event(ctx, cp.Cluster, "scale_up", fmt.Sprintf("%d → %d nodes: %s", cp.Current, cp.Current+cp.Launch, strings.Join(cp.LaunchReasons, "; ")))
			for range cp.Launch {
				if err := l.launchNode(ctx, pc); err != nil {
					l.log.Error("launch node", "compute", cp.Cluster, "err", err)
					break
				}
			}
		}
		for _, w := range cp.Waiting {
			l.ws.setQueuedReason(ctx, w.Job, w.Reason)
		}
		for _, w := range cp.Unfit {
			l.ws.setQueuedReason(ctx, w.Job, w.Reason)
		}
		if cp.Blocked != "" {
			for _, j := range clusterOf(state, cp.Cluster).Queued {
				l.ws.setQueuedReason(ctx, j.Name, cp.Blocked)
			}
		}
	}
	return nil
}

// clusterOf is the cluster of state named name.
func clusterOf(s autoscale.State, name string) autoscale.Cluster {
	for _, c := range s.Clusters {
		if c.Name == name {
			return c
		}
	}
	return autoscale.Cluster{}
}

// event records a scaling or health event of a compute.
func (l *poolLoop) event(ctx context.Context, compute, kind, msg string) {
	if err := l.st.AddComputeEvent(ctx, store.ComputeEvent{Compute: compute, Time: l.now(), Kind: kind, Message: msg}); err != nil {
		l.log.Error("compute event", "compute", compute, "err", err)
	}
}
