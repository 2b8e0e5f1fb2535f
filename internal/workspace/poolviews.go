package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// People's view of pools: nodes, events and bounds of a pool compute.

// ListNodes returns the nodes of a pool compute (as az ml compute list-nodes).
func (nd *Nodes) ListNodes(ctx context.Context, compute string) ([]*apitypes.Node, error) {
	rec, err := nd.ws.st.GetCompute(ctx, compute)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nd.ws.unknownCompute(ctx, compute)
	}
	if err != nil {
		return nil, err
	}
	nodes, err := nd.ws.st.ListNodes(ctx, rec.Name)
	if err != nil {
		return nil, err
	}
	active, err := nd.ws.st.ListJobs(ctx, store.JobFilter{Statuses: activeStatuses, Compute: rec.Name})
	if err != nil {
		return nil, err
	}
	var c spec.Compute
	_ = json.Unmarshal(rec.Spec, &c) // a spec it cannot read gives reasons without the idle time
	now := nd.ws.now()
	out := []*apitypes.Node{}
	for _, n := range nodes {
		v := &apitypes.Node{Name: n.Name, Compute: n.Compute, State: n.State, Reason: n.Reason, Size: n.Size, Address: n.Address,
			Jobs: []string{}, Created: n.Created, Joined: timePtr(n.Joined), Heartbeat: timePtr(n.Heartbeat), IdleSince: timePtr(n.IdleSince)}
		if len(n.Facts) > 0 {
			v.Facts = &nodeproto.Facts{}
			_ = json.Unmarshal(n.Facts, v.Facts)
		}
		for _, j := range active {
			for _, r := range placementOf(j).Ranks {
				if r.Node == n.Name {
					v.Jobs = append(v.Jobs, j.Name)
				}
			}
		}
		v.Reason = nodeReason(n, nd.ws.poolType(c.Type), &c, v.Jobs, now)
		v.Warning = nd.nodeShortfall(n)
		out = append(out, v)
	}
	return out, nil
}

// nodeReason says what an Idle or Busy node is doing, as people want to
// read it in list-nodes: "running job x", "idle for 1m30s; removed after
// 2m0s idle (idle_time_before_scale_down)". Other states, and a node
// running or failing its setup scripts, keep the reason stored with the
// node ("launched; waiting for its agent to join", "node lost: ...").
func nodeReason(n store.Node, pt *compute.Pool, c *spec.Compute, jobs []string, now time.Time) string {
	if n.Reason == nodeSettingUp || strings.HasPrefix(n.Reason, nodeSetupFailedAt) {
		return n.Reason
	}
	if (n.State == NodeIdle || n.State == NodeBusy) && len(jobs) > 0 {
		return "running job " + strings.Join(jobs, ", ") // placed now, Busy from the next pass
	}
	switch n.State {
	case NodeBusy:
		return "finishing a job"
	case NodeIdle:
		if n.IdleSince.IsZero() {
			return "idle"
		}
		why := "idle for " + now.Sub(n.IdleSince).Truncate(time.Second).String()
		if pt != nil && pt.ScalesByQueue && c.IdleTimeBeforeScaleDown != nil {
			why += fmt.Sprintf("; removed after %s idle (idle_time_before_scale_down)", time.Duration(*c.IdleTimeBeforeScaleDown)*time.Second)
			if c.MinInstances != nil && *c.MinInstances > 0 {
				why += fmt.Sprintf(" unless min_instances %d keeps it", *c.MinInstances)
			}
		}
		return why
	}
	return n.Reason
}

// memorySlack is how much less memory than its size a node may report
// without a warning: the kernel keeps some of a machine's memory for
// itself, so a 14 GiB machine reports about 13.7 GiB.
const memorySlack = 0.9

// nodeShortfall says how a node that has joined has less than its size
// promises (vCPUs, memory, GPUs), and what Ferry does about it; "" when it
// has what its size says, or its size is not a catalog's (an attached
// machine). Jobs are still placed by the size: a job on a pool takes
// whole nodes, and the machine a provider gave for the size is the one
// there is; placing by what it has would leave the job waiting while the
// cluster launched more of the same machines. So the warning says what a
// job there really gets.
func (nd *Nodes) nodeShortfall(n store.Node) string {
	sz, ok := nd.ws.cfg.Sizes.Lookup(n.Size)
	if !ok || n.Joined.IsZero() || len(n.Facts) == 0 {
		return ""
	}
	var f nodeproto.Facts
	if json.Unmarshal(n.Facts, &f) != nil {
		return ""
	}
	var short []string
	if f.CPUs > 0 && f.CPUs < sz.VCPUs {
		short = append(short, fmt.Sprintf("%d CPUs, not %d", f.CPUs, sz.VCPUs))
	}
	if f.MemoryBytes > 0 && float64(f.MemoryBytes) < memorySlack*float64(sz.MemoryBytes()) {
		short = append(short, fmt.Sprintf("%.1f GiB of memory, not %g", float64(f.MemoryBytes)/(1<<30), sz.MemoryGiB))
	}
	if len(f.GPUs) < sz.GPUs {
		short = append(short, fmt.Sprintf("%s, not %d", gpuCount(len(f.GPUs)), sz.GPUs))
	}
	if len(short) == 0 {
		return ""
	}
	return fmt.Sprintf("node %s has %s as size %s promises; jobs are still placed on it as a %s node and get what it really has (its provider gives it this machine)",
		n.Name, strings.Join(short, ", "), sz.Name, sz.Name)
}

// ComputeEvents returns the newest limit events of a compute, oldest first.
func (nd *Nodes) ComputeEvents(ctx context.Context, compute string, limit int) ([]apitypes.ComputeEvent, error) {
	evs, err := nd.ws.st.ListComputeEvents(ctx, compute, limit)
	if err != nil {
		return nil, err
	}
	out := []apitypes.ComputeEvent{}
	for _, e := range evs {
		out = append(out, apitypes.ComputeEvent{Time: e.Time, Kind: e.Kind, Message: e.Message})
	}
	return out, nil
}

// ResizeCompute changes a cluster's bounds live.
func (nd *Nodes) ResizeCompute(ctx context.Context, name string, minN, maxN *int, idle *int) (*apitypes.Compute, error) {
	_, err := nd.ws.st.UpdateCompute(ctx, name, func(rec *store.Compute) error {
		if nd.ws.poolType(rec.Type) == nil {
			return apperr.Invalid("compute %s is of type %s; only clusters (amlcompute) are resized", name, rec.Type)
		}
		var c spec.Compute
		if err := json.Unmarshal(rec.Spec, &c); err != nil {
			return err
		}
		if minN != nil {
			c.MinInstances = minN
		}
		if maxN != nil {
			c.MaxInstances = maxN
		}
		if idle != nil {
			c.IdleTimeBeforeScaleDown = idle
		}
		if err := c.Validate(); err != nil {
			return &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
		}
		raw, err := json.Marshal(&c)
		if err != nil {
			return err
		}
		rec.Spec, rec.Modified = raw, nd.ws.now()
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nd.ws.unknownCompute(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	v, err := nd.ws.GetCompute(ctx, name)
	if err == nil {
		nd.ws.event(ctx, name, "resize", fmt.Sprintf("bounds now min %d, max %d, idle %ds", *v.Spec.MinInstances, *v.Spec.MaxInstances, *v.Spec.IdleTimeBeforeScaleDown))
		nd.ws.wakeDispatcher()
	}
	return v, err
}

// poolView adds a cluster's nodes and newest events to its view.
func (nd *Nodes) poolView(ctx context.Context, pt *compute.Pool, v *apitypes.Compute) error {
	nodes, err := nd.ws.st.ListNodes(ctx, v.Name)
	if err != nil {
		return err
	}
	v.Nodes = map[string]int{}
	for _, n := range nodes {
		v.Nodes[n.State]++
		v.CurrentNodes++
		if w := nd.nodeShortfall(n); w != "" {
			v.Warnings = append(v.Warnings, w)
		}
	}
	// The bounds the pool loop keeps the node count in, and with them how
	// many jobs can run at once: a job on a pool takes whole nodes.
	lo, hi := 0, 0
	if v.State != StateDeleting {
		b := pt.Bounds(v.Spec, instanceWantsNode(v.State))
		lo, hi = b.Min, b.Max
	}
	v.MinNodes, v.MaxNodes, v.Capacity = &lo, &hi, hi
	v.Size = "attached"
	if v.Spec != nil && !pt.Attached {
		v.Size = v.Spec.Size
	}
	v.TargetNodes = nd.ws.pools.target(v.Name)
	if pt.Instance {
		v.Sessions, v.PortForwards, _ = nd.sessionUse(v.Name)
	}
	v.Events, err = nd.ComputeEvents(ctx, v.Name, 10)
	return err
}
