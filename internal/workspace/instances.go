package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/instance"
	"github.com/ferry-ml/ferry/internal/store"
)

// Compute instances are pools of one node that their owner starts, stops
// and restarts; their state follows their node (instanceStates) and
// instance.Decide (schedules, idle shutdown).

// Compute instance states, as Azure ML names them.
const (
	InstanceCreating   = "Creating"
	InstanceRunning    = "Running"
	InstanceJobRunning = "JobRunning"
	InstanceStopping   = "Stopping"
	InstanceStopped    = "Stopped"
	InstanceStarting   = "Starting"
	InstanceRestarting = "Restarting"
	// InstanceSettingUp: the node is up and runs its setup scripts;
	// InstanceSetupFailed: one of them failed (the node stays, to look
	// into; restart or stop the instance).
	InstanceSettingUp   = "SettingUp"
	InstanceSetupFailed = "SetupFailed"
	// InstanceUnusable: its node was lost; a new one is on its way.
	InstanceUnusable = "Unusable"
)

// instanceWantsNode reports whether an instance in state st should have its node.
func instanceWantsNode(st string) bool {
	return st != InstanceStopping && st != InstanceStopped
}

// instanceStates moves compute instances along with their node: Creating,
// Starting and Restarting become Running once the node has joined;
// Running and JobRunning follow whether a job runs; Stopping becomes
// Stopped once the node is gone.
func (s *Service) instanceStates(ctx context.Context, pools map[string]*poolCompute, live []store.Node, onNode map[string][]store.Job) {
	for name, pc := range pools {
		if pc.rec.Type != "computeinstance" {
			continue
		}
		var node *store.Node
		for i := range live {
			if live[i].Compute == name {
				node = &live[i]
			}
		}
		want := pc.rec.State
		switch {
		case pc.rec.State == InstanceStopping && node == nil:
			want = InstanceStopped
		case !instanceWantsNode(pc.rec.State):
		case node != nil && node.State == NodeLost:
			// Its machine is gone; a new one is launched.
			want = InstanceUnusable
		case node != nil && (node.State == NodeIdle || node.State == NodeBusy):
			want = InstanceRunning
			switch {
			case node.Reason == nodeSettingUp:
				want = InstanceSettingUp
			case strings.HasPrefix(node.Reason, nodeSetupFailedAt):
				want = InstanceSetupFailed
			case len(onNode[node.Name]) > 0:
				want = InstanceJobRunning
			}
		}
		if want != pc.rec.State {
			why := ""
			if want == InstanceSetupFailed || want == InstanceUnusable {
				why = node.Reason
			}
			s.setInstanceState(ctx, name, pc.rec.State, want, why)
			pc.rec.State = want
		}
		s.decideInstance(ctx, pc, node, onNode)
	}
}

// decideInstance applies instance.Decide: idle shutdown and the
// instance's start/stop schedules.
func (s *Service) decideInstance(ctx context.Context, pc *poolCompute, node *store.Node, onNode map[string][]store.Job) {
	cfg, err := instance.ParseConfig(&pc.spec)
	if err != nil {
		return // refused at create; a stored spec is valid
	}
	name := pc.rec.Name
	var st instanceStatus
	if len(pc.rec.Status) > 0 {
		_ = json.Unmarshal(pc.rec.Status, &st) // a status it cannot read is one with nothing fired
	}
	fired := st.LastFired
	snap := instance.Snapshot{
		State: instance.State(pc.rec.State), Created: pc.rec.Created,
		IdleTimeBeforeShutdown: cfg.IdleTimeBeforeShutdown, Schedules: cfg.Schedules, LastFired: fired,
	}
	if pc.rec.State == InstanceRunning || pc.rec.State == InstanceJobRunning {
		snap.StartedAt = pc.rec.Modified
	}
	if node != nil {
		snap.Jobs = len(onNode[node.Name])
		snap.LastActivity = node.IdleSince
		if node.Joined.After(snap.StartedAt) {
			snap.StartedAt = node.Joined
		}
	}
	// An open session or port-forward is use; the last one's end is activity.
	var closed time.Time
	snap.Sessions, snap.PortForwards, closed = s.sessionUse(name)
	if closed.After(snap.LastActivity) {
		snap.LastActivity = closed
	}
	plan := instance.Decide(snap, s.now())
	moved := false
	switch plan.Action {
	case instance.ActionStop:
		if moved = s.setInstanceState(ctx, name, pc.rec.State, InstanceStopping, plan.Reason); moved {
			pc.rec.State = InstanceStopping // the scaling below gives the node back, not a new one
		}
	case instance.ActionStart:
		if moved = s.setInstanceState(ctx, name, pc.rec.State, InstanceStarting, plan.Reason); moved {
			pc.rec.State = InstanceStarting
		}
	}
	if len(plan.Fired) > 0 && (moved || plan.Action == instance.ActionNone) {
		// Kept with the compute, so that a restarted server neither fires
		// an occurrence again nor forgets it.
		if _, err := s.st.UpdateCompute(ctx, name, func(c *store.Compute) error {
			var cur instanceStatus
			if len(c.Status) > 0 {
				_ = json.Unmarshal(c.Status, &cur)
			}
			for _, f := range plan.Fired {
				for len(cur.LastFired) <= f.Schedule {
					cur.LastFired = append(cur.LastFired, time.Time{})
				}
				cur.LastFired[f.Schedule] = f.At
			}
			raw, err := json.Marshal(cur)
			c.Status = raw
			return err
		}); err != nil {
			s.log.Error("instance schedule firings", "compute", name, "err", err)
		}
	}
}

// instanceStatus is what a compute instance keeps in store.Compute.Status.
type instanceStatus struct {
	// LastFired[i] is the occurrence of schedule i that fired last.
	LastFired []time.Time `json:"last_fired,omitempty"`
}

// setInstanceState moves an instance from one state to another (only if it
// is still in from) and records why.
func (s *Service) setInstanceState(ctx context.Context, name, from, to, why string) bool {
	moved := false
	_, err := s.st.UpdateCompute(ctx, name, func(c *store.Compute) error {
		if c.State != from {
			return nil
		}
		c.State, c.Modified, moved = to, s.now(), true
		return nil
	})
	if err != nil {
		s.log.Error("instance state", "compute", name, "err", err)
		return false
	}
	if moved {
		msg := from + " → " + to
		if why != "" {
			msg += ": " + why
		}
		s.event(ctx, name, "state", msg)
		s.wakeDispatcher()
	}
	return moved
}

// StartInstance, StopInstance and RestartInstance act on a compute instance
// as `az ml compute start|stop|restart` do.
func (s *Service) StartInstance(ctx context.Context, who auth.Principal, name string) (*Compute, error) {
	return s.instanceAction(ctx, who, name, "start")
}

// StopInstance stops a compute instance: its node is given back, and jobs
// cannot be submitted to it until it is started again.
func (s *Service) StopInstance(ctx context.Context, who auth.Principal, name string) (*Compute, error) {
	return s.instanceAction(ctx, who, name, "stop")
}

// RestartInstance gives the instance a fresh node.
func (s *Service) RestartInstance(ctx context.Context, who auth.Principal, name string) (*Compute, error) {
	return s.instanceAction(ctx, who, name, "restart")
}

func (s *Service) instanceAction(ctx context.Context, who auth.Principal, name, action string) (*Compute, error) {
	if !who.IsOwner() {
		return nil, Forbidden("only an owner may %s compute instances", action)
	}
	rec, err := s.st.GetCompute(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.unknownCompute(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	if rec.Type != "computeinstance" {
		return nil, Invalid("compute %s is of type %s; only compute instances are started, stopped and restarted", name, rec.Type)
	}
	from, to := rec.State, ""
	switch action {
	case "start":
		if from != InstanceStopped {
			return nil, Conflict("compute instance %s is %s; only a Stopped instance can be started", name, from)
		}
		to = InstanceStarting
	case "stop":
		if !instanceWantsNode(from) {
			return nil, Conflict("compute instance %s is already %s", name, from)
		}
		if from == InstanceJobRunning {
			return nil, Conflict("compute instance %s is running a job; cancel it first, or wait for it to end", name)
		}
		to = InstanceStopping
	case "restart":
		if !instanceWantsNode(from) {
			return nil, Conflict("compute instance %s is %s; start it instead", name, from)
		}
		to = InstanceRestarting
	}
	if !s.setInstanceState(ctx, name, from, to, action+" asked by "+who.Subject) {
		return nil, Conflict("compute instance %s changed state meanwhile; try again", name)
	}
	if action == "restart" {
		nodes, err := s.st.ListNodes(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			s.retireNode(ctx, n, "restart")
		}
	}
	s.wakeDispatcher()
	return s.GetCompute(ctx, name)
}
