package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunPipelines runs the suite of store.Pipelines. It needs store.Jobs too: a
// pipeline and its steps' jobs are jobs, and whether a step can be reused
// depends on its job's status. open is as for Run.
func RunPipelines[S pipelineStore](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) pipelineStore { return open(t) }, []test[pipelineStore]{
		{"Pipeline/Steps", testPipelineSteps},
		{"Pipeline/Reuse", testPipelineReuse},
	})
}

// pipelineStore is what RunPipelines needs: the steps, and the jobs they
// and their pipelines are.
type pipelineStore interface {
	store.Jobs
	store.Pipelines
}

func pipelineJob(name, status string) store.Job {
	return store.Job{Name: name, Status: status, Spec: json.RawMessage(`{"type":"pipeline"}`), Created: t0}
}

func testPipelineSteps(t *testing.T, s pipelineStore) {
	ctx := context.Background()
	steps := []store.PipelineStep{{Step: "prep"}, {Step: "train"}}
	p, err := s.CreatePipelineJob(ctx, pipelineJob("pipe1", "NotStarted"), store.Event{Time: t0, To: "NotStarted"}, steps)
	if err != nil {
		t.Fatal(err)
	}
	if p.Seq == 0 {
		t.Error("CreatePipelineJob gave no seq")
	}
	if _, err := s.CreatePipelineJob(ctx, pipelineJob("pipe1", "NotStarted"), store.Event{Time: t0}, steps); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second CreatePipelineJob: %v, want ErrConflict", err)
	}
	got, err := s.ListPipelineSteps(ctx, "pipe1")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.PipelineStep{{Pipeline: "pipe1", Step: "prep"}, {Pipeline: "pipe1", Step: "train"}}
	if d := diff(want, got); d != "" {
		t.Errorf("ListPipelineSteps (-want +got):\n%s", d)
	}
	upd := store.PipelineStep{Pipeline: "pipe1", Step: "train", Job: "pipe1-train", ReuseKey: "k", State: "Skipped", Reason: "why"}
	if err := s.UpdatePipelineStep(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdatePipelineStep(ctx, store.PipelineStep{Pipeline: "pipe1", Step: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdatePipelineStep of a missing step: %v, want ErrNotFound", err)
	}
	got, _ = s.ListPipelineSteps(ctx, "pipe1")
	if d := diff(upd, got[1]); d != "" {
		t.Errorf("updated step (-want +got):\n%s", d)
	}
	if none, err := s.ListPipelineSteps(ctx, "nope"); err != nil || len(none) != 0 {
		t.Errorf("ListPipelineSteps of no pipeline = %v, %v; want empty", none, err)
	}
	if _, err := s.CreatePipelineJob(ctx, pipelineJob("pipe2", "Completed"), store.Event{Time: t0}, steps); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(ctx, pipelineJob("plain", "Running"), store.Event{Time: t0}); err != nil {
		t.Fatal(err)
	}
	active, err := s.ActivePipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]string{"pipe1"}, active); d != "" {
		t.Errorf("ActivePipelines (-want +got):\n%s", d)
	}
}

func testPipelineReuse(t *testing.T, s pipelineStore) {
	ctx := context.Background()
	if _, err := s.ReusableStep(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReusableStep with none: %v, want ErrNotFound", err)
	}
	for i, status := range []string{"Completed", "Completed", "Failed"} {
		p := []string{"p1", "p2", "p3"}[i]
		if _, err := s.CreatePipelineJob(ctx, pipelineJob(p, "Running"), store.Event{Time: t0}, []store.PipelineStep{{Step: "a"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateJob(ctx, store.Job{Name: p + "-a", Status: status, Created: t0}, store.Event{Time: t0}); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdatePipelineStep(ctx, store.PipelineStep{Pipeline: p, Step: "a", Job: p + "-a", ReuseKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	job, err := s.ReusableStep(ctx, "k")
	if err != nil || job != "p2-a" {
		t.Errorf("ReusableStep = %q, %v; want the newest completed, p2-a", job, err)
	}
	jobs, err := s.PipelineStepJobs(ctx, "p1")
	if err != nil || len(jobs) != 1 || jobs["p1-a"].Status != "Completed" {
		t.Errorf("PipelineStepJobs(p1) = %+v, %v; want p1-a, Completed", jobs, err)
	}
	if none, err := s.PipelineStepJobs(ctx, "nope"); err != nil || none == nil || len(none) != 0 {
		t.Errorf("PipelineStepJobs of no pipeline = %v, %v; want empty", none, err)
	}
}
