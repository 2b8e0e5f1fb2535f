package pipelines

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/assets"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// stepJob is a step's job as startStep made (or found) it.
type stepJob struct {
	store.Job
	reuseKey string
}

// stepInputs are the inputs of a step's command job: the spec's inputs
// and the snapshots of its data inputs.
type stepInputs struct {
	inputs map[string]spec.Input
	snaps  map[string]string
}

// bindStepInputs resolves what each of the component's inputs gets: the
// step's literal, a pipeline input, another step's output, the step's own
// data, or the component's default. An optional input given nothing is
// left out (and its $[[...]] fragments with it).
func bindStepInputs(p *spec.PipelineJob, snaps map[string]string, n string, comp *spec.Component, states map[string]*stepState) (stepInputs, error) {
	st := p.Jobs[n]
	out := stepInputs{inputs: map[string]spec.Input{}, snaps: map[string]string{}}
	literal := func(k, v string) { out.inputs[k] = spec.Input{Value: &v} }
	data := func(k string, ci spec.ComponentInput, si spec.StepInput, path, snap string) {
		t := si.Type
		if t == "" {
			t = ci.Type
		}
		if t == "" || spec.IsLiteralType(t) {
			t = "uri_folder"
		}
		mode := si.Mode
		if mode == "" {
			mode = ci.Mode
		}
		if !slices.Contains([]string{"ro_mount", "download", "direct"}, mode) {
			mode = ""
		}
		out.inputs[k] = spec.Input{Type: t, Path: path, Mode: mode}
		if snap != "" {
			out.snaps[k] = snap
		}
	}
	for _, k := range slices.Sorted(maps.Keys(comp.Inputs)) {
		ci := comp.Inputs[k]
		si, given := st.Inputs[k]
		switch {
		case !given:
			if ci.Default != nil {
				literal(k, *ci.Default)
			}
		case si.Value != nil:
			literal(k, spec.ExpandParentInputs(*si.Value, func(name string) (string, bool) {
				if pi, ok := p.Inputs[name]; ok && pi.IsLiteral() {
					return *pi.Value, true
				}
				return "", false
			}))
		case si.Binding != nil && si.Binding.Kind == spec.BindParentInput:
			pi, ok := p.Inputs[si.Binding.Name]
			switch {
			case !ok:
			case pi.IsLiteral():
				literal(k, *pi.Value)
			case snaps["inputs."+si.Binding.Name] != "":
				data(k, ci, si, si.Binding.String(), snaps["inputs."+si.Binding.Name])
			case pi.Path != "":
				if si.Type == "" {
					si.Type = pi.Type
				}
				data(k, ci, si, pi.Path, "")
			case ci.Default != nil:
				literal(k, *ci.Default)
			}
		case si.Binding != nil && si.Binding.Kind == spec.BindStepOutput:
			from := states[si.Binding.Step]
			var o apitypes.Outputs
			if from != nil && from.job != nil && len(from.job.Outputs) > 0 {
				if err := json.Unmarshal(from.job.Outputs, &o); err != nil {
					return out, apperr.Invalid("inputs.%s: the outputs of step %s cannot be read: %v", k, si.Binding.Step, err)
				}
			}
			snap := o.Named[si.Binding.Name]
			if snap == "" && p.Jobs[si.Binding.Step].IsSweep() {
				return out, apperr.Invalid("inputs.%s: sweep step %s completed without output %s: its outputs are its best trial's, and no completed trial logged the primary metric or wrote that output", k, si.Binding.Step, si.Binding.Name)
			}
			if snap == "" {
				return out, apperr.Invalid("inputs.%s: step %s completed without its output %s (its command wrote nothing there)", k, si.Binding.Step, si.Binding.Name)
			}
			data(k, ci, si, si.Binding.String(), snap)
		default:
			key := "jobs." + n + ".inputs." + k
			data(k, ci, si, si.Path, snaps[key])
		}
	}
	return out, nil
}

// stepSpec makes the command job of step n.
func stepSpec(rec store.Job, p *spec.PipelineJob, n string, comp *spec.Component, in stepInputs) *spec.Job {
	st := p.Jobs[n]
	command := spec.ExpandOptional(comp.Command, func(k string) bool { _, ok := in.inputs[k]; return ok })
	j := &spec.Job{Type: "command", Name: stepJobName(rec.Name, n), DisplayName: st.DisplayName,
		ExperimentName: rec.ExperimentName, Description: st.Description, Command: command, Code: comp.Code,
		EnvironmentVariables: maps.Clone(comp.EnvironmentVariables), Compute: p.StepCompute(n),
		Inputs: in.inputs, Outputs: map[string]spec.Output{},
		Limits: comp.Limits, Resources: comp.Resources, Distribution: comp.Distribution,
		Tags: map[string]string{"ferry.pipeline": rec.Name, "ferry.step": n}}
	if j.DisplayName == "" {
		j.DisplayName = n
	}
	if j.ExperimentName == "" {
		j.ExperimentName = rec.DisplayName
	}
	for k, v := range st.Tags {
		if k != "ferry.pipeline" && k != "ferry.step" { // the step's own mark stays
			j.Tags[k] = v
		}
	}
	for k, v := range st.EnvironmentVariables {
		if j.EnvironmentVariables == nil {
			j.EnvironmentVariables = map[string]string{}
		}
		j.EnvironmentVariables[k] = v
	}
	if st.Limits != nil {
		j.Limits = st.Limits
	}
	if st.Resources != nil {
		j.Resources = st.Resources
	}
	if st.Distribution != nil {
		j.Distribution = st.Distribution
	}
	if comp.Environment != nil {
		e := *comp.Environment
		j.Environment = &e
	}
	if len(j.Inputs) == 0 {
		j.Inputs = nil
	}
	for k, co := range comp.Outputs {
		t := co.Type
		if !slices.Contains([]string{"uri_folder", "uri_file", "mlflow_model", "custom_model"}, t) {
			t = ""
		}
		mode := co.Mode
		so := st.Outputs[k]
		if so.Mode != "" {
			mode = so.Mode
		}
		if !slices.Contains([]string{"rw_mount", "upload", "direct"}, mode) {
			mode = ""
		}
		j.Outputs[k] = spec.Output{Type: t, Mode: mode, Name: so.Name, Version: so.Version}
	}
	if len(j.Outputs) == 0 {
		j.Outputs = nil
	}
	return j
}

// stepReuseKey identifies what a step runs: its component's digest, its
// command as run, what each input holds (values, and snapshots, which are
// digests of content) and its resolved environment. A step with the key
// of a step that completed may take that step's outputs.
func stepReuseKey(comp *spec.Component, j *spec.Job, snaps map[string]string, env json.RawMessage) string {
	type sweepPart struct {
		Trial            *spec.Trial                 `json:"trial"`
		SearchSpace      map[string]spec.SearchParam `json:"search_space"`
		Objective        *spec.Objective             `json:"objective"`
		Sampling         spec.SamplingAlgorithm      `json:"sampling"`
		EarlyTermination *spec.EarlyTermination      `json:"early_termination,omitempty"`
		Limits           *spec.Limits                `json:"limits,omitempty"`
	}
	var sw *sweepPart // a sweep step: what it searches and how
	if j.Type == "sweep" {
		sw = &sweepPart{j.Trial, j.SearchSpace, j.Objective, j.Sampling(), j.EarlyTermination, j.Limits}
	}
	what := struct {
		Component string                `json:"component"`
		Command   string                `json:"command"`
		Inputs    map[string]spec.Input `json:"inputs,omitempty"`
		Snapshots map[string]string     `json:"snapshots,omitempty"`
		Env       json.RawMessage       `json:"environment,omitempty"`
		Sweep     *sweepPart            `json:"sweep,omitempty"`
	}{assets.ComponentDigest(comp), j.Command, j.Inputs, snaps, env, sw}
	raw, _ := json.Marshal(what) // plain data: cannot fail
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// stepReusable says whether step n, whose job is j, may take the outputs
// of a step that ran the same thing: not when it is to run again
// (force_rerun, is_deterministic: false), nor when it is a sweep whose
// seed the server picks at submit, as its trials would not be those that
// ran (its reuse key holds the seed the file gives, so a seeded sweep
// is reused only with the same seed).
func stepReusable(p *spec.PipelineJob, n string, j *spec.Job) bool {
	return !p.ForceRerun(n) && !j.SeedPicked()
}

// startStep makes step n's job: a new job, or, when an earlier step ran
// the same thing and completed and reuse is not turned off, a job that
// is Completed at once with that step's outputs. It returns the job and
// the name of the job whose outputs were reused ("" when it runs).
func (pl *Controller) startStep(ctx context.Context, rec store.Job, p *spec.PipelineJob, snaps map[string]string, n string, states map[string]*stepState) (stepJob, string, error) {
	comp := p.StepComponent(n)
	if comp == nil {
		return stepJob{}, "", apperr.Invalid("jobs.%s.component: not resolved", n)
	}
	in, err := bindStepInputs(p, snaps, n, comp, states)
	if err != nil {
		return stepJob{}, "", err
	}
	j := stepSpec(rec, p, n, comp, in)
	if p.Jobs[n].IsSweep() {
		sw, err := p.SweepStepJob(n, j, comp)
		if err != nil {
			return stepJob{}, "", &apperr.Error{Code: apperr.CodeInvalid, Msg: fmt.Sprintf("jobs.%s: %v", n, err), Err: err}
		}
		j = sw
	}
	name := j.Name
	env, err := pl.core.ResolveEnvironment(ctx, comp.Environment, comp.EnvironmentSnapshot)
	if err != nil {
		return stepJob{}, "", err
	}
	envJSON, err := json.Marshal(env)
	if err != nil {
		return stepJob{}, "", err
	}
	key := stepReuseKey(comp, j, in.snaps, envJSON)
	if existing, err := pl.st.GetJob(ctx, name); err == nil {
		// Made by a pass that ended (a server killed) before recording
		// it, unless another job took the name first.
		if !isStepOf(existing, rec.Name, n) {
			return stepJob{}, "", apperr.Conflict("a job named %s exists that is not this pipeline's step %s; give the pipeline another name", name, n)
		}
		return stepJob{Job: existing, reuseKey: key}, "", nil
	}
	if stepReusable(p, n, j) {
		if from, err := pl.st.ReusableStep(ctx, key); err == nil {
			made, err := pl.reuseStep(ctx, rec, j, comp, in, envJSON, from)
			if err == nil {
				return stepJob{Job: made, reuseKey: key}, from, nil
			}
			if apperr.CodeOf(err) != apperr.CodeConflict {
				return stepJob{}, "", err
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return stepJob{}, "", err
		}
	}
	owner := auth.Principal{Kind: auth.KindOwner, Subject: rec.CreatedBy}
	_, err = pl.core.SubmitJob(ctx, owner, workspace.Submission{Spec: j, CodeSnapshot: comp.CodeSnapshot, InputSnapshots: in.snaps, EnvironmentSnapshot: comp.EnvironmentSnapshot})
	if err != nil && apperr.CodeOf(err) != apperr.CodeConflict {
		return stepJob{}, "", err
	}
	made, gerr := pl.st.GetJob(ctx, name)
	if gerr != nil {
		if err != nil {
			return stepJob{}, "", err
		}
		return stepJob{}, "", gerr
	}
	if !isStepOf(made, rec.Name, n) {
		return stepJob{}, "", apperr.Conflict("a job named %s exists that is not this pipeline's step %s; give the pipeline another name", name, n)
	}
	return stepJob{Job: made, reuseKey: key}, "", nil
}

// isStepOf says whether a stored job is step n of pipeline, by the tags
// its spec carries.
func isStepOf(j store.Job, pipeline, n string) bool {
	var sp struct {
		Tags map[string]string `json:"tags"`
	}
	return json.Unmarshal(j.Spec, &sp) == nil && sp.Tags["ferry.pipeline"] == pipeline && sp.Tags["ferry.step"] == n
}

// reuseStep makes step j's job Completed at once with the outputs of job
// from, and says so in its status, history and log.
func (pl *Controller) reuseStep(ctx context.Context, rec store.Job, j *spec.Job, comp *spec.Component, in stepInputs, env json.RawMessage, from string) (store.Job, error) {
	orig, err := pl.st.GetJob(ctx, from)
	if err != nil {
		return store.Job{}, err
	}
	why := fmt.Sprintf("reused the outputs of job %s: same component, inputs and environment (force_rerun: true runs it again)", from)
	specJSON, err := json.Marshal(j)
	if err != nil {
		return store.Job{}, err
	}
	inputsJSON, err := json.Marshal(in.snaps)
	if err != nil {
		return store.Job{}, err
	}
	computeName := j.ComputeName()
	if computeName == "" {
		computeName = "local"
	}
	now := pl.core.Now()
	zero := 0
	made := store.Job{Name: j.Name, DisplayName: j.DisplayName, ExperimentName: j.ExperimentName,
		Compute: computeName, Status: apitypes.StatusCompleted, StatusReason: why, Attempt: 1, ExitCode: &zero,
		CreatedBy: rec.CreatedBy, Spec: specJSON, CodeSnapshot: comp.CodeSnapshot, Inputs: inputsJSON,
		Outputs: orig.Outputs, Environment: env, Created: now, Started: now, Ended: now}
	line := []byte("ferry: step " + j.Tags["ferry.step"] + " " + why + "\n")
	created, err := pl.core.CreateEndedJob(ctx, made, store.Event{Job: j.Name, Time: now, To: apitypes.StatusCompleted, Reason: why}, line)
	if err != nil {
		return store.Job{}, err
	}
	return created, nil
}
