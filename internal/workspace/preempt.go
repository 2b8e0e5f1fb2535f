package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Preemption: the nodes of a low-priority cluster (tier: low_priority, and
// the implicit clusters of serverless jobs with queue_settings.job_tier:
// spot) can be taken back by their provider. The node becomes Preempted
// and gets no more work; the runners of its attempts are told, through
// their heartbeat, to stop the job, upload its ./outputs and report
// Preempted (a cloud gives about 30 s of notice). Each such attempt is
// queued again as a new attempt, which is not a failure, and the new
// attempt's runner finds the outputs the preempted one uploaded in
// ./outputs, so a job that checkpoints there resumes. An attempt whose
// runner does not report within PreemptGrace is queued again all the same,
// with the outputs an earlier attempt left. Once no attempt runs on the
// node, the autoscaler terminates it.
//
// A node is found preempted two ways: its provider lists the machine in
// provider.StatePreempted (polled every PreemptPoll for low-priority
// clusters), or an owner asks for it (PreemptNode; `ferry compute
// preempt-node`), which is how tests and operators try it out.

// NodePreempted is the state of a node its provider took back.
const NodePreempted = "Preempted"

func lowPriority(c *spec.Compute) bool { return c.Tier == "low_priority" }

// PreemptNode preempts a node of a low-priority cluster now, as its cloud
// would: the provider is asked to take the machine back where it can, and
// the node's jobs are stopped and queued again.
func (nd *Nodes) PreemptNode(ctx context.Context, who auth.Principal, compute, node string) (*apitypes.Node, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("only an owner may preempt nodes")
	}
	rec, err := nd.ws.st.GetCompute(ctx, compute)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nd.ws.unknownCompute(ctx, compute)
	}
	if err != nil {
		return nil, err
	}
	var c spec.Compute
	if err := json.Unmarshal(rec.Spec, &c); err != nil {
		return nil, fmt.Errorf("compute %s: stored spec: %w", rec.Name, err)
	}
	if nd.ws.poolType(rec.Type) == nil || !lowPriority(&c) {
		return nil, apperr.Invalid("compute %s is not a low-priority cluster (tier: low_priority); only the nodes of one are preempted", compute)
	}
	n, err := nd.ws.st.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) || (err == nil && n.Compute != compute) {
		return nil, apperr.NotFound("node %s is not a node of compute %s (see `ferry compute list-nodes %s`)", node, compute, compute)
	}
	if err != nil {
		return nil, err
	}
	if n.State != NodeIdle && n.State != NodeBusy {
		return nil, apperr.Conflict("node %s is %s; only an Idle or Busy node can be preempted", node, n.State)
	}
	if n.Machine != "" && nd.ws.cfg.Providers != nil {
		if prov, err := nd.ws.cfg.Providers(&c); err == nil {
			if p, ok := prov.(provider.Preempter); ok {
				if err := p.Preempt(ctx, n.Machine); err != nil && !errors.Is(err, provider.ErrNotFound) {
					return nil, fmt.Errorf("node %s: provider %s: %w", node, prov.Type(), err)
				}
			}
		}
	}
	nd.ws.pools.preemptNode(ctx, n, "preempted on request of "+who.Subject)
	nd.ws.wakeDispatcher()
	nodes, err := nd.ListNodes(ctx, compute)
	if err != nil {
		return nil, err
	}
	for _, v := range nodes {
		if v.Name == node {
			return v, nil
		}
	}
	return nil, apperr.NotFound("node %s is gone", node)
}

// preemptNode marks an Idle or Busy node Preempted. The runners on it
// learn it at their next heartbeat.
func (l *poolLoop) preemptNode(ctx context.Context, n store.Node, why string) store.Node {
	moved := false
	u, err := l.st.UpdateNode(ctx, n.Name, func(x *store.Node) error {
		if x.State != NodeIdle && x.State != NodeBusy {
			return nil
		}
		x.State, x.Reason, moved = NodePreempted, why, true
		return nil
	})
	if err != nil || !moved {
		return n
	}
	l.mu.Lock()
	l.preemptedAt[n.Name] = l.now()
	l.mu.Unlock()
	l.event(ctx, n.Compute, "node_preempted", fmt.Sprintf("node %s: %s", n.Name, why))
	l.log.Info("node preempted", "node", n.Name, "why", why)
	return u
}

// preemptions is the pool loop's part of preemption: it asks the
// providers of low-priority clusters which machines they are taking back
// (every PreemptPoll) and queues again the attempts of preempted nodes
// whose runners did not stop within PreemptGrace. It returns live with the
// nodes' new states.
func (l *poolLoop) preemptions(ctx context.Context, pools map[string]*poolCompute, live []store.Node, onNode map[string][]store.Job, now time.Time) []store.Node {
	if l.providers != nil {
		for name, pc := range pools {
			if !lowPriority(&pc.spec) || pc.rec.State == StateDeleting {
				continue
			}
			l.mu.Lock()
			due := now.Sub(l.preemptPolled[name]) >= l.preemptPoll
			if due {
				l.preemptPolled[name] = now
			}
			l.mu.Unlock()
			if !due {
				continue
			}
			prov, err := l.providers(&pc.spec)
			if err != nil {
				continue
			}
			ms, err := prov.List(ctx, name)
			if err != nil {
				l.log.Warn("list machines for preemption", "compute", name, "err", err)
				continue
			}
			taken := map[string]bool{}
			for _, m := range ms {
				taken[m.ID] = m.State == provider.StatePreempted
			}
			for i, n := range live {
				if n.Compute == name && n.Machine != "" && taken[n.Machine] {
					live[i] = l.preemptNode(ctx, n, "its provider took the machine back")
				}
			}
		}
	}
	for _, n := range live {
		if n.State != NodePreempted {
			continue
		}
		l.mu.Lock()
		since, ok := l.preemptedAt[n.Name]
		if !ok || since.Before(l.started) {
			since = l.started // a restarted server gives the runners their notice again
			l.preemptedAt[n.Name] = since
		}
		l.mu.Unlock()
		if now.Sub(since) < l.preemptGrace {
			continue
		}
		for _, j := range onNode[n.Name] {
			why := fmt.Sprintf("node %s was preempted and the attempt did not stop within %s", n.Name, l.preemptGrace)
			if err := l.ws.requeuePreempted(ctx, j.Name, j.Attempt, n.Name, why); err != nil {
				l.log.Error("requeue preempted attempt", "job", j.Name, "err", err)
			}
		}
	}
	return live
}

// autoscaleState is a node's state as the autoscaler sees it. A preempted
// node is gone (not counted, so that a replacement can be launched) while
// attempts still stop on it, and Preempted, which it terminates, once none
// does.
func autoscaleState(n store.Node, jobs []store.Job) scheduler.NodeState {
	if n.State == NodePreempted && len(jobs) > 0 {
		return scheduler.NodeDeprovisioned
	}
	return scheduler.NodeState(n.State)
}

// onPreemptedNode returns the preempted node among the nodes an attempt
// runs on, or "".
func (s *Service) onPreemptedNode(ctx context.Context, j store.Job) string {
	for _, r := range placementOf(j).Ranks {
		if n, err := s.st.GetNode(ctx, r.Node); err == nil && n.State == NodePreempted {
			return n.Name
		}
	}
	return ""
}

// requeuePreempted ends an attempt that its node's preemption (or its
// engine: node is then "") stopped and queues the job again; the next
// placement makes a new attempt. The job's outputs stay, for the new
// attempt to resume from. A job whose cancel was
// asked is canceled instead. It does nothing for an attempt that is not
// the job's current one or a job that already ended.
func (s *Service) requeuePreempted(ctx context.Context, name string, attempt int, node, why string) error {
	canceled, moved := false, false
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		// Queued with a handle: it waited in its engine's queue.
		if apitypes.IsTerminal(j.Status) || (j.Status == apitypes.StatusQueued && j.Handle == "") || j.Attempt != attempt {
			return nil, nil
		}
		if j.Status == apitypes.StatusCancelRequested {
			canceled = true
			return nil, nil
		}
		from := j.Status
		now := s.now()
		j.Status = apitypes.StatusQueued
		j.StatusReason = fmt.Sprintf("queued: attempt %d was preempted (%s); it runs again as attempt %d", attempt, why, attempt+1)
		j.Placement, j.Handle, j.ExitCode, j.Heartbeat, moved = nil, "", nil, now, true
		return &store.Event{Job: name, Time: now, From: from, To: apitypes.StatusQueued, Reason: j.StatusReason}, nil
	})
	if err != nil {
		return err
	}
	if canceled {
		return s.finish(ctx, name, attempt, apitypes.StatusCanceled, "canceled", nil, "")
	}
	if !moved {
		return nil
	}
	if err := s.st.AddPreemption(ctx, store.Preemption{Job: name, Attempt: attempt, Node: node, Time: s.now(), Reason: why}); err != nil {
		s.log.Error("record preemption", "job", name, "err", err)
	}
	if err := s.st.DeleteTokens(ctx, auth.KindRun, name); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.heartbeats, name)
	delete(s.unreached, name)
	s.mu.Unlock()
	s.log.Info("attempt preempted; job queued again", "job", name, "attempt", attempt, "node", node)
	s.changed(name)
	s.wakeDispatcher()
	return nil
}

// preemptionsOf lists a job's preemptions for its view.
func (s *Service) preemptionsOf(ctx context.Context, name string) ([]apitypes.Preemption, error) {
	ps, err := s.st.ListPreemptions(ctx, name)
	if err != nil {
		return nil, err
	}
	var out []apitypes.Preemption
	for _, p := range ps {
		out = append(out, apitypes.Preemption{Attempt: p.Attempt, Node: p.Node, Time: p.Time, Reason: p.Reason})
	}
	return out, nil
}
