package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/autoscale"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Pool computes get their machines from a node provider; each machine runs
// an agent that joins the workspace and pulls the attempts placed on it.
// The pool loop (reconcilePools) is level-triggered: every pass reads the
// stored nodes and jobs, places queued jobs with scheduler.Place, asks
// autoscale.Decide for launches and terminations, and applies both.

// Node states, as DESIGN.md section 5 names them.
const (
	NodeProvisioning = "Provisioning"
	NodeIdle         = "Idle"
	NodeBusy         = "Busy"
	NodeDraining     = "Draining"
	NodeLost         = "Lost"
)

// Token kinds of nodes: a join token is made for one launch and used once;
// the node token it is traded for is the agent's credential.
const (
	KindJoin = "join"
	KindNode = "node"
)

// isPool reports whether computes of type typ are pools of agent nodes: a
// cluster, or a compute instance, which is a pool of one node that its
// owner starts and stops.
func isPool(typ string) bool {
	return typ == "amlcompute" || typ == "computeinstance" || typ == "virtualmachine"
}

// StateDeleting is the state of a pool compute being deleted (an attached
// machine being detached): its machines are given back, then it is gone.
const StateDeleting = "Deleting"

// Placement is where the current attempt of a pool job runs: one entry per
// node rank, and the port rank 0 listens on for distributed jobs.
type Placement struct {
	Ranks      []RankPlacement `json:"ranks"`
	MasterPort int             `json:"master_port,omitempty"`
}

// RankPlacement is one node of an attempt. Status is the rank's final
// status once its runner reported one.
type RankPlacement struct {
	Node     string `json:"node"`
	GPUs     []int  `json:"gpus,omitempty"`
	Status   string `json:"status,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

// Node is a node of a pool compute as the API shows it.
type Node struct {
	Name      string           `json:"name"`
	Compute   string           `json:"compute"`
	State     string           `json:"state"`
	Reason    string           `json:"reason,omitempty"`
	Size      string           `json:"size"`
	Address   string           `json:"address,omitempty"`
	Facts     *nodeproto.Facts `json:"facts,omitempty"`
	Jobs      []string         `json:"jobs"`
	Created   time.Time        `json:"created"`
	Joined    *time.Time       `json:"joined"`
	Heartbeat *time.Time       `json:"heartbeat"`
	IdleSince *time.Time       `json:"idle_since,omitempty"`
	// Warning says how the node has less than its size promises, and what
	// that means for the jobs placed on it.
	Warning string `json:"warning,omitempty"`
}

// ComputeEvent is a scaling or health event of a compute.
type ComputeEvent struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
}

func instancesOf(j *spec.Job) int {
	if j.Resources != nil && j.Resources.InstanceCount > 0 {
		return j.Resources.InstanceCount
	}
	return 1
}

// shapeOf is what a node of the size holds, and so what a job, which takes
// whole nodes, asks of each. An attached machine's size records no cores
// or memory (none count against a quota); it is one slot, so that its job
// takes the whole machine too, instead of fitting (nothing in nothing)
// beside any number of others.
func shapeOf(sz sizes.Size) scheduler.Resources {
	if sz.Family == attachedSize.Family {
		return scheduler.Resources{MilliCPU: 1}
	}
	return scheduler.Resources{MilliCPU: int64(sz.VCPUs) * 1000, Memory: sz.MemoryBytes(), GPUs: sz.GPUs}
}

// poolCompute is a pool compute with its stored spec and size.
type poolCompute struct {
	rec  store.Compute
	spec spec.Compute
	size sizes.Size
}

// reconcilePools is one pass of the pool loop.
func (s *Service) reconcilePools(ctx context.Context) error {
	recs, err := s.st.ListComputes(ctx)
	if err != nil {
		return err
	}
	pools := map[string]*poolCompute{}
	broken := map[string]string{} // unusable pool computes: why
	var names []string
	for _, r := range recs {
		if !isPool(r.Type) {
			continue
		}
		pc := &poolCompute{rec: r}
		c, err := storedComputeSpec(r)
		if err == nil {
			pc.spec = *c
			pc.size, err = s.poolSize(&pc.spec)
		}
		if err == nil && s.cfg.CheckProvider != nil {
			if perr := s.cfg.CheckProvider(&pc.spec); perr != nil {
				err = fmt.Errorf("its stored provider block is no longer valid: %w", perr)
			}
		}
		if err != nil {
			// Its nodes are retired below as for a deleted compute; a
			// compute being deleted is forgotten once none is left.
			broken[r.Name] = err.Error()
			s.failCompute(ctx, r.Name, err.Error())
			continue
		}
		pools[r.Name] = pc
		names = append(names, r.Name)
		if usesSSH(&pc.spec) && s.cfg.Providers != nil {
			// Making the provider re-opens the reverse tunnels of its
			// machines after a server restart (it is made once and kept).
			if _, err := s.cfg.Providers(&pc.spec); err != nil {
				s.log.Error("ssh provider", "compute", r.Name, "err", err)
			}
		}
	}
	nodes, err := s.st.ListNodes(ctx, "")
	if err != nil {
		return err
	}
	if len(pools) == 0 && len(nodes) == 0 {
		return nil
	}
	active, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: activeStatuses})
	if err != nil {
		return err
	}
	s.forgetDelivered(active)
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
	now := s.now()

	// Leases, and Idle/Busy from what runs.
	var live []store.Node
	for _, n := range nodes {
		if _, ok := pools[n.Compute]; !ok {
			s.retireNode(ctx, n, "its compute was deleted")
			continue
		}
		if n.State == NodeIdle || n.State == NodeBusy || n.State == NodeDraining {
			last := n.Heartbeat
			if last.Before(s.started) {
				last = s.started // silence while the server was down is not the node's fault
			}
			if now.Sub(last) > s.cfg.NodeLease {
				n = s.loseNode(ctx, n, onNode[n.Name], now.Sub(last))
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
				if u, err := s.st.UpdateNode(ctx, n.Name, func(x *store.Node) error {
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

	s.forgetBroken(ctx, recs, broken)
	live, names = s.deletePools(ctx, pools, names, live)
	live = s.preemptions(ctx, pools, live, onNode, now)
	live = s.instanceStates(ctx, pools, live, onNode)

	// Placement.
	queued, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: []string{StatusQueued}})
	if err != nil {
		return err
	}
	var st scheduler.State
	for _, n := range live {
		pc := pools[n.Compute]
		if n.State != NodeIdle && n.State != NodeBusy {
			continue
		}
		if pc.rec.Type == "computeinstance" && pc.rec.State != InstanceRunning && pc.rec.State != InstanceJobRunning {
			continue // setting up, failed setup, stopping: no work
		}
		st.Nodes = append(st.Nodes, s.schedNode(n, pc, onNode[n.Name]))
	}
	specs := map[string]*spec.Job{}
	for _, j := range queued {
		pc, ok := pools[j.Compute]
		if !ok {
			if why, bad := broken[j.Compute]; bad {
				s.setQueuedReason(ctx, j.Name, fmt.Sprintf("compute %s is unusable: %s", j.Compute, why))
			}
			continue
		}
		js, err := storedJobSpec(j)
		if err != nil {
			s.failQueued(ctx, j.Name, err.Error())
			continue
		}
		specs[j.Name] = js
		st.Jobs = append(st.Jobs, scheduler.Job{Name: j.Name, Compute: j.Compute, Priority: j.Priority, Seq: j.Seq,
			Demand: shapeOf(pc.size), Instances: instancesOf(js)})
	}
	placed := map[string]bool{}
	if len(st.Jobs) > 0 {
		plan := scheduler.Place(st)
		for _, p := range plan.Placements {
			if err := s.guard("job "+p.Job, func() error { return s.startPool(ctx, p) }); err != nil {
				s.log.Error("start pool job", "job", p.Job, "err", err)
				if errors.Is(err, errInternal) {
					s.failBroken(ctx, p.Job, err)
				}
				continue
			}
			placed[p.Job] = true
		}
		for _, w := range plan.Waiting {
			s.setQueuedReason(ctx, w.Job, w.Reason)
		}
	}

	// Scaling.
	return s.scale(ctx, pools, names, live, onNode, st.Jobs, placed, now)
}

// deletePools gives back the machines of pool computes being deleted and
// forgets the computes once none is left. It returns the live nodes and
// pool names that remain for placement and scaling.
func (s *Service) deletePools(ctx context.Context, pools map[string]*poolCompute, names []string, live []store.Node) ([]store.Node, []string) {
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
		s.retireNode(ctx, n, "its compute is being deleted")
		if _, err := s.st.GetNode(ctx, n.Name); err == nil {
			deleting[n.Compute]++ // terminate failed; tried again next pass
		}
	}
	for name, left := range deleting {
		if left > 0 {
			continue
		}
		if err := s.st.DeleteCompute(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Error("delete compute", "compute", name, "err", err)
			continue
		}
		delete(pools, name)
		s.log.Info("compute deleted", "compute", name)
	}
	return keep, keepNames
}

// schedNode is a node as the scheduler sees it: jobs on clusters take whole
// nodes, as on Azure ML, so a node is either wholly free or wholly taken.
func (s *Service) schedNode(n store.Node, pc *poolCompute, jobs []store.Job) scheduler.Node {
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
func (s *Service) scale(ctx context.Context, pools map[string]*poolCompute, names []string, live []store.Node, onNode map[string][]store.Job, queued []scheduler.Job, placed map[string]bool, now time.Time) error {
	quotas, err := s.quotas(ctx)
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
		cl := autoscale.Cluster{Name: name, Size: pc.size, LowPriority: pc.spec.Tier == "low_priority", JoinTimeout: s.cfg.JoinTimeout}
		switch {
		case pc.rec.State == StateDeleting:
			cl.MinInstances, cl.MaxInstances, cl.IdleTimeBeforeScaleDown = 0, 0, 0
		case pc.rec.Type == "virtualmachine":
			// The one machine, always: it is the team's own.
			cl.MinInstances, cl.MaxInstances, cl.IdleTimeBeforeScaleDown = 1, 1, 100*365*24*time.Hour
		case pc.rec.Type == "computeinstance":
			// One node while the instance is meant to run, none once stopped;
			// idleness is the instance's own business, not the autoscaler's.
			n := 0
			if instanceWantsNode(pc.rec.State) {
				n = 1
			}
			cl.MinInstances, cl.MaxInstances, cl.IdleTimeBeforeScaleDown = n, n, 100*365*24*time.Hour
		default:
			cl.MinInstances, cl.MaxInstances = *pc.spec.MinInstances, *pc.spec.MaxInstances
			cl.IdleTimeBeforeScaleDown = time.Duration(*pc.spec.IdleTimeBeforeScaleDown) * time.Second
		}
		s.pmu.Lock()
		cl.LaunchRetryAt, cl.LaunchError = s.launchRetry[name], s.launchErr[name]
		s.pmu.Unlock()
		for _, n := range byCompute[name] {
			an := autoscale.Node{Node: scheduler.Node{ID: n.Name, Compute: name, Size: pc.size.Name, State: autoscaleState(n, onNode[n.Name]), Total: shapeOf(pc.size)},
				LaunchedAt: n.Created, IdleSince: n.IdleSince}
			if n.State == NodeIdle {
				an.Node = s.schedNode(n, pc, nil)
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
		s.pmu.Lock()
		s.nodeTargets[cp.Cluster] = cp.Target
		s.pmu.Unlock()
		for _, t := range cp.Terminate {
			for _, n := range byCompute[cp.Cluster] {
				if n.Name == t.Node {
					s.event(ctx, cp.Cluster, "scale_down", fmt.Sprintf("node %s removed: %s", n.Name, t.Reason))
					s.retireNode(ctx, n, t.Reason)
				}
			}
		}
		if cp.Launch > 0 {
			s.event(ctx, cp.Cluster, "scale_up", fmt.Sprintf("%d → %d nodes: %s", cp.Current, cp.Current+cp.Launch, strings.Join(cp.LaunchReasons, "; ")))
			for range cp.Launch {
				if err := s.launchNode(ctx, pc); err != nil {
					s.log.Error("launch node", "compute", cp.Cluster, "err", err)
					break
				}
			}
		}
		for _, w := range cp.Waiting {
			s.setQueuedReason(ctx, w.Job, w.Reason)
		}
		for _, w := range cp.Unfit {
			s.setQueuedReason(ctx, w.Job, w.Reason)
		}
		if cp.Blocked != "" {
			for _, j := range cl(state, cp.Cluster).Queued {
				s.setQueuedReason(ctx, j.Name, cp.Blocked)
			}
		}
	}
	return nil
}

func cl(s autoscale.State, name string) autoscale.Cluster {
	for _, c := range s.Clusters {
		if c.Name == name {
			return c
		}
	}
	return autoscale.Cluster{}
}

// quotas are the default quotas with the workspace's overrides.
func (s *Service) quotas(ctx context.Context) (sizes.Quotas, error) {
	q := sizes.DefaultQuotas()
	set, err := s.st.ListQuotas(ctx)
	if err != nil {
		return q, err
	}
	if q.FamilyCores == nil {
		q.FamilyCores = map[string]int{}
	}
	for f, n := range set {
		if f == LowPriorityQuota {
			q.LowPriorityCores = n
			continue
		}
		q.FamilyCores[f] = n
	}
	enabled, err := s.st.ListEnabledSizes(ctx)
	if err != nil {
		return q, err
	}
	if q.EnabledSizes == nil {
		q.EnabledSizes = map[string]bool{}
	}
	for _, e := range enabled {
		q.EnabledSizes[e] = true
	}
	return q, nil
}

// launchNode asks the compute's provider for one more machine, with a join
// token made for it alone.
func (s *Service) launchNode(ctx context.Context, pc *poolCompute) error {
	prov, err := s.cfg.Providers(&pc.spec)
	if err != nil {
		return err
	}
	name := pc.rec.Name + "-" + randomSuffix(6)
	secret, hash := auth.NewToken()
	now := s.now()
	if err := s.st.CreateNode(ctx, store.Node{Name: name, Compute: pc.rec.Name, State: NodeProvisioning,
		Reason: "launched; waiting for its agent to join", Size: pc.size.Name, Created: now}); err != nil {
		return err
	}
	if err := s.st.CreateToken(ctx, store.Token{Hash: hash, Kind: KindJoin, Subject: name, Created: now}); err != nil {
		return err
	}
	m, err := prov.Launch(ctx, provider.LaunchRequest{
		Pool: pc.rec.Name, Name: name, Size: pc.size.Name, GPUs: pc.size.GPUs,
		AgentArgs: []string{"agent", "--server", s.cfg.APIURL, "--name", name},
		AgentEnv:  []string{"FERRY_JOIN_TOKEN=" + secret},
	})
	if err != nil {
		backoff := s.launchBackoff(pc.rec.Name, err)
		s.event(ctx, pc.rec.Name, "launch_failed", fmt.Sprintf("node %s could not be launched (%v); retrying in %s", name, err, backoff))
		_ = s.st.DeleteTokens(ctx, KindJoin, name)
		_ = s.st.DeleteNode(ctx, name)
		return err
	}
	s.pmu.Lock()
	delete(s.launchFails, pc.rec.Name)
	delete(s.launchErr, pc.rec.Name)
	delete(s.launchRetry, pc.rec.Name)
	s.pmu.Unlock()
	_, err = s.st.UpdateNode(ctx, name, func(n *store.Node) error {
		n.Machine, n.Address = m.ID, m.Address
		return nil
	})
	return err
}

// launchBackoff records a failed launch and returns how long the compute
// waits before the next one: 5 s, doubling to 5 min.
func (s *Service) launchBackoff(compute string, err error) time.Duration {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.launchFails[compute]++
	d := 5 * time.Second << min(s.launchFails[compute]-1, 6)
	d = min(d, 5*time.Minute)
	s.launchRetry[compute] = s.now().Add(d)
	s.launchErr[compute] = err.Error()
	return d
}

// providerCallTimeout bounds one call to a node provider from the pool loop.
const providerCallTimeout = 2 * time.Minute

// retireNode terminates a node's machine and forgets the node.
func (s *Service) retireNode(ctx context.Context, n store.Node, why string) {
	if n.Machine != "" {
		pc, err := s.st.GetCompute(ctx, n.Compute)
		var c spec.Compute
		if err == nil && json.Unmarshal(pc.Spec, &c) == nil && s.cfg.Providers != nil {
			if prov, err := s.cfg.Providers(&c); err == nil {
				// A provider that hangs must not hold the pool loop forever.
				tctx, cancel := context.WithTimeout(ctx, providerCallTimeout)
				err := prov.Terminate(tctx, n.Machine)
				cancel()
				if err != nil && !errors.Is(err, provider.ErrNotFound) {
					s.log.Error("terminate node", "node", n.Name, "err", err)
					return // try again next pass
				}
			}
		}
	}
	_ = s.st.DeleteTokens(ctx, KindNode, n.Name)
	_ = s.st.DeleteTokens(ctx, KindJoin, n.Name)
	if err := s.st.DeleteNode(ctx, n.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("delete node", "node", n.Name, "err", err)
	}
	s.log.Info("node retired", "node", n.Name, "why", why)
}

// loseNode marks a silent node Lost and fails the attempts it ran.
func (s *Service) loseNode(ctx context.Context, n store.Node, jobs []store.Job, silent time.Duration) store.Node {
	why := fmt.Sprintf("node lost: no heartbeat for %s", silent.Round(time.Second))
	u, err := s.st.UpdateNode(ctx, n.Name, func(x *store.Node) error {
		x.State, x.Reason = NodeLost, why
		return nil
	})
	if err != nil {
		return n
	}
	s.event(ctx, n.Compute, "node_lost", fmt.Sprintf("node %s: %s", n.Name, why))
	for _, j := range jobs {
		_ = s.finish(ctx, j.Name, j.Attempt, StatusFailed, "node lost", nil, fmt.Sprintf("node %s was lost (%s) while it ran this job", n.Name, why))
	}
	return u
}

func (s *Service) event(ctx context.Context, compute, kind, msg string) {
	if err := s.st.AddComputeEvent(ctx, store.ComputeEvent{Compute: compute, Time: s.now(), Kind: kind, Message: msg}); err != nil {
		s.log.Error("compute event", "compute", compute, "err", err)
	}
}

// setQueuedReason explains why a queued job waits, without an event: the
// reason changes often and is not a status change.
func (s *Service) setQueuedReason(ctx context.Context, name, reason string) {
	if !strings.HasPrefix(reason, "queued") {
		reason = "queued: " + reason
	}
	changed := false
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if j.Status != StatusQueued || j.StatusReason == reason {
			return nil, errNotQueued
		}
		j.StatusReason, changed = reason, true
		return nil, nil
	})
	if err != nil && !errors.Is(err, errNotQueued) {
		s.log.Error("queued reason", "job", name, "err", err)
	}
	if changed {
		s.changed(name)
	}
}

// startPool moves a placed job to Preparing with a new attempt on its nodes;
// the nodes' agents pick the attempt up on their next poll.
func (s *Service) startPool(ctx context.Context, p scheduler.Placement) error {
	pl := Placement{MasterPort: freePortHint()}
	for _, a := range p.Instances {
		pl.Ranks = append(pl.Ranks, RankPlacement{Node: a.Node, GPUs: a.GPUs})
	}
	raw, err := json.Marshal(pl)
	if err != nil {
		return err
	}
	var nodes []string
	for _, r := range pl.Ranks {
		nodes = append(nodes, r.Node)
	}
	_, err = s.st.UpdateJob(ctx, p.Job, func(j *store.Job) (*store.Event, error) {
		if j.Status != StatusQueued {
			return nil, errNotQueued
		}
		j.Attempt++
		now := s.now()
		j.Status, j.StatusReason, j.Heartbeat, j.Placement = StatusPreparing, "placed on "+strings.Join(nodes, ", "), now, raw
		return &store.Event{Job: p.Job, Time: now, From: StatusQueued, To: j.Status, Reason: j.StatusReason}, nil
	})
	if errors.Is(err, errNotQueued) {
		return nil
	}
	if err != nil {
		return err
	}
	s.heard(p.Job)
	s.changed(p.Job)
	for _, n := range nodes {
		s.wakeNode(n)
	}
	return nil
}

// freePortHint picks the port rank 0 of a distributed job listens on: one
// free on this machine now, which on a single-host pool is the nodes' host.
func freePortHint() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 29500 // torch's customary default
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func placementOf(j store.Job) Placement {
	var p Placement
	if len(j.Placement) > 0 {
		_ = json.Unmarshal(j.Placement, &p)
	}
	return p
}

func randomSuffix(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}

// serverless returns the implicit cluster of a job with no compute but an
// instance_type, as Azure's serverless compute runs it: one cluster per
// size (and tier), min 0, made on first use and grown to the job's
// instance_count when it asks for more than the cluster's max.
func (s *Service) serverless(ctx context.Context, j *spec.Job) (string, error) {
	sz, ok := s.cfg.Sizes.Lookup(j.Resources.InstanceType)
	if !ok {
		var names []string
		for _, x := range s.cfg.Sizes.List() {
			names = append(names, x.Name)
		}
		msg := fmt.Sprintf("resources.instance_type: %q is not in the size catalog", j.Resources.InstanceType)
		if close := spec.Suggest(j.Resources.InstanceType, names); close != "" {
			msg += fmt.Sprintf("; did you mean %s?", close)
		}
		return "", Invalid("%s (see `ferry size list`)", msg)
	}
	if s.cfg.Providers == nil {
		return "", Invalid("resources.instance_type: this server has no node provider, so it cannot run serverless jobs; name a compute")
	}
	tier := "dedicated"
	name := "serverless-" + strings.ToLower(strings.ReplaceAll(sz.Name, "_", "-"))
	if q := j.QueueSettings; q != nil && q.JobTier == "spot" {
		tier, name = "low_priority", name+"-spot"
	}
	n := max(instancesOf(j), s.cfg.ServerlessMax)
	idle := int(s.cfg.ServerlessIdle / time.Second)
	c := &spec.Compute{Name: name, Type: "amlcompute", Size: sz.Name, Tier: tier, MinInstances: intp(0), MaxInstances: intp(n),
		IdleTimeBeforeScaleDown: &idle, Description: "implicit cluster of serverless jobs on " + sz.Name}
	rec, err := s.st.GetCompute(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if err := s.validatePool(ctx, c); err != nil {
			return "", err
		}
		raw, err := json.Marshal(c)
		if err != nil {
			return "", err
		}
		now := s.now()
		err = s.st.CreateCompute(ctx, store.Compute{Name: name, Type: c.Type, Spec: raw, State: "Succeeded", Created: now, Modified: now})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return "", err
		}
		s.event(ctx, name, "created", "implicit cluster for serverless jobs on "+sz.Name)
	case err != nil:
		return "", err
	default:
		var have spec.Compute
		if err := json.Unmarshal(rec.Spec, &have); err == nil && have.MaxInstances != nil && *have.MaxInstances < instancesOf(j) {
			if _, err := s.ResizeCompute(ctx, name, nil, intp(instancesOf(j)), nil); err != nil {
				return "", err
			}
		}
	}
	return name, nil
}

func intp(n int) *int { return &n }

// nodeGPUs turns the scheduler's GPU slots of a node (0..GPUs-1 of its
// size) into the GPU indices the node's agent reported: a node given host
// GPUs 2 and 3 by its provider calls them 2 and 3, not 0 and 1.
func (s *Service) nodeGPUs(ctx context.Context, r RankPlacement) []int {
	if len(r.GPUs) == 0 {
		return nil
	}
	n, err := s.st.GetNode(ctx, r.Node)
	var facts nodeproto.Facts
	if err != nil || len(n.Facts) == 0 || json.Unmarshal(n.Facts, &facts) != nil || len(facts.GPUs) == 0 {
		return r.GPUs
	}
	out := make([]int, 0, len(r.GPUs))
	for _, slot := range r.GPUs {
		if slot < len(facts.GPUs) {
			out = append(out, facts.GPUs[slot].Index)
		}
	}
	return out
}

// forgetDelivered drops the record of assignments handed out for attempts
// that are no longer active, so it does not grow with every job ever run.
func (s *Service) forgetDelivered(active []store.Job) {
	live := map[string]bool{}
	for _, j := range active {
		live[fmt.Sprintf("%s/%d", j.Name, j.Attempt)] = true
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	for key := range s.delivered {
		// key is node/job/attempt; node names have no '/'.
		if _, jobAttempt, ok := strings.Cut(key, "/"); ok && !live[jobAttempt] {
			delete(s.delivered, key)
		}
	}
}
