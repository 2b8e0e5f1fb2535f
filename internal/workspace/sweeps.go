package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/sweep"
)

// A sweep job is a job of its own (its record holds the sweep's spec and
// status) whose trials are ordinary command jobs the server creates. The
// sweep loop drives every open sweep once a second and whenever a job
// changes: it creates trials up to the limits, cancels those the early
// termination policy cuts, cascades a cancel and the sweep's timeout, and
// ends the sweep when its last trial has ended.
//
// Everything it decides is a function of the store: a trial's parameters
// are stored (sweep_trials) before its job is created, under a name made
// from the sweep's and the trial's index, so a server killed at any point
// creates the missing job of a stored trial at its next pass and never a
// trial twice; sampling is a function of the sweep's seed (picked at
// submit and stored in its spec) and the trial's index, and bayesian
// sampling's history is what the store had when the trial was stored.
//
// The sweep's record has no compute (its trials have), so it holds no
// slot of a target; it is Running from submit, and has no lease to renew
// (expireLeases passes over jobs without a compute).

// sweepTick is how often the sweep loop runs without being woken.
const sweepTick = time.Second

// sweepMemory is what the sweep loop keeps between passes: the primary
// metric of trials that ended, which never changes again, and whether any
// sweep is open (a job's change wakes the loop only then).
type sweepMemory struct {
	mu    sync.Mutex
	ended map[string]endedTrial // by trial job name
	open  atomic.Int64
	kick  chan struct{}
	// lastPass is when the last pass began (real time: it only spaces
	// passes out); only the loop's goroutine uses it.
	lastPass time.Time
}

type endedTrial struct {
	status, reason string
	values         []float64
}

func newSweepMemory() *sweepMemory {
	return &sweepMemory{ended: map[string]endedTrial{}, kick: make(chan struct{}, 1)}
}

// kickSweeps wakes the sweep loop when a sweep is open.
func (s *Service) kickSweeps() {
	if s.sweeps.open.Load() == 0 {
		return
	}
	select {
	case s.sweeps.kick <- struct{}{}:
	default:
	}
}

// sweepRunner is the principal the sweep loop cancels trials as; its
// subject is the reason the trial shows ("canceled by ...").
func sweepRunner(why string) auth.Principal {
	return auth.Principal{Kind: auth.KindOwner, Subject: why}
}

// submitSweep stores a valid sweep job: it checks its trial as the
// command job trial 0 would be (compute, environment, inputs, snapshots),
// picks the seed when the file gives none, and stores the sweep Running.
// Its trials are created by the sweep loop.
func (s *Service) submitSweep(ctx context.Context, who auth.Principal, sub Submission) (*apitypes.Job, error) {
	j := sub.Spec.Clone()
	if j.IsComponentTrial() {
		var err error
		if sub, err = s.componentTrial(ctx, j, sub); err != nil {
			return nil, err
		}
	}
	if j.SeedPicked() {
		alg := j.Sampling()
		seed := rand.Int64N(1 << 53)
		alg.Seed = &seed
		j.SamplingAlgorithm = &alg
	}
	first, err := sweep.NewSampler(j).Sample(0, nil)
	if err != nil {
		return nil, Invalid("search_space: %v", err)
	}
	trialSub := sub
	trialSub.Spec = j.TrialJob(first)
	trial, err := s.prepareJob(ctx, trialSub.Spec, trialSub)
	if err != nil {
		return nil, err
	}
	specJSON, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	name := j.Name
	if name == "" {
		name = newJobName()
	}
	now := s.now()
	rec := store.Job{
		Name: name, DisplayName: j.DisplayName, ExperimentName: j.ExperimentName,
		Status: apitypes.StatusRunning, CreatedBy: who.Subject, Spec: specJSON,
		CodeSnapshot: trial.CodeSnapshot, Inputs: trial.Inputs, Environment: trial.Environment,
		Created: now, Started: now, Heartbeat: now,
	}
	if sub.dryRun { // a schedule's check of what it will fire
		return s.jobViewWith(rec, nil)
	}
	// The sweep is recorded before its job: a server killed in between
	// leaves a record the loop skips while no job has its name.
	if err := s.st.CreateSweep(ctx, name, now); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, err
	}
	total, conc := j.TrialLimits()
	reason := fmt.Sprintf("sweep of %d trials (%d at once) on compute %s", total, conc, trial.Compute)
	// A schedule's firing stores the job with the occurrence it fires.
	created, err := s.createJobRecord(ctx, sub, rec, store.Event{Job: name, Time: now, To: apitypes.StatusRunning, Reason: reason})
	if err != nil {
		_ = s.st.SweepDone(ctx, name) // the name belongs to another job
		if errors.Is(err, store.ErrConflict) {
			return nil, Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, err
	}
	s.sweeps.open.Add(1)
	s.kickSweeps()
	s.changed(name)
	return s.jobViewWith(created, nil)
}

// sweepPassGap is the least time between two passes of the sweep loop:
// it is woken by every job's change, metrics included, and a burst of
// them is one pass, not one each.
const sweepPassGap = 200 * time.Millisecond

// reconcileSweeps is one pass of the sweep loop over every open sweep.
func (s *Service) reconcileSweeps(ctx context.Context) error {
	if wait := sweepPassGap - time.Since(s.sweeps.lastPass); wait > 0 {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	s.sweeps.lastPass = time.Now()
	names, err := s.st.ListOpenSweeps(ctx)
	if err != nil {
		return err
	}
	s.sweeps.open.Store(int64(len(names)))
	for _, name := range names {
		if err := s.guard("sweep "+name, func() error { return s.driveSweep(ctx, name) }); err != nil && ctx.Err() == nil {
			s.log.Error("sweep", "sweep", name, "err", err)
		}
	}
	return nil
}

// trialState is one trial as a pass sees it.
type trialState struct {
	row    store.SweepTrial
	params sweep.Params
	status string
	reason string
	values []float64 // the primary metric, in the order logged
}

// driveSweep is one pass over one sweep.
func (s *Service) driveSweep(ctx context.Context, name string) error {
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil // submitted this moment, or lost before its job: nothing to drive
	}
	if err != nil {
		return err
	}
	var j spec.Job
	if err := json.Unmarshal(rec.Spec, &j); err != nil || j.Type != "sweep" {
		return s.st.SweepDone(ctx, name) // not a sweep's record: leave it
	}
	if apitypes.IsTerminal(rec.Status) {
		return s.st.SweepDone(ctx, name)
	}
	trials, err := s.trialStates(ctx, rec, &j)
	if err != nil {
		return err
	}
	total, conc := j.TrialLimits()
	active := 0
	for _, t := range trials {
		if !apitypes.IsTerminal(t.status) {
			active++
		}
	}

	// A cancel or the sweep's timeout stops every trial, then the sweep.
	stop, stopStatus := "", apitypes.StatusCanceled
	switch {
	case rec.Status == apitypes.StatusCancelRequested:
		stop = "canceled by " + rec.CancelBy
		if rec.CancelBy == "" {
			stop = "canceled"
		}
	case j.Limits != nil && j.Limits.Timeout > 0 && s.now().Sub(rec.Started) >= time.Duration(j.Limits.Timeout)*time.Second:
		stop = fmt.Sprintf("limits.timeout of %ds reached", j.Limits.Timeout)
	}
	if stop != "" {
		for _, t := range trials {
			if !apitypes.IsTerminal(t.status) && t.status != apitypes.StatusCancelRequested {
				s.cancelTrial(ctx, t.row.Job, "sweep "+name+": "+stop)
			}
		}
		if active == 0 {
			return s.endSweep(ctx, name, stopStatus, stop+"; "+s.sweepSummary(&j, trials), nil)
		}
		return nil
	}

	// Early termination.
	if j.EarlyTermination != nil {
		var ts []sweep.Trial
		for _, t := range trials {
			ts = append(ts, sweep.Trial{Name: t.row.Job, Running: t.status == apitypes.StatusRunning, Values: t.values})
		}
		for _, c := range sweep.Terminate(j.EarlyTermination, j.Objective.Goal, ts) {
			s.cancelTrial(ctx, c.Trial, "sweep "+name+"'s "+c.Reason)
		}
	}

	// New trials, up to the limits.
	sampler := sweep.NewSampler(&j)
	exhausted := false
	for len(trials) < total && active < conc {
		idx := len(trials)
		params, err := sampler.Sample(idx, sweepHistory(&j, trials))
		if err != nil {
			exhausted = true
			break
		}
		raw, err := json.Marshal(params)
		if err != nil {
			return err
		}
		row := store.SweepTrial{Sweep: name, Index: idx, Job: trialName(name, idx), Params: raw, Created: s.now()}
		if err := s.st.AddSweepTrial(ctx, row); err != nil {
			return err
		}
		if err := s.createTrial(ctx, rec, &j, row, params); err != nil {
			return s.failSweep(ctx, name, trials, &j, err)
		}
		trials = append(trials, trialState{row: row, params: params, status: apitypes.StatusQueued})
		active++
	}
	if (len(trials) >= total || exhausted) && active == 0 {
		status := apitypes.StatusFailed
		for _, t := range trials {
			if t.status == apitypes.StatusCompleted {
				status = apitypes.StatusCompleted
			}
		}
		out, err := s.bestTrialOutputs(ctx, &j, trials)
		if err != nil {
			return err
		}
		return s.endSweep(ctx, name, status, s.sweepSummary(&j, trials), out)
	}
	return s.sweepProgress(ctx, rec, fmt.Sprintf("%d of %d trials started, %d unfinished", len(trials), total, active)+bestSoFar(&j, trials))
}

// sweepProgress keeps a running sweep's status reason up to date, with a
// write only when it changes.
func (s *Service) sweepProgress(ctx context.Context, rec store.Job, reason string) error {
	if rec.StatusReason == reason {
		return nil
	}
	_, err := s.st.UpdateJob(ctx, rec.Name, func(j *store.Job) (*store.Event, error) {
		if j.Status == apitypes.StatusRunning {
			j.StatusReason = reason
		}
		return nil, nil
	})
	if err == nil {
		s.changed(rec.Name)
	}
	return err
}

// trialName is the job name of trial idx of sweep name, as Azure ML
// names a sweep's child runs.
func trialName(sweepName string, idx int) string { return sweepName + "_" + strconv.Itoa(idx) }

// trialStates reads a sweep's trials with their status and primary
// metric, creating the job of any stored trial that has none yet (the
// server was killed between the two writes).
func (s *Service) trialStates(ctx context.Context, rec store.Job, j *spec.Job) ([]trialState, error) {
	rows, err := s.st.ListSweepTrials(ctx, rec.Name)
	if err != nil {
		return nil, err
	}
	metric := j.Objective.PrimaryMetric
	out := make([]trialState, 0, len(rows))
	for _, row := range rows {
		t := trialState{row: row}
		if err := json.Unmarshal(row.Params, &t.params); err != nil {
			return nil, fmt.Errorf("trial %s: parameters: %w", row.Job, err)
		}
		s.sweeps.mu.Lock()
		e, ended := s.sweeps.ended[row.Job]
		s.sweeps.mu.Unlock()
		if ended {
			t.status, t.reason, t.values = e.status, e.reason, e.values
			out = append(out, t)
			continue
		}
		tr, err := s.st.GetJob(ctx, row.Job)
		if errors.Is(err, store.ErrNotFound) {
			if err := s.createTrial(ctx, rec, j, row, t.params); err != nil {
				return nil, err
			}
			t.status = apitypes.StatusQueued
			out = append(out, t)
			continue
		}
		if err != nil {
			return nil, err
		}
		t.status, t.reason = tr.Status, tr.StatusReason
		ms, err := s.st.ListMetrics(ctx, row.Job, metric)
		if err != nil {
			return nil, err
		}
		t.values = finiteValues(ms)
		if apitypes.IsTerminal(tr.Status) {
			s.sweeps.mu.Lock()
			s.sweeps.ended[row.Job] = endedTrial{status: t.status, reason: t.reason, values: t.values}
			s.sweeps.mu.Unlock()
		}
		out = append(out, t)
	}
	return out, nil
}

// finiteValues are the values of a metric series that can be compared: a
// NaN or infinite value a trial logs is left out of its objective.
func finiteValues(ms []store.Metric) []float64 {
	var out []float64
	for _, m := range ms {
		if !math.IsNaN(m.Value) && !math.IsInf(m.Value, 0) {
			out = append(out, m.Value)
		}
	}
	return out
}

// sweepHistory is what bayesian sampling learns from: the trials that ended
// with a value of the primary metric.
func sweepHistory(j *spec.Job, trials []trialState) []sweep.Observation {
	if j.Sampling().Type != "bayesian" {
		return nil
	}
	var out []sweep.Observation
	for _, t := range trials {
		if v, ok := sweep.Best(t.values, j.Objective.Goal); ok && apitypes.IsTerminal(t.status) {
			out = append(out, sweep.Observation{Params: t.params, Value: v})
		}
	}
	return out
}

// componentTrial makes the trial of sweep j from the registered
// component it names (trial: azureml:NAME:VERSION): its command, code
// and environment, with the search space bound through the sweep's
// inputs. A component file is the client's to read: `ferry job create`
// sends its trial inline.
func (s *Service) componentTrial(ctx context.Context, j *spec.Job, sub Submission) (Submission, error) {
	ref := j.Trial.Ref
	if !strings.HasPrefix(ref, "azureml:") {
		return sub, Invalid("trial: %q is a file on the client's machine; `ferry job create` reads it and sends the trial inline", ref)
	}
	name, version, err := spec.ParseComponentRef(ref)
	if err != nil {
		return sub, Invalid("trial: %v", err)
	}
	c, err := s.GetComponent(ctx, name, version)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == CodeNotFound {
			return sub, NotFound("trial: %s", spec.RegistryMiss(ref, e.Msg))
		}
		return sub, err
	}
	if err := j.UseComponentTrial(c.Spec); err != nil {
		return sub, &Error{Code: CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := j.Validate(); err != nil {
		return sub, &Error{Code: CodeInvalid, Msg: fmt.Sprintf("with the trial of component %s: %v", ref, err), Err: err}
	}
	if sub.CodeSnapshot == "" {
		sub.CodeSnapshot = c.Spec.CodeSnapshot
	}
	if sub.EnvironmentSnapshot == "" {
		sub.EnvironmentSnapshot = c.Spec.EnvironmentSnapshot
	}
	sub.Spec = j
	return sub, nil
}

// createTrial creates the job of a stored trial; a job of that name
// already there is that trial's.
func (s *Service) createTrial(ctx context.Context, parent store.Job, j *spec.Job, row store.SweepTrial, params sweep.Params) error {
	tj := j.TrialJob(params)
	tj.Name = row.Job
	tj.DisplayName = fmt.Sprintf("%s trial %d", firstOf(j.DisplayName, parent.Name), row.Index)
	if tj.Tags == nil {
		tj.Tags = map[string]string{}
	}
	tj.Tags["ferry.sweep"], tj.Tags["ferry.trial"] = parent.Name, strconv.Itoa(row.Index)
	computeName, err := s.jobCompute(ctx, tj)
	if err != nil {
		return err
	}
	specJSON, err := json.Marshal(tj)
	if err != nil {
		return err
	}
	now := s.now()
	rec := store.Job{
		Name: row.Job, DisplayName: tj.DisplayName, ExperimentName: tj.ExperimentName,
		Compute: computeName, Status: apitypes.StatusQueued, Priority: priorityOf(tj), CreatedBy: parent.CreatedBy,
		Spec: specJSON, CodeSnapshot: parent.CodeSnapshot, Inputs: parent.Inputs, Environment: parent.Environment,
		Created: now,
	}
	reason := fmt.Sprintf("trial %d of sweep %s (%s); waiting for a free slot on compute %s", row.Index, parent.Name, paramsText(params), computeName)
	_, err = s.st.CreateJob(ctx, rec, store.Event{Job: row.Job, Time: now, To: apitypes.StatusQueued, Reason: reason})
	if errors.Is(err, store.ErrConflict) {
		return s.ownTrial(ctx, parent.Name, row)
	}
	if err != nil {
		return err
	}
	s.changed(row.Job)
	s.wakeDispatcher()
	return nil
}

// ownTrial checks that the job that has a trial's name is that trial
// (created by an earlier pass), not a job of the user's that happens to be
// named SWEEP_N.
func (s *Service) ownTrial(ctx context.Context, sweepName string, row store.SweepTrial) error {
	rec, err := s.st.GetJob(ctx, row.Job)
	if err != nil {
		return err
	}
	var j spec.Job
	if json.Unmarshal(rec.Spec, &j) == nil && j.Tags["ferry.sweep"] == sweepName && j.Tags["ferry.trial"] == strconv.Itoa(row.Index) {
		return nil
	}
	return Conflict("trial %d of sweep %s would be job %s, but a job of that name exists already; submit the sweep under another name", row.Index, sweepName, row.Job)
}

// paramsText writes parameters as name=value, by name.
func paramsText(p sweep.Params) string {
	var parts []string
	for k, v := range p {
		parts = append(parts, k+"="+spec.FormatParam(v))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// cancelTrial cancels a trial, why being who canceled it.
func (s *Service) cancelTrial(ctx context.Context, job, why string) {
	if _, err := s.CancelJob(ctx, sweepRunner(why), job); err != nil && CodeOf(err) != CodeConflict {
		s.log.Error("cancel trial", "job", job, "err", err)
	}
}

// failSweep ends a sweep whose trial could not be created (its compute
// went, say): the trials running go on to their end, none is added.
func (s *Service) failSweep(ctx context.Context, name string, trials []trialState, j *spec.Job, cause error) error {
	if CodeOf(cause) == CodeInternal {
		return cause // the store's trouble: the next pass tries again
	}
	for _, t := range trials {
		if !apitypes.IsTerminal(t.status) {
			s.cancelTrial(ctx, t.row.Job, "sweep "+name+" failed")
		}
	}
	return s.endSweep(ctx, name, apitypes.StatusFailed, "a trial could not be created: "+cause.Error(), nil)
}

// bestTrialOutputs are the outputs of the best trial that completed (by
// the primary metric), which become the sweep's own, as in Azure ML: a
// pipeline step after a sweep step takes them. nil when no completed
// trial logged the metric.
func (s *Service) bestTrialOutputs(ctx context.Context, j *spec.Job, trials []trialState) (json.RawMessage, error) {
	for _, t := range rankTrials(j, trials) {
		if t.Objective == nil {
			break
		}
		if t.Status != apitypes.StatusCompleted {
			continue
		}
		rec, err := s.st.GetJob(ctx, t.Name)
		if err != nil {
			return nil, err
		}
		return rec.Outputs, nil
	}
	return nil, nil
}

// endSweep records the end of a sweep, with the outputs of its best
// trial (nil: none), and stops driving it.
func (s *Service) endSweep(ctx context.Context, name, status, reason string, outputs json.RawMessage) error {
	completed := false // the outputs it owes a registration are to register
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		completed = false
		if apitypes.IsTerminal(j.Status) {
			return nil, nil
		}
		from, now := j.Status, s.now()
		j.Status, j.StatusReason, j.Ended = status, reason, now
		if len(outputs) > 0 {
			j.Outputs = outputs
		}
		completed = status == apitypes.StatusCompleted
		j.Outputs = owedOutputs(j.Outputs, j.Spec, completed)
		return &store.Event{Job: name, Time: now, From: from, To: status, Reason: reason}, nil
	})
	if err != nil {
		return err
	}
	if completed {
		s.registerOwed(ctx, name)
	}
	s.mu.Lock()
	delete(s.heartbeats, name)
	s.mu.Unlock()
	s.changed(name)
	return s.st.SweepDone(ctx, name)
}
