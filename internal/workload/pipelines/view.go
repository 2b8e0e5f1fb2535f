package pipelines

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// ViewSpec implements workspace.RecordType: a pipeline's view holds its
// spec as a pipeline job's (Pipeline), not a command job's.
func (pl *Controller) ViewSpec(rec store.Job, v *apitypes.Job) error {
	var p spec.PipelineJob
	if err := json.Unmarshal(rec.Spec, &p); err != nil {
		return err
	}
	v.Pipeline = &p
	return nil
}

// Decorate implements workspace.RecordType: a pipeline's view holds its
// steps, in the order of its spec, each with its job's status. A
// pipeline whose spec cannot be read shows none.
func (pl *Controller) Decorate(ctx context.Context, rec store.Job, v *apitypes.Job) error {
	if v.Pipeline == nil {
		return nil
	}
	return pl.pipelineView(ctx, rec, v)
}

// pipelineView adds a pipeline's steps to the view of its parent job,
// whose spec it holds.
func (pl *Controller) pipelineView(ctx context.Context, rec store.Job, v *apitypes.Job) error {
	p := v.Pipeline
	rows, err := pl.st.ListPipelineSteps(ctx, rec.Name)
	if err != nil {
		return err
	}
	order := p.StepOrder()
	slices.SortStableFunc(rows, func(a, b store.PipelineStep) int { return order[a.Step] - order[b.Step] })
	jobs, err := pl.st.PipelineStepJobs(ctx, rec.Name)
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
