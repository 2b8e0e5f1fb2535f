package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
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
// Starting and Restarting become Running once a node has joined (for a
// restart, a node other than those it gives back); Running and JobRunning
// follow whether a job runs; Stopping becomes Stopped once the node is
// gone. It gives back the nodes a restart replaces and the node of a
// stopping instance, with an event that says why, and returns live
// without the nodes it gave back.
func (nd *Nodes) instanceStates(ctx context.Context, pools map[string]*poolCompute, live []store.Node, onNode map[string][]store.Job) []store.Node {
	gone := map[string]bool{}
	for name, pc := range pools {
		if !pc.typ.Instance {
			continue
		}
		st := readInstanceStatus(pc.rec.Status)
		var node *store.Node
		for i := range live {
			if live[i].Compute == name && !slices.Contains(st.Replace, live[i].Name) {
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
			nd.setInstanceState(ctx, name, pc.rec.State, want, why)
			pc.rec.State = want
		}
		nd.decideInstance(ctx, pc, node, onNode)
		nd.giveBackInstanceNodes(ctx, pc, live, onNode, gone)
	}
	if len(gone) == 0 {
		return live
	}
	return slices.DeleteFunc(live, func(n store.Node) bool { return gone[n.Name] })
}

// giveBackInstanceNodes retires the nodes of instance pc that a restart
// replaces, and the node of a stopping instance once no job runs there,
// each with an event that says why; it marks in gone those it gave back.
// A node whose machine could not be terminated stays, and is tried again
// on the next pass.
func (nd *Nodes) giveBackInstanceNodes(ctx context.Context, pc *poolCompute, live []store.Node, onNode map[string][]store.Job, gone map[string]bool) {
	name := pc.rec.Name
	st := readInstanceStatus(pc.rec.Status)
	var done []string // names in st.Replace that are gone now
	for _, n := range live {
		if n.Compute != name {
			continue
		}
		why := ""
		switch {
		case slices.Contains(st.Replace, n.Name):
			why = "the instance was restarted; it gets a fresh node"
		case pc.rec.State == InstanceStopping && n.State != NodeBusy && n.State != NodeDraining && len(onNode[n.Name]) == 0:
			why = "the instance is stopping"
			if cur, err := nd.ws.st.GetCompute(ctx, name); err == nil {
				// decideInstance may have stopped it in this very pass.
				if w := readInstanceStatus(cur.Status).Why; w != "" {
					why = "the instance was " + w
				}
			}
		default:
			continue
		}
		nd.ws.pools.retireNode(ctx, n, why)
		if _, err := nd.ws.st.GetNode(ctx, n.Name); !errors.Is(err, store.ErrNotFound) {
			continue // terminate failed; tried again next pass
		}
		nd.ws.event(ctx, name, "node_removed", fmt.Sprintf("node %s removed: %s", n.Name, why))
		gone[n.Name] = true
	}
	for _, r := range st.Replace {
		if gone[r] || !slices.ContainsFunc(live, func(n store.Node) bool { return n.Name == r }) {
			done = append(done, r)
		}
	}
	if len(done) == 0 {
		return
	}
	if _, err := nd.ws.st.UpdateCompute(ctx, name, func(c *store.Compute) error {
		cur := readInstanceStatus(c.Status)
		cur.Replace = slices.DeleteFunc(cur.Replace, func(r string) bool { return slices.Contains(done, r) })
		raw, err := json.Marshal(cur)
		c.Status = raw
		return err
	}); err != nil {
		nd.ws.log.Error("instance nodes replaced", "compute", name, "err", err)
	}
}

// decideInstance applies instance.Decide: idle shutdown and the
// instance's start/stop schedules.
func (nd *Nodes) decideInstance(ctx context.Context, pc *poolCompute, node *store.Node, onNode map[string][]store.Job) {
	cfg, err := instance.ParseConfig(&pc.spec)
	if err != nil {
		return // refused at create; a stored spec is valid
	}
	name := pc.rec.Name
	fired := readInstanceStatus(pc.rec.Status).LastFired
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
	snap.Sessions, snap.PortForwards, closed = nd.sessionUse(name)
	if closed.After(snap.LastActivity) {
		snap.LastActivity = closed
	}
	plan := instance.Decide(snap, nd.ws.now())
	moved := false
	by := "by " // what people read: "stopped by schedule 0: ...", "stopped after idle for ..."
	if plan.Cause == instance.CauseIdle {
		by = "after "
	}
	switch plan.Action {
	case instance.ActionStop:
		if moved = nd.setInstanceState(ctx, name, pc.rec.State, InstanceStopping, "stopped "+by+plan.Reason); moved {
			pc.rec.State = InstanceStopping // the scaling below gives the node back, not a new one
		}
	case instance.ActionStart:
		if moved = nd.setInstanceState(ctx, name, pc.rec.State, InstanceStarting, "started "+by+plan.Reason); moved {
			pc.rec.State = InstanceStarting
		}
	}
	if len(plan.Fired) > 0 && (moved || plan.Action == instance.ActionNone) {
		// Kept with the compute, so that a restarted server neither fires
		// an occurrence again nor forgets it.
		if _, err := nd.ws.st.UpdateCompute(ctx, name, func(c *store.Compute) error {
			cur := readInstanceStatus(c.Status)
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
			nd.ws.log.Error("instance schedule firings", "compute", name, "err", err)
		}
	}
}

// instanceStatus is what a compute instance keeps in store.Compute.Status.
type instanceStatus struct {
	// LastFired[i] is the occurrence of schedule i that fired last.
	LastFired []time.Time `json:"last_fired,omitempty"`
	// Why says, as people read it, why the instance went to its state:
	// "stopped by the user (owner)", "stopped after idle for 15m0s with
	// no job, session or port-forward", "stopped by schedule 0: ...".
	Why string `json:"why,omitempty"`
	// Replace are the nodes a restart gives back. They are retired by the
	// pool loop, and the instance is Running again only on another node,
	// one that has joined.
	Replace []string `json:"replace,omitempty"`
}

// readInstanceStatus reads an instance's status; one it cannot read is one
// with nothing fired, no reason and nothing to replace.
func readInstanceStatus(raw json.RawMessage) instanceStatus {
	var st instanceStatus
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &st)
	}
	return st
}

// setInstanceState moves an instance from one state to another (only if it
// is still in from) and records why.
func (nd *Nodes) setInstanceState(ctx context.Context, name, from, to, why string) bool {
	return nd.moveInstance(ctx, name, from, to, why, nil)
}

// moveInstance is setInstanceState that also records nodes a restart
// gives back, in the same update: a pool pass that sees the instance
// Restarting also sees which node not to count as its new one.
func (nd *Nodes) moveInstance(ctx context.Context, name, from, to, why string, replace []string) bool {
	moved := false
	_, err := nd.ws.st.UpdateCompute(ctx, name, func(c *store.Compute) error {
		if c.State != from {
			return nil
		}
		st := readInstanceStatus(c.Status)
		st.Why = why
		for _, r := range replace {
			if !slices.Contains(st.Replace, r) {
				st.Replace = append(st.Replace, r)
			}
		}
		raw, err := json.Marshal(st)
		if err != nil {
			return err
		}
		c.State, c.Modified, c.Status, moved = to, nd.ws.now(), raw, true
		return nil
	})
	if err != nil {
		nd.ws.log.Error("instance state", "compute", name, "err", err)
		return false
	}
	if moved {
		msg := from + " → " + to
		if why != "" {
			msg += ": " + why
		}
		nd.ws.event(ctx, name, "state", msg)
		nd.ws.wakeDispatcher()
	}
	return moved
}

// StartInstance, StopInstance and RestartInstance act on a compute instance
// as `az ml compute start|stop|restart` do.
func (nd *Nodes) StartInstance(ctx context.Context, who auth.Principal, name string) (*apitypes.Compute, error) {
	return nd.instanceAction(ctx, who, name, "start")
}

// StopInstance stops a compute instance: its node is given back, and jobs
// cannot be submitted to it until it is started again.
func (nd *Nodes) StopInstance(ctx context.Context, who auth.Principal, name string) (*apitypes.Compute, error) {
	return nd.instanceAction(ctx, who, name, "stop")
}

// RestartInstance gives the instance a fresh node.
func (nd *Nodes) RestartInstance(ctx context.Context, who auth.Principal, name string) (*apitypes.Compute, error) {
	return nd.instanceAction(ctx, who, name, "restart")
}

func (nd *Nodes) instanceAction(ctx context.Context, who auth.Principal, name, action string) (*apitypes.Compute, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("only an owner may %s compute instances", action)
	}
	rec, err := nd.ws.st.GetCompute(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nd.ws.unknownCompute(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	if !nd.ws.isInstance(rec.Type) {
		return nil, apperr.Invalid("compute %s is of type %s; only compute instances are started, stopped and restarted", name, rec.Type)
	}
	from, to := rec.State, ""
	switch action {
	case "start":
		if from != InstanceStopped {
			return nil, apperr.Conflict("compute instance %s is %s; only a Stopped instance can be started", name, from)
		}
		to = InstanceStarting
	case "stop":
		if !instanceWantsNode(from) {
			return nil, apperr.Conflict("compute instance %s is already %s", name, from)
		}
		if from == InstanceJobRunning {
			return nil, apperr.Conflict("compute instance %s is running a job; cancel it first, or wait for it to end", name)
		}
		to = InstanceStopping
	case "restart":
		if !instanceWantsNode(from) {
			return nil, apperr.Conflict("compute instance %s is %s; start it instead", name, from)
		}
		to = InstanceRestarting
	}
	// The nodes it has now are given back by the pool loop, which then
	// launches a fresh one; the instance is Running again once that has
	// joined, so `compute exec` right after a restart finds it ready.
	var replace []string
	if action == "restart" {
		nodes, err := nd.ws.st.ListNodes(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			replace = append(replace, n.Name)
		}
	}
	past := map[string]string{"start": "started", "stop": "stopped", "restart": "restarted"}[action]
	if !nd.moveInstance(ctx, name, from, to, past+" by the user ("+who.Subject+")", replace) {
		return nil, apperr.Conflict("compute instance %s changed state meanwhile; try again", name)
	}
	nd.ws.wakeDispatcher()
	return nd.ws.GetCompute(ctx, name)
}
