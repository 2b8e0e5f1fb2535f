package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Store is the part of the workspace's store the pipeline workload reads
// and writes: the pipelines and their steps, the steps' jobs, and the
// computes the steps name.
type Store interface {
	store.Pipelines
	store.Jobs
	store.Computes
}

// Core is what the pipeline workload needs of the workspace beyond Jobs:
// the submit of its steps' jobs (command and sweep jobs, as the API
// submits them), the checks of what its steps name, and the end and the
// reuse of its records. *workspace.Service is one.
type Core interface {
	workspace.Jobs
	SubmitJob(ctx context.Context, who auth.Principal, sub workspace.Submission) (*apitypes.Job, error)
	ResolveEnvironment(ctx context.Context, e *spec.Environment, snap string) (*environment.Spec, error)
	RequireSnapshot(id, field string) error
	CheckComponentUploads(c *spec.Component, field string) error
	UnknownCompute(ctx context.Context, name string) error
	EndJobWith(ctx context.Context, name, status, reason string, outputs json.RawMessage, edit func(j *store.Job)) error
	CreateEndedJob(ctx context.Context, rec store.Job, first store.Event, line []byte) (store.Job, error)
}

var _ Core = (*workspace.Service)(nil)

// Controller is the pipeline loop and the pipeline record type (type:
// pipeline): register it with Register. Pipeline jobs are submitted
// through SubmitPipeline (the API's POST /v1/pipeline-jobs, a schedule's
// firing), and are then jobs like any other: GetJob shows their steps,
// a cancel cascades to them.
type Controller struct {
	core Core
	st   Store
	log  *slog.Logger

	wake  chan struct{}
	pipes pipelineSteps // the jobs of pipelines under way
}

var (
	_ workspace.RecordType = (*Controller)(nil)
	_ workspace.Controller = (*Controller)(nil)
	_ workspace.JobWatcher = (*Controller)(nil)
)

// New makes the pipeline loop of a workspace.
func New(core Core, st Store, log *slog.Logger) *Controller {
	return &Controller{core: core, st: st, log: log, wake: make(chan struct{}, 1)}
}

// Registry is where the server registers a workload: the workspace.
type Registry interface {
	RegisterRecordType(typ string, t workspace.RecordType)
	RegisterController(c workspace.Controller)
}

// Register makes pipeline jobs' records c's to show and drive.
func Register(r Registry, c *Controller) {
	r.RegisterRecordType("pipeline", c)
	r.RegisterController(c)
}

// Name implements workspace.Controller.
func (pl *Controller) Name() string { return "pipelines" }

// Interval implements workspace.Controller: a pass every second, besides
// those a pipeline's or a step's change asks for.
func (pl *Controller) Interval() time.Duration { return time.Second }

// Wake implements workspace.Controller.
func (pl *Controller) Wake() <-chan struct{} { return pl.wake }

// Reconcile implements workspace.Controller.
func (pl *Controller) Reconcile(ctx context.Context) error { return pl.reconcilePipelines(ctx) }

// JobChanged implements workspace.JobWatcher.
func (pl *Controller) JobChanged(job string) { pl.pipelineJobChanged(job) }

// pipelineSteps is the pipeline loop's memory: the jobs (parents and
// steps) of the pipelines not ended, each with the status the loop last
// saw, so that a change of status of one of them wakes the loop (and a
// step's log lines do not).
type pipelineSteps struct {
	mu   sync.Mutex
	jobs map[string]string
}

// seen returns the status the loop last saw of job, and whether it
// watches it.
func (ps *pipelineSteps) seen(job string) (string, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st, ok := ps.jobs[job]
	return st, ok
}

func (ps *pipelineSteps) set(jobs map[string]string) {
	ps.mu.Lock()
	ps.jobs = jobs
	ps.mu.Unlock()
}

func (ps *pipelineSteps) add(job, status string) {
	ps.mu.Lock()
	if ps.jobs == nil {
		ps.jobs = map[string]string{}
	}
	ps.jobs[job] = status
	ps.mu.Unlock()
}

// pipelineJobChanged wakes the pipeline loop when job, one it watches,
// is in another status than the loop last saw.
func (pl *Controller) pipelineJobChanged(job string) {
	last, ok := pl.pipes.seen(job)
	if !ok {
		return
	}
	if rec, err := pl.st.GetJob(context.Background(), job); err != nil || rec.Status != last {
		pl.kickPipelines()
	}
}

// kickPipelines asks for a pass of the pipeline loop.
func (pl *Controller) kickPipelines() {
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

// reconcilePipelines is one pass of the pipeline loop: each pipeline not
// ended is moved on as far as its steps allow. Everything it decides from
// is in the store, so a server started again goes on where the last one
// stopped; a step's job has a fixed name, so it is never made twice.
func (pl *Controller) reconcilePipelines(ctx context.Context) error {
	names, err := pl.st.ActivePipelines(ctx)
	if err != nil {
		return err
	}
	watch := map[string]string{}
	for _, name := range names {
		watch[name] = ""
		if err := pl.core.Guard("pipeline "+name, func() error { return pl.advancePipeline(ctx, name, watch) }); err != nil {
			pl.log.Error("pipeline", "job", name, "err", err)
			if workspace.Panicked(err) {
				pl.endPipeline(ctx, name, apitypes.StatusFailed, "the pipeline could not be advanced: "+err.Error(), nil)
			}
		}
	}
	pl.pipes.set(watch)
	return nil
}

// stepState is a step as a pass of the pipeline loop sees it.
type stepState struct {
	row    store.PipelineStep
	job    *store.Job // its job, when it has one
	status string     // its job's status, or the row's state; "" = not made yet
	reason string
}

func (st stepState) ended() bool {
	return st.status == apitypes.StepSkipped || apitypes.IsTerminal(st.status)
}

// advancePipeline moves one pipeline on: makes the steps whose inputs
// exist, skips those that can no longer run, stops the rest when a step
// failed (unless continue_on_step_failure) or a cancel was asked, and ends
// the pipeline when every step has ended.
func (pl *Controller) advancePipeline(ctx context.Context, name string, watch map[string]string) error {
	rec, err := pl.st.GetJob(ctx, name)
	if err != nil {
		return err
	}
	watch[name] = rec.Status
	var p spec.PipelineJob
	if err := json.Unmarshal(rec.Spec, &p); err != nil {
		return pl.endPipeline(ctx, name, apitypes.StatusFailed, "its stored spec cannot be read: "+err.Error(), nil)
	}
	snaps := map[string]string{}
	if len(rec.Inputs) > 0 {
		if err := json.Unmarshal(rec.Inputs, &snaps); err != nil {
			return pl.endPipeline(ctx, name, apitypes.StatusFailed, "its stored inputs cannot be read: "+err.Error(), nil)
		}
	}
	rows, err := pl.st.ListPipelineSteps(ctx, name)
	if err != nil {
		return err
	}
	jobs, err := pl.st.PipelineStepJobs(ctx, name)
	if err != nil {
		return err
	}
	states := map[string]*stepState{}
	for _, r := range rows {
		st := &stepState{row: r, status: r.State, reason: r.Reason}
		if r.Job != "" {
			if j, ok := jobs[r.Job]; ok {
				watch[r.Job] = j.Status
				st.job, st.status, st.reason = &j, j.Status, j.StatusReason
			} else {
				st.status, st.reason = apitypes.StepFailed, "its job "+r.Job+" no longer exists"
			}
		}
		states[r.Step] = st
	}
	canceling := rec.Status == apitypes.StatusCancelRequested
	var failed []string
	for _, n := range slices.Sorted(maps.Keys(states)) {
		if st := states[n]; st.status == apitypes.StatusFailed || (st.status == apitypes.StatusCanceled && !canceling) {
			failed = append(failed, n)
		}
	}
	stopping := canceling || (len(failed) > 0 && !p.ContinueOnStepFailure())
	for _, n := range slices.Sorted(maps.Keys(states)) {
		st := states[n]
		if st.ended() {
			continue
		}
		if stopping {
			if err := pl.stopStep(ctx, rec, st, canceling, failed); err != nil {
				return err
			}
			continue
		}
		if st.status != "" {
			continue // its job is under way
		}
		if err := pl.maybeStartStep(ctx, rec, &p, snaps, n, states); err != nil {
			return err
		}
		if st := states[n]; st.job != nil {
			watch[st.job.Name] = st.job.Status
		}
	}
	return pl.settlePipeline(ctx, rec, &p, states, canceling)
}

// stopStep stops a step of a pipeline that is being canceled or failed:
// its job is canceled, or, when it has none, it never gets one.
func (pl *Controller) stopStep(ctx context.Context, rec store.Job, st *stepState, canceling bool, failed []string) error {
	if st.job == nil {
		why := "not started: the pipeline was canceled"
		if !canceling {
			why = "not started: step " + strings.Join(failed, ", ") + " failed (settings.continue_on_step_failure is false)"
		}
		st.row.State, st.row.Reason = apitypes.StepCanceled, why
		st.status, st.reason = apitypes.StepCanceled, why
		return pl.st.UpdatePipelineStep(ctx, st.row)
	}
	if st.status == apitypes.StatusCancelRequested {
		return nil
	}
	who := rec.CancelBy
	if who == "" {
		who = "pipeline " + rec.Name
	}
	_, err := pl.core.CancelJob(ctx, auth.Principal{Kind: auth.KindOwner, Subject: who}, st.job.Name)
	if apperr.CodeOf(err) == apperr.CodeConflict {
		return nil // it ended meanwhile
	}
	return err
}

// maybeStartStep makes step n's job when every step it depends on has
// completed, or marks it skipped when one of them can no longer.
func (pl *Controller) maybeStartStep(ctx context.Context, rec store.Job, p *spec.PipelineJob, snaps map[string]string, n string, states map[string]*stepState) error {
	st := states[n]
	for _, d := range p.Jobs[n].Dependencies() {
		ds := states[d]
		if ds == nil {
			continue
		}
		switch {
		case ds.status == apitypes.StatusCompleted:
		case ds.ended():
			st.row.State, st.row.Reason = apitypes.StepSkipped, fmt.Sprintf("not started: step %s it takes inputs from did not complete (%s)", d, ds.status)
			st.status, st.reason = apitypes.StepSkipped, st.row.Reason
			return pl.st.UpdatePipelineStep(ctx, st.row)
		default:
			return nil // waits for d
		}
	}
	job, reused, err := pl.startStep(ctx, rec, p, snaps, n, states)
	if err != nil {
		if apperr.CodeOf(err) == apperr.CodeInternal {
			return err
		}
		st.row.State, st.row.Reason = apitypes.StepFailed, "could not be submitted: "+err.Error()
		st.status, st.reason = apitypes.StepFailed, st.row.Reason
		return pl.st.UpdatePipelineStep(ctx, st.row)
	}
	st.row.Job, st.row.ReuseKey, st.row.ReusedFrom = job.Name, job.reuseKey, reused
	if err := pl.st.UpdatePipelineStep(ctx, st.row); err != nil {
		return err
	}
	st.job, st.status, st.reason = &job.Job, job.Status, job.StatusReason
	pl.pipes.add(job.Name, job.Status)
	return nil
}

// settlePipeline records what the steps' states make of the pipeline:
// Running once a step has a job, and its end once every step has ended.
func (pl *Controller) settlePipeline(ctx context.Context, rec store.Job, p *spec.PipelineJob, states map[string]*stepState, canceling bool) error {
	allEnded, anyStarted := true, false
	var notCompleted []string
	for _, n := range slices.Sorted(maps.Keys(states)) {
		st := states[n]
		if st.job != nil {
			anyStarted = true
		}
		if !st.ended() {
			allEnded = false
		} else if st.status != apitypes.StatusCompleted {
			notCompleted = append(notCompleted, n)
		}
	}
	if !allEnded {
		if anyStarted && rec.Status == apitypes.StatusNotStarted {
			return pl.pipelineRunning(ctx, rec.Name)
		}
		return nil
	}
	switch {
	case canceling:
		return pl.endPipeline(ctx, rec.Name, apitypes.StatusCanceled, "canceled by "+rec.CancelBy, nil)
	case len(notCompleted) > 0:
		var parts []string
		for _, n := range notCompleted {
			parts = append(parts, fmt.Sprintf("step %s %s", n, strings.ToLower(states[n].status)))
		}
		first := states[notCompleted[0]]
		why := strings.Join(parts, ", ")
		if first.reason != "" {
			why += " (" + notCompleted[0] + ": " + first.reason + ")"
		}
		return pl.endPipeline(ctx, rec.Name, apitypes.StatusFailed, why, pipelineOutputs(p, states))
	}
	return pl.endPipeline(ctx, rec.Name, apitypes.StatusCompleted, fmt.Sprintf("all %s completed", count(len(states), "step")), pipelineOutputs(p, states))
}

// pipelineOutputs are the pipeline's named outputs: each the output of
// the step bound to it, where that step completed.
func pipelineOutputs(p *spec.PipelineJob, states map[string]*stepState) *apitypes.Outputs {
	out := &apitypes.Outputs{Named: map[string]string{}}
	for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
		st := states[n]
		if st == nil || st.job == nil || st.status != apitypes.StatusCompleted || len(st.job.Outputs) == 0 {
			continue
		}
		var o apitypes.Outputs
		if json.Unmarshal(st.job.Outputs, &o) != nil {
			continue
		}
		for k, so := range p.Jobs[n].Outputs {
			if so.Binding != nil && so.Binding.Kind == spec.BindParentOutput && o.Named[k] != "" {
				out.Named[so.Binding.Name] = o.Named[k]
			}
		}
	}
	return out
}

func (pl *Controller) pipelineRunning(ctx context.Context, name string) error {
	_, err := pl.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if j.Status != apitypes.StatusNotStarted {
			return nil, nil
		}
		now := pl.core.Now()
		j.Status, j.StatusReason, j.Started = apitypes.StatusRunning, "its steps are running", now
		return &store.Event{Job: name, Time: now, From: apitypes.StatusNotStarted, To: apitypes.StatusRunning, Reason: j.StatusReason}, nil
	})
	pl.core.Changed(name)
	return err
}

// endPipeline ends a pipeline job with its outputs (nil: none); a failed
// one's reason is its error too.
func (pl *Controller) endPipeline(ctx context.Context, name, status, reason string, out *apitypes.Outputs) error {
	var raw json.RawMessage
	if out != nil {
		var err error
		if raw, err = json.Marshal(out); err != nil {
			return err
		}
	}
	return pl.core.EndJobWith(ctx, name, status, reason, raw, func(j *store.Job) {
		if status == apitypes.StatusFailed {
			j.Error = reason
		}
		if j.Started.IsZero() {
			j.Started = j.Ended
		}
	})
}

// IsPipeline says whether a stored job is a pipeline job's parent: it
// runs on no compute, and its spec says pipeline.
func IsPipeline(rec store.Job) bool {
	if rec.Compute != "" {
		return false
	}
	var t struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(rec.Spec, &t) == nil && t.Type == "pipeline"
}
