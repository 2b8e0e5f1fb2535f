package sweeps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/sweep"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Store is the part of the workspace's store the sweep loop reads and
// writes: the sweeps and their trials, the trials' jobs and metrics.
type Store interface {
	store.Sweeps
	store.Jobs
	store.Metrics
}

// Controller is the sweep loop and the sweep job type (type: sweep):
// register it with Register. What it keeps between passes is the primary
// metric of trials that ended, which never changes again, and whether any
// sweep is open (a job's change wakes the loop only then).
type Controller struct {
	jobs workspace.Jobs
	st   Store
	log  *slog.Logger

	mu    sync.Mutex
	ended map[string]endedTrial // by trial job name
	open  atomic.Int64
	wake  chan struct{}
	// lastPass is when the last pass began (real time: it only spaces
	// passes out); only the loop's goroutine uses it.
	lastPass time.Time
}

var (
	_ workspace.JobType    = (*Controller)(nil)
	_ workspace.Controller = (*Controller)(nil)
	_ workspace.JobWatcher = (*Controller)(nil)
)

type endedTrial struct {
	status, reason string
	values         []float64
}

// New makes the sweep loop of a workspace.
func New(jobs workspace.Jobs, st Store, log *slog.Logger) *Controller {
	return &Controller{jobs: jobs, st: st, log: log, ended: map[string]endedTrial{}, wake: make(chan struct{}, 1)}
}

// Registry is where the server registers a workload: the workspace.
type Registry interface {
	RegisterJobType(typ string, t workspace.JobType)
	RegisterController(c workspace.Controller)
}

// Register makes sweep jobs c's to submit, show and drive.
func Register(r Registry, c *Controller) {
	r.RegisterJobType("sweep", c)
	r.RegisterController(c)
}

// Name implements workspace.Controller.
func (sw *Controller) Name() string { return "sweeps" }

// Interval implements workspace.Controller: the loop runs every second
// without being woken.
func (sw *Controller) Interval() time.Duration { return time.Second }

// Wake implements workspace.Controller.
func (sw *Controller) Wake() <-chan struct{} { return sw.wake }

// Reconcile implements workspace.Controller.
func (sw *Controller) Reconcile(ctx context.Context) error { return sw.reconcileSweeps(ctx) }

// Submit implements workspace.JobType.
func (sw *Controller) Submit(ctx context.Context, who auth.Principal, sub workspace.Submission) (*apitypes.Job, error) {
	return sw.submitSweep(ctx, who, sub)
}

// Decorate implements workspace.JobType: a sweep's view holds its
// objective and trials, ranked.
func (sw *Controller) Decorate(ctx context.Context, rec store.Job, v *apitypes.Job) error {
	var err error
	v.Sweep, err = sw.sweepView(ctx, rec, v.Spec)
	return err
}

// JobChanged implements workspace.JobWatcher: it wakes the loop when a
// sweep is open.
func (sw *Controller) JobChanged(string) { sw.kick() }

// kick wakes the sweep loop when a sweep is open.
func (sw *Controller) kick() {
	if sw.open.Load() == 0 {
		return
	}
	select {
	case sw.wake <- struct{}{}:
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
func (sw *Controller) submitSweep(ctx context.Context, who auth.Principal, sub workspace.Submission) (*apitypes.Job, error) {
	j := sub.Spec.Clone()
	if j.IsComponentTrial() {
		var err error
		if sub, err = sw.componentTrial(ctx, j, sub); err != nil {
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
		return nil, apperr.Invalid("search_space: %v", err)
	}
	trialSub := sub
	trialSub.Spec = j.TrialJob(first)
	trial, err := sw.jobs.PrepareJob(ctx, trialSub)
	if err != nil {
		return nil, err
	}
	specJSON, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	name := j.Name
	if name == "" {
		name = workspace.NewJobName()
	}
	now := sw.jobs.Now()
	rec := store.Job{
		Name: name, DisplayName: j.DisplayName, ExperimentName: j.ExperimentName,
		Status: apitypes.StatusRunning, CreatedBy: who.Subject, Spec: specJSON,
		CodeSnapshot: trial.CodeSnapshot, Inputs: trial.Inputs, Environment: trial.Environment,
		Created: now, Started: now, Heartbeat: now,
	}
	if sub.DryRun { // a schedule's check of what it will fire
		return sw.jobs.JobView(rec)
	}
	// The sweep is recorded before its job: a server killed in between
	// leaves a record the loop skips while no job has its name.
	if err := sw.st.CreateSweep(ctx, name, now); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, err
	}
	total, conc := j.TrialLimits()
	reason := fmt.Sprintf("sweep of %d trials (%d at once) on compute %s", total, conc, trial.Compute)
	// A schedule's firing stores the job with the occurrence it fires.
	created, err := sw.jobs.CreateJob(ctx, sub, rec, store.Event{Job: name, Time: now, To: apitypes.StatusRunning, Reason: reason})
	if err != nil {
		_ = sw.st.SweepDone(ctx, name) // the name belongs to another job
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, err
	}
	sw.open.Add(1)
	sw.kick()
	sw.jobs.Changed(name)
	return sw.jobs.JobView(created)
}

// sweepPassGap is the least time between two passes of the sweep loop:
// it is woken by every job's change, metrics included, and a burst of
// them is one pass, not one each.
const sweepPassGap = 200 * time.Millisecond

// reconcileSweeps is one pass of the sweep loop over every open sweep.
func (sw *Controller) reconcileSweeps(ctx context.Context) error {
	if wait := sweepPassGap - time.Since(sw.lastPass); wait > 0 {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	sw.lastPass = time.Now()
	names, err := sw.st.ListOpenSweeps(ctx)
	if err != nil {
		return err
	}
	sw.open.Store(int64(len(names)))
	for _, name := range names {
		if err := sw.jobs.Guard("sweep "+name, func() error { return sw.driveSweep(ctx, name) }); err != nil && ctx.Err() == nil {
			sw.log.Error("sweep", "sweep", name, "err", err)
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
func (sw *Controller) driveSweep(ctx context.Context, name string) error {
	rec, err := sw.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil // submitted this moment, or lost before its job: nothing to drive
	}
	if err != nil {
		return err
	}
	var j spec.Job
	if err := json.Unmarshal(rec.Spec, &j); err != nil || j.Type != "sweep" {
		return sw.st.SweepDone(ctx, name) // not a sweep's record: leave it
	}
	if apitypes.IsTerminal(rec.Status) {
		return sw.st.SweepDone(ctx, name)
	}
	trials, err := sw.trialStates(ctx, rec, &j)
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
	case j.Limits != nil && j.Limits.Timeout > 0 && sw.jobs.Now().Sub(rec.Started) >= time.Duration(j.Limits.Timeout)*time.Second:
		stop = fmt.Sprintf("limits.timeout of %ds reached", j.Limits.Timeout)
	}
	if stop != "" {
		for _, t := range trials {
			if !apitypes.IsTerminal(t.status) && t.status != apitypes.StatusCancelRequested {
				sw.cancelTrial(ctx, t.row.Job, "sweep "+name+": "+stop)
			}
		}
		if active == 0 {
			return sw.endSweep(ctx, name, stopStatus, stop+"; "+sw.sweepSummary(&j, trials), nil)
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
			sw.cancelTrial(ctx, c.Trial, "sweep "+name+"'s "+c.Reason)
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
		row := store.SweepTrial{Sweep: name, Index: idx, Job: trialName(name, idx), Params: raw, Created: sw.jobs.Now()}
		if err := sw.st.AddSweepTrial(ctx, row); err != nil {
			return err
		}
		if err := sw.createTrial(ctx, rec, &j, row, params); err != nil {
			return sw.failSweep(ctx, name, trials, &j, err)
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
		out, err := sw.bestTrialOutputs(ctx, &j, trials)
		if err != nil {
			return err
		}
		return sw.endSweep(ctx, name, status, sw.sweepSummary(&j, trials), out)
	}
	return sw.sweepProgress(ctx, rec, fmt.Sprintf("%d of %d trials started, %d unfinished", len(trials), total, active)+bestSoFar(&j, trials))
}

// sweepProgress keeps a running sweep's status reason up to date, with a
// write only when it changes.
func (sw *Controller) sweepProgress(ctx context.Context, rec store.Job, reason string) error {
	if rec.StatusReason == reason {
		return nil
	}
	_, err := sw.st.UpdateJob(ctx, rec.Name, func(j *store.Job) (*store.Event, error) {
		if j.Status == apitypes.StatusRunning {
			j.StatusReason = reason
		}
		return nil, nil
	})
	if err == nil {
		sw.jobs.Changed(rec.Name)
	}
	return err
}

// trialName is the job name of trial idx of sweep name, as Azure ML
// names a sweep's child runs.
func trialName(sweepName string, idx int) string { return sweepName + "_" + strconv.Itoa(idx) }

// trialStates reads a sweep's trials with their status and primary
// metric, creating the job of any stored trial that has none yet (the
// server was killed between the two writes).
func (sw *Controller) trialStates(ctx context.Context, rec store.Job, j *spec.Job) ([]trialState, error) {
	rows, err := sw.st.ListSweepTrials(ctx, rec.Name)
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
		sw.mu.Lock()
		e, ended := sw.ended[row.Job]
		sw.mu.Unlock()
		if ended {
			t.status, t.reason, t.values = e.status, e.reason, e.values
			out = append(out, t)
			continue
		}
		tr, err := sw.st.GetJob(ctx, row.Job)
		if errors.Is(err, store.ErrNotFound) {
			if err := sw.createTrial(ctx, rec, j, row, t.params); err != nil {
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
		ms, err := sw.st.ListMetrics(ctx, row.Job, metric)
		if err != nil {
			return nil, err
		}
		t.values = finiteValues(ms)
		if apitypes.IsTerminal(tr.Status) {
			sw.mu.Lock()
			sw.ended[row.Job] = endedTrial{status: t.status, reason: t.reason, values: t.values}
			sw.mu.Unlock()
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
func (sw *Controller) componentTrial(ctx context.Context, j *spec.Job, sub workspace.Submission) (workspace.Submission, error) {
	ref := j.Trial.Ref
	if !strings.HasPrefix(ref, "azureml:") {
		return sub, apperr.Invalid("trial: %q is a file on the client's machine; `ferry job create` reads it and sends the trial inline", ref)
	}
	name, version, err := spec.ParseComponentRef(ref)
	if err != nil {
		return sub, apperr.Invalid("trial: %v", err)
	}
	c, err := sw.jobs.GetComponent(ctx, name, version)
	if err != nil {
		var e *apperr.Error
		if errors.As(err, &e) && e.Code == apperr.CodeNotFound {
			return sub, apperr.NotFound("trial: %s", spec.RegistryMiss(ref, e.Msg))
		}
		return sub, err
	}
	if err := j.UseComponentTrial(c.Spec); err != nil {
		return sub, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := j.Validate(); err != nil {
		return sub, &apperr.Error{Code: apperr.CodeInvalid, Msg: fmt.Sprintf("with the trial of component %s: %v", ref, err), Err: err}
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
func (sw *Controller) createTrial(ctx context.Context, parent store.Job, j *spec.Job, row store.SweepTrial, params sweep.Params) error {
	tj := j.TrialJob(params)
	tj.Name = row.Job
	tj.DisplayName = fmt.Sprintf("%s trial %d", firstOf(j.DisplayName, parent.Name), row.Index)
	if tj.Tags == nil {
		tj.Tags = map[string]string{}
	}
	tj.Tags["ferry.sweep"], tj.Tags["ferry.trial"] = parent.Name, strconv.Itoa(row.Index)
	computeName, err := sw.jobs.JobCompute(ctx, tj)
	if err != nil {
		return err
	}
	specJSON, err := json.Marshal(tj)
	if err != nil {
		return err
	}
	now := sw.jobs.Now()
	rec := store.Job{
		Name: row.Job, DisplayName: tj.DisplayName, ExperimentName: tj.ExperimentName,
		Compute: computeName, Status: apitypes.StatusQueued, Priority: workspace.PriorityOf(tj), CreatedBy: parent.CreatedBy,
		Spec: specJSON, CodeSnapshot: parent.CodeSnapshot, Inputs: parent.Inputs, Environment: parent.Environment,
		Created: now,
	}
	reason := fmt.Sprintf("trial %d of sweep %s (%s); waiting for a free slot on compute %s", row.Index, parent.Name, paramsText(params), computeName)
	_, err = sw.st.CreateJob(ctx, rec, store.Event{Job: row.Job, Time: now, To: apitypes.StatusQueued, Reason: reason})
	if errors.Is(err, store.ErrConflict) {
		return sw.ownTrial(ctx, parent.Name, row)
	}
	if err != nil {
		return err
	}
	sw.jobs.Changed(row.Job)
	sw.jobs.WakeDispatcher()
	return nil
}

// ownTrial checks that the job that has a trial's name is that trial
// (created by an earlier pass), not a job of the user's that happens to be
// named SWEEP_N.
func (sw *Controller) ownTrial(ctx context.Context, sweepName string, row store.SweepTrial) error {
	rec, err := sw.st.GetJob(ctx, row.Job)
	if err != nil {
		return err
	}
	var j spec.Job
	if json.Unmarshal(rec.Spec, &j) == nil && j.Tags["ferry.sweep"] == sweepName && j.Tags["ferry.trial"] == strconv.Itoa(row.Index) {
		return nil
	}
	return apperr.Conflict("trial %d of sweep %s would be job %s, but a job of that name exists already; submit the sweep under another name", row.Index, sweepName, row.Job)
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
func (sw *Controller) cancelTrial(ctx context.Context, job, why string) {
	if _, err := sw.jobs.CancelJob(ctx, sweepRunner(why), job); err != nil && apperr.CodeOf(err) != apperr.CodeConflict {
		sw.log.Error("cancel trial", "job", job, "err", err)
	}
}

// failSweep ends a sweep whose trial could not be created (its compute
// went, say): the trials running go on to their end, none is added.
func (sw *Controller) failSweep(ctx context.Context, name string, trials []trialState, j *spec.Job, cause error) error {
	if apperr.CodeOf(cause) == apperr.CodeInternal {
		return cause // the store's trouble: the next pass tries again
	}
	for _, t := range trials {
		if !apitypes.IsTerminal(t.status) {
			sw.cancelTrial(ctx, t.row.Job, "sweep "+name+" failed")
		}
	}
	return sw.endSweep(ctx, name, apitypes.StatusFailed, "a trial could not be created: "+cause.Error(), nil)
}

// bestTrialOutputs are the outputs of the best trial that completed (by
// the primary metric), which become the sweep's own, as in Azure ML: a
// pipeline step after a sweep step takes them. nil when no completed
// trial logged the metric.
func (sw *Controller) bestTrialOutputs(ctx context.Context, j *spec.Job, trials []trialState) (json.RawMessage, error) {
	for _, t := range rankTrials(j, trials) {
		if t.Objective == nil {
			break
		}
		if t.Status != apitypes.StatusCompleted {
			continue
		}
		rec, err := sw.st.GetJob(ctx, t.Name)
		if err != nil {
			return nil, err
		}
		return rec.Outputs, nil
	}
	return nil, nil
}

// endSweep records the end of a sweep, with the outputs of its best
// trial (nil: none), and stops driving it.
func (sw *Controller) endSweep(ctx context.Context, name, status, reason string, outputs json.RawMessage) error {
	if err := sw.jobs.EndJob(ctx, name, status, reason, outputs); err != nil {
		return err
	}
	return sw.st.SweepDone(ctx, name)
}
