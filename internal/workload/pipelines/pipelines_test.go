package pipelines

import (
	"context"
	"log/slog"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

// newHarness is a workspace of one slot with the pipeline loop
// registered.
func newHarness(t *testing.T) (*workloadtest.Harness, *Controller) {
	t.Helper()
	h := workloadtest.New(t, 1)
	pl := New(h.WS, h.Store, slog.New(slog.DiscardHandler))
	Register(h.WS, pl)
	return h, pl
}

const twoSteps = `name: pipe
type: pipeline
jobs:
  a:
    command: echo a > ${{outputs.o}}/f
    outputs: {o: {type: uri_folder}}
  b:
    command: cat ${{inputs.x}}/f
    inputs:
      x: ${{parent.jobs.a.outputs.o}}
`

// woken says whether the loop was asked for a pass, and takes the ask.
func woken(pl *Controller) bool {
	select {
	case <-pl.Wake():
		return true
	default:
		return false
	}
}

// TestPipelineStepsAndCancel: a pass makes the job of the step whose
// inputs exist and none of the one that waits for it; the pipeline's
// view holds its spec and steps (its listed view neither); a cancel of
// the pipeline wakes the loop, cancels the step's job, never makes the
// other's, and ends the pipeline Canceled.
func TestPipelineStepsAndCancel(t *testing.T) {
	ctx := context.Background()
	h, pl := newHarness(t)
	p, err := spec.ParsePipelineJob([]byte(twoSteps), nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := pl.SubmitPipeline(ctx, workloadtest.Owner, Submission{Spec: p})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != apitypes.StatusNotStarted || v.Pipeline == nil || v.Spec != nil {
		t.Fatalf("submitted pipeline: %s, pipeline spec %v, command spec %v; want NotStarted with its pipeline spec only", v.Status, v.Pipeline != nil, v.Spec != nil)
	}
	if !woken(pl) {
		t.Error("a submit did not wake the pipeline loop")
	}
	h.Pass(t, "pipelines")
	j := h.Job(t, "pipe")
	if j.Status != apitypes.StatusRunning || len(j.Steps) != 2 {
		t.Fatalf("pipeline after a pass: %s with steps %+v; want Running with a and b", j.Status, j.Steps)
	}
	if a, b := j.Steps[0], j.Steps[1]; a.Name != "a" || a.Job != "pipe-a" || a.Status != apitypes.StatusQueued ||
		b.Name != "b" || b.Job != "" || b.Status != apitypes.StatusNotStarted || len(b.DependsOn) != 1 || b.DependsOn[0] != "a" {
		t.Errorf("steps %+v; want a's job queued, b waiting for a", j.Steps)
	}
	if step := h.Job(t, "pipe-a"); step.Spec.Tags["ferry.pipeline"] != "pipe" || step.Spec.Tags["ferry.step"] != "a" {
		t.Errorf("step a's job tags %v", step.Spec.Tags)
	}
	listed, err := h.WS.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range listed {
		if l.Name == "pipe" && (l.Pipeline != nil || l.Spec != nil || len(l.Unreadable) > 0) {
			t.Errorf("listed pipeline: pipeline spec %v, command spec %v, unreadable %v; want no spec", l.Pipeline != nil, l.Spec != nil, l.Unreadable)
		}
	}

	if _, err := h.WS.CancelJob(ctx, workloadtest.Owner, "pipe"); err != nil {
		t.Fatal(err)
	}
	if !woken(pl) {
		t.Error("the pipeline's cancel did not wake its loop")
	}
	h.Pass(t, "pipelines")
	h.Pass(t, "pipelines")
	j = h.Job(t, "pipe")
	if j.Status != apitypes.StatusCanceled || j.StatusReason != "canceled by owner" || j.Started == nil || j.Ended == nil {
		t.Fatalf("canceled pipeline: %s %q, started %v, ended %v", j.Status, j.StatusReason, j.Started, j.Ended)
	}
	if a := h.Job(t, "pipe-a"); a.Status != apitypes.StatusCanceled {
		t.Errorf("step a's job %s, want Canceled", a.Status)
	}
	if b := j.Steps[1]; b.Job != "" || b.Status != apitypes.StepCanceled {
		t.Errorf("step b %+v, want canceled without a job", b)
	}
}
