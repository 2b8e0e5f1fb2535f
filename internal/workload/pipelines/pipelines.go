package pipelines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
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

// Submission is a pipeline job to create: its spec, with the components
// that steps name by file already in it (Resolved), and the snapshots the
// client uploaded for its local data inputs, keyed "inputs.NAME" (a
// pipeline input) or "jobs.STEP.inputs.NAME" (a step's).
type Submission struct {
	Spec           *spec.PipelineJob
	InputSnapshots map[string]string

	// DryRun checks the submission as SubmitPipeline would and stores
	// nothing.
	DryRun bool
	// Create, when set, stores the parent job's record with its steps in
	// place of the store's CreatePipelineJob: a schedule's firing stores
	// them with the schedule's record in one transaction.
	Create func(ctx context.Context, rec store.Job, first store.Event, steps []store.PipelineStep) (store.Job, error)
}

// stepJobName is the name of a step's job: deterministic, so that a step
// made twice (a server killed between making its job and recording it)
// is made once.
func stepJobName(pipeline, step string) string { return pipeline + "-" + step }

// SubmitPipeline validates and stores a pipeline job; the pipeline loop
// then makes each step's job once its inputs exist.
func (pl *Controller) SubmitPipeline(ctx context.Context, who auth.Principal, sub Submission) (*apitypes.Job, error) {
	if !who.IsOwner() {
		return nil, workspace.Forbidden("a run token cannot submit jobs")
	}
	p := sub.Spec
	if p == nil {
		return nil, workspace.Invalid("spec: the pipeline job spec is missing")
	}
	if err := p.Validate(); err != nil {
		return nil, &workspace.Error{Code: workspace.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := pl.resolveComponents(ctx, p); err != nil {
		return nil, err
	}
	// With every component known, the bindings and inputs are checked
	// against them.
	if err := p.Validate(); err != nil {
		return nil, &workspace.Error{Code: workspace.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := pl.serverlessSteps(ctx, p); err != nil {
		return nil, err
	}
	name := p.Name
	if name == "" {
		name = workspace.NewJobName()
	}
	steps := slices.Sorted(maps.Keys(p.Jobs))
	for _, st := range steps {
		f := "jobs." + st + "."
		if len(stepJobName(name, st)) > 255 {
			return nil, workspace.Invalid("name: %q with step %s makes a job name over 255 characters; use a shorter name", name, st)
		}
		comp := p.StepComponent(st)
		if err := pl.core.CheckComponentUploads(comp, f); err != nil {
			return nil, err
		}
		if c := p.StepCompute(st); c != "" {
			if _, err := pl.st.GetCompute(ctx, c); errors.Is(err, store.ErrNotFound) {
				return nil, pl.unknownCompute(ctx, f, c)
			} else if err != nil {
				return nil, err
			}
		}
		if _, err := pl.core.ResolveEnvironment(ctx, comp.Environment, comp.EnvironmentSnapshot); err != nil {
			return nil, err
		}
	}
	for key, id := range sub.InputSnapshots {
		if !KnownInputKey(p, key) {
			return nil, workspace.Invalid("input_snapshots.%s: the pipeline has no data input by that name", key)
		}
		if err := pl.core.RequireSnapshot(id, key); err != nil {
			return nil, err
		}
	}
	specJSON, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	inputsJSON, err := json.Marshal(sub.InputSnapshots)
	if err != nil {
		return nil, err
	}
	now := pl.core.Now()
	rec := store.Job{Name: name, DisplayName: p.DisplayName, ExperimentName: p.ExperimentName,
		Status: apitypes.StatusNotStarted, StatusReason: "waiting for its first steps", CreatedBy: who.Subject,
		Spec: specJSON, Inputs: inputsJSON, Created: now}
	var rows []store.PipelineStep
	for _, st := range steps {
		rows = append(rows, store.PipelineStep{Step: st})
	}
	first := store.Event{Job: name, Time: now, To: apitypes.StatusNotStarted, Reason: fmt.Sprintf("pipeline of %s submitted", count(len(steps), "step"))}
	var created store.Job
	switch {
	case sub.DryRun:
		return pl.core.JobView(rec)
	case sub.Create != nil:
		created, err = sub.Create(ctx, rec, first, rows)
	default:
		created, err = pl.st.CreatePipelineJob(ctx, rec, first, rows)
	}
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, workspace.Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, workspace.NoSpace(err, "job "+name)
	}
	pl.core.Changed(name)
	pl.kickPipelines()
	return pl.core.JobView(created)
}

// unknownCompute is the error for compute c, which step field f names
// and the workspace lacks.
func (pl *Controller) unknownCompute(ctx context.Context, f, c string) error {
	err := pl.core.UnknownCompute(ctx, c)
	var e *workspace.Error
	if !errors.As(err, &e) {
		return err // the computes could not be listed
	}
	return workspace.NotFound("%scompute: %s", f, e.Msg)
}

// serverlessSteps reads Azure's compute name serverless (azureml:serverless,
// which Azure's files give as a pipeline's or a step's compute) as no
// compute: such a step runs where a command job without compute: does
// (on the serverless cluster of its resources.instance_type, else on
// local), unless the workspace has a compute of that name.
func (pl *Controller) serverlessSteps(ctx context.Context, p *spec.PipelineJob) error {
	const name = "serverless"
	isServerless := func(c string) bool { return strings.TrimPrefix(c, "azureml:") == name }
	uses := isServerless(p.Compute) || (p.Settings != nil && isServerless(p.Settings.DefaultCompute))
	for _, st := range p.Jobs {
		uses = uses || isServerless(st.Compute)
	}
	if !uses {
		return nil
	}
	if _, err := pl.st.GetCompute(ctx, name); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if isServerless(p.Compute) {
		p.Compute = ""
	}
	if p.Settings != nil && isServerless(p.Settings.DefaultCompute) {
		p.Settings.DefaultCompute = ""
	}
	for _, st := range p.Jobs {
		if isServerless(st.Compute) {
			st.Compute = ""
		}
	}
	return nil
}

// KnownInputKey says whether an input snapshot's key names a data input
// of the pipeline or of one of its steps.
func KnownInputKey(p *spec.PipelineJob, key string) bool {
	if name, ok := strings.CutPrefix(key, "inputs."); ok {
		in, found := p.Inputs[name]
		return found && !in.IsLiteral()
	}
	rest, ok := strings.CutPrefix(key, "jobs.")
	if !ok {
		return false
	}
	step, input, ok := strings.Cut(rest, ".inputs.")
	if !ok || p.Jobs[step] == nil {
		return false
	}
	in, found := p.Jobs[step].Inputs[input]
	return found && in.Value == nil && in.Binding == nil
}

// resolveComponents puts the registered component that each step names
// (azureml:NAME:VERSION, azureml:NAME@latest) into the pipeline, so the
// stored pipeline says exactly what its steps run.
func (pl *Controller) resolveComponents(ctx context.Context, p *spec.PipelineJob) error {
	for _, st := range slices.Sorted(maps.Keys(p.Jobs)) {
		ref := p.Jobs[st].Component
		if ref == nil || !ref.IsRegistered() {
			if ref != nil && ref.Resolved == nil {
				return workspace.Invalid("jobs.%s.%s: %q is a file on the client's machine; `ferry job create` reads it and sends the component inline", st, componentField(p.Jobs[st]), ref.Ref)
			}
			continue
		}
		name, version, err := spec.ParseComponentRef(ref.Ref)
		if err != nil {
			return workspace.Invalid("jobs.%s.%s: %v", st, componentField(p.Jobs[st]), err)
		}
		c, err := pl.core.GetComponent(ctx, name, version)
		if err != nil {
			var e *workspace.Error
			if errors.As(err, &e) && e.Code == workspace.CodeNotFound {
				return workspace.NotFound("jobs.%s.%s: %s", st, componentField(p.Jobs[st]), spec.RegistryMiss(ref.Ref, e.Msg))
			}
			return err
		}
		ref.Resolved, ref.Digest = c.Spec, c.Hash
	}
	return nil
}

// componentField is the field a step names its component in: trial for
// a sweep step, component for others.
func componentField(st *spec.PipelineStep) string {
	if st.IsSweep() {
		return "trial"
	}
	return "component"
}

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
	if workspace.CodeOf(err) == workspace.CodeConflict {
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
		if workspace.CodeOf(err) == workspace.CodeInternal {
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

// count is "1 thing" or "n things", for messages.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
