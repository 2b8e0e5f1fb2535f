package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"strings"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Pool computes get their machines from a node provider; each machine runs
// an agent that joins the workspace and pulls the attempts placed on it.
// The pool loop (poolLoop, poolloop.go) places queued jobs on nodes and
// scales the pools; this file holds what the rest of the workspace shares
// with it: node states, placements, and the job side of a placement.

// Node states (docs/architecture.md, "State machines").
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

// poolType is what sets computes of type typ apart when they are pools of
// agent nodes (a cluster, a compute instance, an attached machine), and
// nil when typ is not a pool type on this server.
func (s *Service) poolType(typ string) *compute.Pool { return s.cfg.PoolTypes[typ] }

// isInstance reports whether computes of type typ are compute instances:
// single-user machines with a lifecycle, schedules and sessions.
func (s *Service) isInstance(typ string) bool {
	pt := s.poolType(typ)
	return pt != nil && pt.Instance
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
	typ  *compute.Pool
	rec  store.Compute
	spec spec.Compute
	size sizes.Size
}

// event records a scaling or health event of a compute.
func (s *Service) event(ctx context.Context, compute, kind, msg string) {
	s.pools.event(ctx, compute, kind, msg)
}

// reconcilePools is one pass of the pool loop.
func (s *Service) reconcilePools(ctx context.Context) error { return s.pools.pass(ctx) }

// startPlaced starts the attempt the pool loop placed, guarded: a panic
// fails that job with the reason, not the pass.
func (s *Service) startPlaced(ctx context.Context, p scheduler.Placement) bool {
	if err := s.guard("job "+p.Job, func() error { return s.startPool(ctx, p) }); err != nil {
		s.log.Error("start pool job", "job", p.Job, "err", err)
		if errors.Is(err, errInternal) {
			s.failBroken(ctx, p.Job, err)
		}
		return false
	}
	return true
}

// setQueuedReason explains why a queued job waits, without an event: the
// reason changes often and is not a status change.
func (s *Service) setQueuedReason(ctx context.Context, name, reason string) {
	if !strings.HasPrefix(reason, "queued") {
		reason = "queued: " + reason
	}
	changed := false
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if j.Status != apitypes.StatusQueued || j.StatusReason == reason {
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
	attempt := 0
	_, err = s.st.UpdateJob(ctx, p.Job, func(j *store.Job) (*store.Event, error) {
		if j.Status != apitypes.StatusQueued {
			return nil, errNotQueued
		}
		j.Attempt++
		attempt = j.Attempt
		now := s.now()
		j.Status, j.StatusReason, j.Heartbeat, j.Placement = apitypes.StatusPreparing, "placed on "+strings.Join(nodes, ", "), now, raw
		return &store.Event{Job: p.Job, Time: now, From: apitypes.StatusQueued, To: j.Status, Reason: j.StatusReason}, nil
	})
	if errors.Is(err, errNotQueued) {
		return nil
	}
	if err != nil {
		return err
	}
	s.runnerLaunched(p.Job, attempt, "on node "+strings.Join(nodes, ", "))
	s.changed(p.Job)
	for _, n := range nodes {
		s.nodes.wakeNode(n)
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

func intp(n int) *int { return &n }
