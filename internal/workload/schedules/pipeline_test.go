package schedules

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/pipelines"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

func pipelineSubmission(t *testing.T, doc string) *pipelines.Submission {
	t.Helper()
	p, err := spec.ParsePipelineJob([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &pipelines.Submission{Spec: p}
}

// TestSchedulePipelineOnTheClock: a schedule of a pipeline job fires its
// parent job with every step stored and the schedule's tags, checks it
// at create time storing nothing, copies a pipeline job
// (create_job: azureml:JOB), and refuses one naming a component the
// workspace lacks.
func TestSchedulePipelineOnTheClock(t *testing.T) {
	ctx := context.Background()
	h, s := newHarness(t)
	h.Clock.Advance(30 * time.Minute) // 00:30
	f := hourlySchedule(t, "pipe")
	f.Trigger["start_time"] = "2026-01-01T01:00:00Z"
	pipe := pipelineSubmission(t, "type: pipeline\ninputs:\n  label: ${{name}}\njobs:\n  a:\n    command: echo ${{inputs.x}}\n    inputs:\n      x: ${{parent.inputs.label}}\n  b:\n    command: \"true\"\n")
	sc, err := s.CreateSchedule(ctx, workloadtest.Owner, Request{File: f, Pipeline: pipe})
	if err != nil {
		t.Fatal(err)
	}
	if sc.JobType != "pipeline" {
		t.Errorf("schedule's job type %q, want pipeline", sc.JobType)
	}
	if got := scheduledJobs(t, h, "pipe"); len(got) != 0 {
		t.Fatalf("creating the schedule stored jobs %v", got)
	}
	h.Clock.Advance(31 * time.Minute) // 01:01
	for range 2 {
		schedulePass(t, h)
	}
	fired := "pipe-20260101T010000Z"
	if got := scheduledJobs(t, h, "pipe"); !slices.Contains(got, fired) {
		t.Fatalf("jobs %v, want the pipeline %s", got, fired)
	}
	steps, err := h.Store.ListPipelineSteps(ctx, fired)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Step != "a" || steps[1].Step != "b" {
		t.Errorf("steps of the fired pipeline %+v, want a and b", steps)
	}
	j, err := h.WS.GetJob(ctx, fired, false)
	if err != nil {
		t.Fatal(err)
	}
	if j.Pipeline == nil || j.Pipeline.Tags[TagSchedule] != "pipe" || j.Pipeline.Tags[TagOccurrence] != "2026-01-01T01:00:00Z" {
		t.Fatalf("fired pipeline %+v: want the schedule's tags", j.Pipeline)
	}
	if v := j.Pipeline.Inputs["label"].Value; v == nil || *v != fired {
		t.Errorf("pipeline input ${{name}} became %v, want %s", v, fired)
	}
	if sc, _ := s.GetSchedule(ctx, "pipe"); sc.LastJob != fired || sc.LastError != "" {
		t.Errorf("schedule after firing: last job %q, error %q", sc.LastJob, sc.LastError)
	}

	if _, err := s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "copied"), CopyJob: fired}); err != nil {
		t.Fatal(err)
	}
	schedulePass(t, h)
	got := scheduledJobs(t, h, "copied")
	if len(got) == 0 {
		t.Fatal("the copy of a pipeline job fired nothing")
	}
	if steps, err := h.Store.ListPipelineSteps(ctx, got[0]); err != nil || len(steps) != 2 {
		t.Errorf("steps of the copied pipeline %s: %+v, %v", got[0], steps, err)
	}

	bad := pipelineSubmission(t, "type: pipeline\njobs:\n  a:\n    component: azureml:never:1\n")
	_, err = s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "bad"), Pipeline: bad})
	if apperr.CodeOf(err) != apperr.CodeNotFound || !strings.Contains(err.Error(), "create_job: jobs.a.component") {
		t.Errorf("a pipeline naming a missing component: %v, want not found naming create_job: jobs.a.component", err)
	}
	if _, err := s.GetSchedule(ctx, "bad"); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("the refused schedule was stored: %v", err)
	}
}
