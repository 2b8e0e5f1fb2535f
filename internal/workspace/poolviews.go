package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// People's view of pools: nodes, events and bounds of a pool compute.

// ListNodes returns the nodes of a pool compute (as az ml compute list-nodes).
func (s *Service) ListNodes(ctx context.Context, compute string) ([]*Node, error) {
	rec, err := s.st.GetCompute(ctx, compute)
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.unknownCompute(ctx, compute)
	}
	if err != nil {
		return nil, err
	}
	nodes, err := s.st.ListNodes(ctx, rec.Name)
	if err != nil {
		return nil, err
	}
	active, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: activeStatuses, Compute: rec.Name})
	if err != nil {
		return nil, err
	}
	out := []*Node{}
	for _, n := range nodes {
		v := &Node{Name: n.Name, Compute: n.Compute, State: n.State, Reason: n.Reason, Size: n.Size, Address: n.Address,
			Jobs: []string{}, Created: n.Created, Joined: timePtr(n.Joined), Heartbeat: timePtr(n.Heartbeat)}
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
		out = append(out, v)
	}
	return out, nil
}

// ComputeEvents returns the newest limit events of a compute, oldest first.
func (s *Service) ComputeEvents(ctx context.Context, compute string, limit int) ([]ComputeEvent, error) {
	evs, err := s.st.ListComputeEvents(ctx, compute, limit)
	if err != nil {
		return nil, err
	}
	out := []ComputeEvent{}
	for _, e := range evs {
		out = append(out, ComputeEvent{Time: e.Time, Kind: e.Kind, Message: e.Message})
	}
	return out, nil
}

// ResizeCompute changes a cluster's bounds live.
func (s *Service) ResizeCompute(ctx context.Context, name string, minN, maxN *int, idle *int) (*Compute, error) {
	_, err := s.st.UpdateCompute(ctx, name, func(rec *store.Compute) error {
		if !isPool(rec.Type) {
			return Invalid("compute %s is of type %s; only clusters (amlcompute) are resized", name, rec.Type)
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
			return &Error{Code: CodeInvalid, Msg: err.Error(), Err: err}
		}
		raw, err := json.Marshal(&c)
		if err != nil {
			return err
		}
		rec.Spec, rec.Modified = raw, s.now()
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.unknownCompute(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	v, err := s.GetCompute(ctx, name)
	if err == nil {
		s.event(ctx, name, "resize", fmt.Sprintf("bounds now min %d, max %d, idle %ds", *v.Spec.MinInstances, *v.Spec.MaxInstances, *v.Spec.IdleTimeBeforeScaleDown))
		s.wakeDispatcher()
	}
	return v, err
}

// poolView adds a cluster's nodes and newest events to its view.
func (s *Service) poolView(ctx context.Context, v *Compute) error {
	nodes, err := s.st.ListNodes(ctx, v.Name)
	if err != nil {
		return err
	}
	v.Nodes = map[string]int{}
	for _, n := range nodes {
		v.Nodes[n.State]++
		v.CurrentNodes++
	}
	s.pmu.Lock()
	v.TargetNodes = s.nodeTargets[v.Name]
	s.pmu.Unlock()
	if v.Type == "computeinstance" {
		v.Sessions, v.PortForwards, _ = s.sessionUse(v.Name)
	}
	v.Events, err = s.ComputeEvents(ctx, v.Name, 10)
	return err
}
