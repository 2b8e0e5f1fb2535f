package workspace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/store"
)

// This file is the workspace's side of the compute seam's optional powers
// (compute.go in package compute): the handle a launch returns is stored
// with the attempt; an attempt handed to a target that queues itself waits
// as Queued with the engine's reason, counted against the target's
// Capacity and out of the runner lease's reach; a periodic, batched
// reconcile asks each Inspector what became of its handles (also once at
// server start, so nothing launched by an earlier server is forgotten);
// and cancel reaches an attempt through its engine when no runner speaks
// for it.
//
// "The runner has reported" means the job left Queued: the first call of
// any of the attempt's runners (its assignment) moves it to Preparing, and
// from then on the runner and its lease speak for the attempt, as on every
// other target.

// queuesItself says whether t keeps attempts in an engine queue of its own.
func queuesItself(t compute.Target) bool {
	sq, ok := t.(compute.SelfQueueing)
	return ok && sq.QueuesItself()
}

// inEngineQueue counts the attempts of compute handed to its engine that
// wait there, or are being handed over (Queued with a handle or a
// hand-off mark): they hold slots of the target's Capacity as much as
// running ones do. Before its first count of a compute it settles the
// hand-offs an earlier server left under way (settleHandOffs).
func (s *Service) inEngineQueue(ctx context.Context, computeName string, t compute.Target) (int, error) {
	if !queuesItself(t) {
		return 0, nil
	}
	if !s.retaken[computeName] {
		if err := s.settleHandOffs(ctx, computeName, t); err != nil {
			s.log.Error("settle the hand-offs an earlier server left", "compute", computeName, "err", err)
		} else {
			s.retaken[computeName] = true
		}
	}
	js, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: []string{apitypes.StatusQueued}, Compute: computeName, Handle: store.HandleSet})
	return len(js), err
}

// runnerStarted moves an attempt that waited in its engine's queue to
// Preparing when one of its runners first calls: the engine started it,
// and from now on the runner's lease applies.
func (s *Service) runnerStarted(ctx context.Context, name string, attempt int) error {
	moved := false
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if j.Status != apitypes.StatusQueued || j.Attempt != attempt {
			return nil, nil
		}
		if j.Handle == "" {
			// Taken back from its engine (a retake after a restart, a
			// preemption): a new attempt will be made.
			return nil, apperr.Conflict("attempt %d of job %s was taken back from compute %s; a new attempt replaces it", attempt, name, j.Compute)
		}
		now := s.now()
		j.Status, j.StatusReason, j.Heartbeat, moved = apitypes.StatusPreparing, "runner started by compute "+j.Compute+"'s engine", now, true
		return &store.Event{Job: name, Time: now, From: apitypes.StatusQueued, To: j.Status, Reason: j.StatusReason}, nil
	})
	if moved {
		s.changed(name)
	}
	return err
}

// cancelInEngine cancels, through its engine, a job's attempt that waits
// in a self-queueing engine's queue, before the job is marked Canceled:
// if the engine cannot be told, the job stays as it is and the caller may
// try again. A target that cannot cancel leaves the attempt there; its
// run token is revoked with the cancel, so its runner is refused when the
// engine starts it.
func (s *Service) cancelInEngine(ctx context.Context, name string) error {
	j, err := s.st.GetJob(ctx, name)
	if err != nil || j.Status != apitypes.StatusQueued || j.Handle == "" || isHandOffMark(j.Handle) {
		// The cancel's own update reports a missing job; one being
		// handed over is canceled through its engine when its handle
		// comes (launched).
		return nil
	}
	t, err := s.target(ctx, j.Compute)
	if err != nil {
		return nil
	}
	c, ok := t.(compute.Canceller)
	if !ok {
		return nil
	}
	if err := c.Cancel(ctx, compute.Handle(j.Handle)); err != nil {
		return &apperr.Error{Code: apperr.CodeUnavailable, Err: err,
			Msg: fmt.Sprintf("job %s waits in compute %s's queue (engine handle %s) and the engine could not cancel it: %v; try again", name, j.Compute, j.Handle, err)}
	}
	s.mu.Lock()
	s.engineCanceled[name] = j.Attempt
	s.mu.Unlock()
	return nil
}

// canceledInQueue ends what the cancel of a job that waited in its
// engine's queue leaves: the attempt's run token, so that a runner the
// engine starts anyway is refused.
func (s *Service) canceledInQueue(ctx context.Context, name string) {
	if err := s.st.DeleteTokens(ctx, auth.KindRun, name); err != nil {
		s.log.Error("revoke the run token of a canceled job", "job", name, "err", err)
	}
	s.mu.Lock()
	delete(s.heartbeats, name)
	delete(s.unreached, name)
	delete(s.cancelAsked, name)
	s.mu.Unlock()
	s.wakeDispatcher() // its slot of the target's capacity is free
}

// cancelAskedNow notes when the cancel of a running attempt was asked, for
// the engine's cancel after the grace.
func (s *Service) cancelAskedNow(name string) {
	s.mu.Lock()
	s.cancelAsked[name] = s.now()
	s.mu.Unlock()
}

// engineStates are the job statuses whose attempts the reconcile asks the
// engine about: waiting in its queue, or spoken for by a runner.
var engineStates = append([]string{apitypes.StatusQueued}, activeStatuses...)

// reconcileEngines asks each target with an Inspector, in one call, what
// its engine did with the handles of the workspace's unfinished attempts,
// and acts on the answers; and cancels through its engine each attempt
// whose runner has not ended it within the cancel grace. It runs once at
// server start and every EngineInspect after.
func (s *Service) reconcileEngines(ctx context.Context) error {
	computes, err := s.st.ListComputes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range computes {
		if s.poolType(c.Type) != nil {
			continue
		}
		t, err := s.target(ctx, c.Name)
		if err != nil {
			continue // the dispatcher reports an unusable compute
		}
		insp, inspects := t.(compute.Inspector)
		canc, cancels := t.(compute.Canceller)
		if !inspects && !cancels {
			continue
		}
		all, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: engineStates, Compute: c.Name, Handle: store.HandleSet})
		if err != nil {
			return err
		}
		// Hand-off marks name no engine's job (handoff.go).
		js := slices.DeleteFunc(all, func(j store.Job) bool { return isHandOffMark(j.Handle) })
		if len(js) == 0 {
			continue
		}
		if inspects {
			if err := s.inspect(ctx, c.Name, insp, js); err != nil {
				errs = append(errs, fmt.Errorf("compute %s: inspect: %w", c.Name, err))
			}
		}
		if cancels {
			s.cancelAfterGrace(ctx, c.Name, canc, js)
		}
	}
	return errors.Join(errs...)
}

// inspect asks insp about the handles of js in one call and acts on each
// answer.
func (s *Service) inspect(ctx context.Context, computeName string, insp compute.Inspector, js []store.Job) error {
	hs := make([]compute.Handle, len(js))
	for i, j := range js {
		hs[i] = compute.Handle(j.Handle)
	}
	states, err := insp.Inspect(ctx, hs)
	if err != nil {
		return err
	}
	for _, j := range js {
		st, ok := states[compute.Handle(j.Handle)]
		if !ok {
			st = compute.EngineState{Phase: compute.PhaseGone}
		}
		if err := s.guard("job "+j.Name, func() error { return s.applyEngineState(ctx, computeName, j, st) }); err != nil {
			s.log.Error("engine reconcile", "job", j.Name, "handle", j.Handle, "err", err)
		}
	}
	return nil
}

// applyEngineState acts on what the engine says of one attempt, as read in
// j (each change is made again under the job's update, against its state
// then, so a runner that reported meanwhile wins).
func (s *Service) applyEngineState(ctx context.Context, computeName string, j store.Job, st compute.EngineState) error {
	waiting := j.Status == apitypes.StatusQueued // no runner has spoken for it
	switch st.Phase {
	case compute.PhasePending:
		if waiting {
			return s.engineReason(ctx, j, computeName, st.Reason)
		}
	case compute.PhaseRunning:
		// Its runner reports from now; the lease starts at its first
		// call. Until then, after a grace, the job says it has not come.
		if waiting {
			where := "in " + st.Runner
			if st.Runner == "" {
				where = fmt.Sprintf("that compute %s's engine started (engine handle %s)", computeName, j.Handle)
			}
			s.engineStartedRunner(j, where)
			return s.tellUnreached(ctx, j, "queued: ")
		}
	case compute.PhaseEnded:
		if s.collectFinalReport(ctx, j) {
			return nil
		}
		if st.Requeue && j.Status != apitypes.StatusCancelRequested {
			why := fmt.Sprintf("compute %s's engine took it back (%s)", computeName, orUnsaid(st.Reason))
			return s.requeuePreempted(ctx, j.Name, j.Attempt, "", why)
		}
		status := st.Outcome
		if j.Status == apitypes.StatusCancelRequested {
			status = apitypes.StatusCanceled
		} else if !apitypes.IsTerminal(status) {
			status = apitypes.StatusFailed
		}
		why := fmt.Sprintf("compute %s's engine ended the attempt without its runner's report: %s", computeName, orUnsaid(st.Reason))
		msg := ""
		if status == apitypes.StatusFailed {
			msg = why
		}
		return s.finishUnreported(ctx, j, status, why, st.ExitCode, msg)
	case compute.PhaseGone:
		if !waiting {
			return nil // its runner's lease decides, as on every target
		}
		if s.collectFinalReport(ctx, j) {
			return nil
		}
		why := fmt.Sprintf("runner lost: compute %s's engine no longer knows attempt %d (engine handle %s) and its runner never reported", computeName, j.Attempt, j.Handle)
		return s.finishUnreported(ctx, j, apitypes.StatusFailed, why, nil, why)
	}
	return nil
}

// finishUnreported ends an attempt as its engine saw it end, unless its
// runner reported the end meanwhile (finish then changes nothing).
func (s *Service) finishUnreported(ctx context.Context, j store.Job, status, why string, exit *int, msg string) error {
	s.log.Info("attempt ended by its engine", "job", j.Name, "attempt", j.Attempt, "status", status, "reason", why)
	return s.finish(ctx, j.Name, j.Attempt, status, why, exit, msg)
}

func orUnsaid(reason string) string {
	if reason == "" {
		return "no reason given"
	}
	return reason
}

// engineReason shows why an attempt waits in its engine's queue, in the
// engine's words, as the job's status reason; a change is an event too,
// so it shows in the job's history and stream.
func (s *Service) engineReason(ctx context.Context, j store.Job, computeName, reason string) error {
	text := fmt.Sprintf("queued: waiting in compute %s's queue: %s", computeName, orUnsaid(reason))
	changed := false
	_, err := s.st.UpdateJob(ctx, j.Name, func(cur *store.Job) (*store.Event, error) {
		// Checked again here: a runner that reported since the read is
		// never demoted by an older Pending answer.
		if cur.Status != apitypes.StatusQueued || cur.Attempt != j.Attempt || cur.Handle != j.Handle || cur.StatusReason == text {
			return nil, nil
		}
		cur.StatusReason, changed = text, true
		return &store.Event{Job: j.Name, Time: s.now(), From: apitypes.StatusQueued, To: apitypes.StatusQueued, Reason: text}, nil
	})
	if changed {
		s.changed(j.Name)
	}
	return err
}

// cancelGraceSlack is what a runner gets, beyond the cancel grace, to
// learn of a cancel (its next heartbeat) and report the end, before its
// attempt is canceled through the engine.
const cancelGraceSlack = 5 * time.Second

// cancelAfterGrace cancels through the engine each attempt of js whose
// cancel was asked longer than the cancel grace ago and whose runner has
// not ended it, once per attempt. A server started again counts the grace
// from its start.
func (s *Service) cancelAfterGrace(ctx context.Context, computeName string, c compute.Canceller, js []store.Job) {
	now := s.now()
	for _, j := range js {
		if j.Status != apitypes.StatusCancelRequested {
			continue
		}
		s.mu.Lock()
		asked, ok := s.cancelAsked[j.Name]
		if !ok || asked.Before(s.started) {
			asked = s.started
		}
		done := s.engineCanceled[j.Name] == j.Attempt
		s.mu.Unlock()
		if done || now.Sub(asked) < s.cfg.CancelGrace+cancelGraceSlack {
			continue
		}
		if err := c.Cancel(ctx, compute.Handle(j.Handle)); err != nil {
			s.log.Error("cancel through the engine", "compute", computeName, "job", j.Name, "handle", j.Handle, "err", err)
			continue
		}
		s.log.Info("runner did not end a canceled attempt within the grace; canceled it through its engine", "compute", computeName, "job", j.Name, "handle", j.Handle)
		s.mu.Lock()
		s.engineCanceled[j.Name] = j.Attempt
		s.mu.Unlock()
	}
}
