package pipelines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workspace"
)

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
		return nil, apperr.Forbidden("a run token cannot submit jobs")
	}
	p := sub.Spec
	if p == nil {
		return nil, apperr.Invalid("spec: the pipeline job spec is missing")
	}
	if err := p.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := pl.resolveComponents(ctx, p); err != nil {
		return nil, err
	}
	// With every component known, the bindings and inputs are checked
	// against them.
	if err := p.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
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
			return nil, apperr.Invalid("name: %q with step %s makes a job name over 255 characters; use a shorter name", name, st)
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
			return nil, apperr.Invalid("input_snapshots.%s: the pipeline has no data input by that name", key)
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
			return nil, apperr.Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, apperr.NoSpace(err, "job "+name)
	}
	pl.core.Changed(name)
	pl.kickPipelines()
	return pl.core.JobView(created)
}

// unknownCompute is the error for compute c, which step field f names
// and the workspace lacks.
func (pl *Controller) unknownCompute(ctx context.Context, f, c string) error {
	err := pl.core.UnknownCompute(ctx, c)
	var e *apperr.Error
	if !errors.As(err, &e) {
		return err // the computes could not be listed
	}
	return apperr.NotFound("%scompute: %s", f, e.Msg)
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
				return apperr.Invalid("jobs.%s.%s: %q is a file on the client's machine; `ferry job create` reads it and sends the component inline", st, componentField(p.Jobs[st]), ref.Ref)
			}
			continue
		}
		name, version, err := spec.ParseComponentRef(ref.Ref)
		if err != nil {
			return apperr.Invalid("jobs.%s.%s: %v", st, componentField(p.Jobs[st]), err)
		}
		c, err := pl.core.GetComponent(ctx, name, version)
		if err != nil {
			var e *apperr.Error
			if errors.As(err, &e) && e.Code == apperr.CodeNotFound {
				return apperr.NotFound("jobs.%s.%s: %s", st, componentField(p.Jobs[st]), spec.RegistryMiss(ref.Ref, e.Msg))
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

// count is "1 thing" or "n things", for messages.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
