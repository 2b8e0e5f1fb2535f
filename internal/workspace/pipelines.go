package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// PipelineSubmission is a pipeline job to create: its spec, with the
// components that steps name by file already in it (Resolved), and the
// snapshots the client uploaded for its local data inputs, keyed
// "inputs.NAME" (a pipeline input) or "jobs.STEP.inputs.NAME" (a step's).
type PipelineSubmission struct {
	Spec           *spec.PipelineJob
	InputSnapshots map[string]string

	// firing is a schedule's firing, stored with the schedule's record in
	// one transaction (schedules.go); DryRun, Submission's, checks and
	// stores nothing.
	firing *firing
	DryRun bool
}

// stepJobName is the name of a step's job: deterministic, so that a step
// made twice (a server killed between making its job and recording it)
// is made once.
func stepJobName(pipeline, step string) string { return pipeline + "-" + step }

// SubmitPipeline validates and stores a pipeline job; the pipeline loop
// then makes each step's job once its inputs exist.
func (s *Service) SubmitPipeline(ctx context.Context, who auth.Principal, sub PipelineSubmission) (*apitypes.Job, error) {
	if !who.IsOwner() {
		return nil, Forbidden("a run token cannot submit jobs")
	}
	p := sub.Spec
	if p == nil {
		return nil, Invalid("spec: the pipeline job spec is missing")
	}
	if err := p.Validate(); err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := s.resolveComponents(ctx, p); err != nil {
		return nil, err
	}
	// With every component known, the bindings and inputs are checked
	// against them.
	if err := p.Validate(); err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := s.serverlessSteps(ctx, p); err != nil {
		return nil, err
	}
	name := p.Name
	if name == "" {
		name = newJobName()
	}
	steps := slices.Sorted(maps.Keys(p.Jobs))
	for _, st := range steps {
		f := "jobs." + st + "."
		if len(stepJobName(name, st)) > 255 {
			return nil, Invalid("name: %q with step %s makes a job name over 255 characters; use a shorter name", name, st)
		}
		comp := p.StepComponent(st)
		if err := s.checkComponentUploads(comp, f); err != nil {
			return nil, err
		}
		if c := p.StepCompute(st); c != "" {
			if _, err := s.st.GetCompute(ctx, c); errors.Is(err, store.ErrNotFound) {
				e := s.unknownCompute(ctx, c)
				return nil, NotFound("%scompute: %s", f, e.(*Error).Msg)
			} else if err != nil {
				return nil, err
			}
		}
		if _, err := s.resolveEnvironment(ctx, comp.Environment, comp.EnvironmentSnapshot); err != nil {
			return nil, err
		}
	}
	for key, id := range sub.InputSnapshots {
		if !knownInputKey(p, key) {
			return nil, Invalid("input_snapshots.%s: the pipeline has no data input by that name", key)
		}
		if err := s.requireSnapshot(id, key); err != nil {
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
	now := s.now()
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
		return s.jobViewWith(rec, nil)
	case sub.firing != nil:
		f := sub.firing
		created, err = s.st.FireSchedule(ctx, f.schedule, f.occurrence, f.next, rec, first, rows)
	default:
		created, err = s.st.CreatePipelineJob(ctx, rec, first, rows)
	}
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, noSpace(err, "job "+name)
	}
	s.changed(name)
	s.kickPipelines()
	return s.jobViewWith(created, nil)
}

// serverlessSteps reads Azure's compute name serverless (azureml:serverless,
// which Azure's files give as a pipeline's or a step's compute) as no
// compute: such a step runs where a command job without compute: does
// (on the serverless cluster of its resources.instance_type, else on
// local), unless the workspace has a compute of that name.
func (s *Service) serverlessSteps(ctx context.Context, p *spec.PipelineJob) error {
	const name = "serverless"
	isServerless := func(c string) bool { return strings.TrimPrefix(c, "azureml:") == name }
	uses := isServerless(p.Compute) || (p.Settings != nil && isServerless(p.Settings.DefaultCompute))
	for _, st := range p.Jobs {
		uses = uses || isServerless(st.Compute)
	}
	if !uses {
		return nil
	}
	if _, err := s.st.GetCompute(ctx, name); err == nil {
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

// knownInputKey says whether an input snapshot's key names a data input
// of the pipeline or of one of its steps.
func knownInputKey(p *spec.PipelineJob, key string) bool {
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
func (s *Service) resolveComponents(ctx context.Context, p *spec.PipelineJob) error {
	for _, st := range slices.Sorted(maps.Keys(p.Jobs)) {
		ref := p.Jobs[st].Component
		if ref == nil || !ref.IsRegistered() {
			if ref != nil && ref.Resolved == nil {
				return Invalid("jobs.%s.%s: %q is a file on the client's machine; `ferry job create` reads it and sends the component inline", st, componentField(p.Jobs[st]), ref.Ref)
			}
			continue
		}
		name, version, err := spec.ParseComponentRef(ref.Ref)
		if err != nil {
			return Invalid("jobs.%s.%s: %v", st, componentField(p.Jobs[st]), err)
		}
		c, err := s.GetComponent(ctx, name, version)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == CodeNotFound {
				return NotFound("jobs.%s.%s: %s", st, componentField(p.Jobs[st]), spec.RegistryMiss(ref.Ref, e.Msg))
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
func (s *Service) pipelineJobChanged(job string) {
	last, ok := s.pipes.seen(job)
	if !ok {
		return
	}
	if rec, err := s.st.GetJob(context.Background(), job); err != nil || rec.Status != last {
		s.kickPipelines()
	}
}

// kickPipelines asks for a pass of the pipeline loop.
func (s *Service) kickPipelines() {
	select {
	case s.kickPipe <- struct{}{}:
	default:
	}
}

// reconcilePipelines is one pass of the pipeline loop: each pipeline not
// ended is moved on as far as its steps allow. Everything it decides from
// is in the store, so a server started again goes on where the last one
// stopped; a step's job has a fixed name, so it is never made twice.
func (s *Service) reconcilePipelines(ctx context.Context) error {
	names, err := s.st.ActivePipelines(ctx)
	if err != nil {
		return err
	}
	watch := map[string]string{}
	for _, name := range names {
		watch[name] = ""
		if err := s.guard("pipeline "+name, func() error { return s.advancePipeline(ctx, name, watch) }); err != nil {
			s.log.Error("pipeline", "job", name, "err", err)
			if errors.Is(err, errInternal) {
				s.endPipeline(ctx, name, apitypes.StatusFailed, "the pipeline could not be advanced: "+err.Error(), nil)
			}
		}
	}
	s.pipes.set(watch)
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
func (s *Service) advancePipeline(ctx context.Context, name string, watch map[string]string) error {
	rec, err := s.st.GetJob(ctx, name)
	if err != nil {
		return err
	}
	watch[name] = rec.Status
	var p spec.PipelineJob
	if err := json.Unmarshal(rec.Spec, &p); err != nil {
		return s.endPipeline(ctx, name, apitypes.StatusFailed, "its stored spec cannot be read: "+err.Error(), nil)
	}
	snaps := map[string]string{}
	if len(rec.Inputs) > 0 {
		if err := json.Unmarshal(rec.Inputs, &snaps); err != nil {
			return s.endPipeline(ctx, name, apitypes.StatusFailed, "its stored inputs cannot be read: "+err.Error(), nil)
		}
	}
	rows, err := s.st.ListPipelineSteps(ctx, name)
	if err != nil {
		return err
	}
	jobs, err := s.st.PipelineStepJobs(ctx, name)
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
			if err := s.stopStep(ctx, rec, st, canceling, failed); err != nil {
				return err
			}
			continue
		}
		if st.status != "" {
			continue // its job is under way
		}
		if err := s.maybeStartStep(ctx, rec, &p, snaps, n, states); err != nil {
			return err
		}
		if st := states[n]; st.job != nil {
			watch[st.job.Name] = st.job.Status
		}
	}
	return s.settlePipeline(ctx, rec, &p, states, canceling)
}

// stopStep stops a step of a pipeline that is being canceled or failed:
// its job is canceled, or, when it has none, it never gets one.
func (s *Service) stopStep(ctx context.Context, rec store.Job, st *stepState, canceling bool, failed []string) error {
	if st.job == nil {
		why := "not started: the pipeline was canceled"
		if !canceling {
			why = "not started: step " + strings.Join(failed, ", ") + " failed (settings.continue_on_step_failure is false)"
		}
		st.row.State, st.row.Reason = apitypes.StepCanceled, why
		st.status, st.reason = apitypes.StepCanceled, why
		return s.st.UpdatePipelineStep(ctx, st.row)
	}
	if st.status == apitypes.StatusCancelRequested {
		return nil
	}
	who := rec.CancelBy
	if who == "" {
		who = "pipeline " + rec.Name
	}
	_, err := s.CancelJob(ctx, auth.Principal{Kind: auth.KindOwner, Subject: who}, st.job.Name)
	if CodeOf(err) == CodeConflict {
		return nil // it ended meanwhile
	}
	return err
}

// maybeStartStep makes step n's job when every step it depends on has
// completed, or marks it skipped when one of them can no longer.
func (s *Service) maybeStartStep(ctx context.Context, rec store.Job, p *spec.PipelineJob, snaps map[string]string, n string, states map[string]*stepState) error {
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
			return s.st.UpdatePipelineStep(ctx, st.row)
		default:
			return nil // waits for d
		}
	}
	job, reused, err := s.startStep(ctx, rec, p, snaps, n, states)
	if err != nil {
		if CodeOf(err) == CodeInternal {
			return err
		}
		st.row.State, st.row.Reason = apitypes.StepFailed, "could not be submitted: "+err.Error()
		st.status, st.reason = apitypes.StepFailed, st.row.Reason
		return s.st.UpdatePipelineStep(ctx, st.row)
	}
	st.row.Job, st.row.ReuseKey, st.row.ReusedFrom = job.Name, job.reuseKey, reused
	if err := s.st.UpdatePipelineStep(ctx, st.row); err != nil {
		return err
	}
	st.job, st.status, st.reason = &job.Job, job.Status, job.StatusReason
	s.pipes.add(job.Name, job.Status)
	return nil
}

// settlePipeline records what the steps' states make of the pipeline:
// Running once a step has a job, and its end once every step has ended.
func (s *Service) settlePipeline(ctx context.Context, rec store.Job, p *spec.PipelineJob, states map[string]*stepState, canceling bool) error {
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
			return s.pipelineRunning(ctx, rec.Name)
		}
		return nil
	}
	switch {
	case canceling:
		return s.endPipeline(ctx, rec.Name, apitypes.StatusCanceled, "canceled by "+rec.CancelBy, nil)
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
		return s.endPipeline(ctx, rec.Name, apitypes.StatusFailed, why, pipelineOutputs(p, states))
	}
	return s.endPipeline(ctx, rec.Name, apitypes.StatusCompleted, fmt.Sprintf("all %s completed", count(len(states), "step")), pipelineOutputs(p, states))
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

func (s *Service) pipelineRunning(ctx context.Context, name string) error {
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if j.Status != apitypes.StatusNotStarted {
			return nil, nil
		}
		now := s.now()
		j.Status, j.StatusReason, j.Started = apitypes.StatusRunning, "its steps are running", now
		return &store.Event{Job: name, Time: now, From: apitypes.StatusNotStarted, To: apitypes.StatusRunning, Reason: j.StatusReason}, nil
	})
	s.changed(name)
	return err
}

// endPipeline ends a pipeline job with its outputs (nil: none).
func (s *Service) endPipeline(ctx context.Context, name, status, reason string, out *apitypes.Outputs) error {
	completed := false // the outputs it owes a registration are to register
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		completed = false
		if apitypes.IsTerminal(j.Status) {
			return nil, nil
		}
		now := s.now()
		from := j.Status
		j.Status, j.StatusReason, j.Ended = status, reason, now
		if status == apitypes.StatusFailed {
			j.Error = reason
		}
		if j.Started.IsZero() {
			j.Started = now
		}
		if out != nil {
			raw, err := json.Marshal(out)
			if err != nil {
				return nil, err
			}
			j.Outputs = raw
		}
		completed = status == apitypes.StatusCompleted
		j.Outputs = owedOutputs(j.Outputs, j.Spec, completed)
		return &store.Event{Job: name, Time: now, From: from, To: status, Reason: reason}, nil
	})
	if err == nil && completed {
		s.registerOwed(ctx, name)
	}
	s.mu.Lock()
	delete(s.cancelAsked, name) // a cancel of the pipeline is done
	s.mu.Unlock()
	s.changed(name)
	return err
}

// pipelineRun is the pipeline loop's own goroutine: a pass when kicked (a
// pipeline or one of its steps changed) and every second.
func (s *Service) pipelineRun(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	s.loop(ctx, s.kickPipe, tick.C, loopPass{name: "pipelines", run: s.reconcilePipelines})
}

// isPipeline says whether a stored job is a pipeline job's parent: it
// runs on no compute, and its spec says pipeline.
func isPipeline(rec store.Job) bool {
	if rec.Compute != "" {
		return false
	}
	var t struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(rec.Spec, &t) == nil && t.Type == "pipeline"
}

// pipelineView adds a pipeline's spec and steps to the view of its
// parent job.
func (s *Service) pipelineView(ctx context.Context, rec store.Job, v *apitypes.Job) error {
	p := v.Pipeline
	rows, err := s.st.ListPipelineSteps(ctx, rec.Name)
	if err != nil {
		return err
	}
	order := p.StepOrder()
	slices.SortStableFunc(rows, func(a, b store.PipelineStep) int { return order[a.Step] - order[b.Step] })
	jobs, err := s.st.PipelineStepJobs(ctx, rec.Name)
	if err != nil {
		return err
	}
	for _, r := range rows {
		ps := apitypes.PipelineStep{Name: r.Step, Job: r.Job, Status: r.State, Reason: r.Reason, ReusedFrom: r.ReusedFrom,
			Compute: p.StepCompute(r.Step)}
		if ps.Compute == "" {
			ps.Compute = "local"
		}
		if st := p.Jobs[r.Step]; st != nil {
			ps.DependsOn, ps.Sweep = st.Dependencies(), st.IsSweep()
		}
		if j, ok := jobs[r.Job]; ok && r.Job != "" {
			ps.Status, ps.Reason = j.Status, j.StatusReason
			if j.Compute != "" { // a sweep step's job has none: its trials have
				ps.Compute = j.Compute
			}
		}
		if ps.Status == "" {
			ps.Status = apitypes.StatusNotStarted
		}
		v.Steps = append(v.Steps, ps)
	}
	return nil
}
