package schedules

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/pipelines"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// newHarness is a workspace of one slot with the schedule loop
// registered, and the pipeline workload its pipeline firings go through.
func newHarness(t *testing.T) (*workloadtest.Harness, *Controller) {
	t.Helper()
	h := workloadtest.New(t, 1)
	log := slog.New(slog.DiscardHandler)
	pipes := pipelines.New(h.WS, h.Store, log)
	pipelines.Register(h.WS, pipes)
	sl := New(h.WS, h.Store, pipes, Config{}, log)
	Register(h.WS, sl)
	return h, sl
}

// schedulePass runs one pass of the schedule loop.
func schedulePass(t *testing.T, h *workloadtest.Harness) {
	t.Helper()
	h.Pass(t, "schedules")
}

func hourlySchedule(t *testing.T, name string) *spec.ScheduleFile {
	t.Helper()
	f, err := spec.ParseSchedule([]byte("name: "+name+"\ntrigger: {type: cron, expression: \"0 * * * *\"}\ncreate_job: ./job.yml\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func scheduledJobs(t *testing.T, h *workloadtest.Harness, schedule string) []string {
	t.Helper()
	jobs, err := h.WS.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range jobs {
		if strings.HasPrefix(j.Name, schedule+"-") {
			out = append(out, j.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestScheduleFiringOnTheClock drives a schedule with the service's clock:
// it fires on its occurrences with the schedule's tags, fires the latest
// of those it missed once, fires nothing while disabled nor what it
// missed then, and an update keeps the occurrences it fired.
func TestScheduleFiringOnTheClock(t *testing.T) {
	ctx := context.Background()
	h, s := newHarness(t)
	h.Clock.Advance(30 * time.Minute) // 00:30
	name, when := "${{name}}", "at ${{creation_context.trigger_time}}"
	job := &workspace.Submission{Spec: &spec.Job{Command: "echo ${{inputs.who}} ${{inputs.when}}", Tags: map[string]string{"team": "a"},
		Inputs: map[string]spec.Input{"who": {Value: &name}, "when": {Value: &when}}}}
	sc, err := s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "hourly"), Job: job})
	if err != nil {
		t.Fatal(err)
	}
	// No start_time: it starts now and fires at once, as Azure's do.
	if want := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC); sc.NextFire == nil || !sc.NextFire.Equal(want) {
		t.Fatalf("next firing %v, want %s", sc.NextFire, want)
	}
	pass := func() {
		t.Helper()
		schedulePass(t, h)
	}
	pass()
	h.Clock.Advance(29 * time.Minute) // 00:59
	pass()
	if got, want := scheduledJobs(t, h, "hourly"), []string{"hourly-20260101T003000Z"}; !slices.Equal(got, want) {
		t.Fatalf("jobs %v, want %v: the first at once, and none before 01:00", got, want)
	}
	h.Clock.Advance(2 * time.Minute) // 01:01
	pass()
	pass()
	if got, want := scheduledJobs(t, h, "hourly"), []string{"hourly-20260101T003000Z", "hourly-20260101T010000Z"}; !slices.Equal(got, want) {
		t.Fatalf("jobs %v, want %v", got, want)
	}
	j, err := h.WS.GetJob(ctx, "hourly-20260101T010000Z", false)
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.Tags[TagSchedule] != "hourly" || j.Spec.Tags[TagOccurrence] != "2026-01-01T01:00:00Z" || j.Spec.Tags["team"] != "a" || j.Spec.Tags[TagMissed] != "" {
		t.Errorf("fired job's tags %v", j.Spec.Tags)
	}
	if who, when := *j.Spec.Inputs["who"].Value, *j.Spec.Inputs["when"].Value; who != "hourly-20260101T010000Z" || when != "at 2026-01-01T01:00:00Z" {
		t.Errorf("inputs ${{name}} and ${{creation_context.trigger_time}} became %q and %q", who, when)
	}
	if j.ExperimentName != "hourly" {
		t.Errorf("fired job's experiment %q, want the schedule's name", j.ExperimentName)
	}

	h.Clock.Advance(3*time.Hour + 10*time.Minute) // 04:11: 02:00, 03:00 and 04:00 missed
	pass()
	got := scheduledJobs(t, h, "hourly")
	if want := []string{"hourly-20260101T003000Z", "hourly-20260101T010000Z", "hourly-20260101T040000Z"}; !slices.Equal(got, want) {
		t.Fatalf("after a gap: jobs %v, want %v (the latest missed only)", got, want)
	}
	if j, _ := h.WS.GetJob(ctx, "hourly-20260101T040000Z", false); j.Spec.Tags[TagMissed] != "2" {
		t.Errorf("catch-up job's missed tag %q, want 2", j.Spec.Tags[TagMissed])
	}

	if _, err := s.SetScheduleEnabled(ctx, workloadtest.Owner, "hourly", false); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(2 * time.Hour) // 06:11
	pass()
	if _, err := s.SetScheduleEnabled(ctx, workloadtest.Owner, "hourly", true); err != nil {
		t.Fatal(err)
	}
	pass()
	if got := scheduledJobs(t, h, "hourly"); len(got) != 3 {
		t.Fatalf("disabled, or missed while disabled, it fired: %v", got)
	}
	// An update keeps what it fired: moving start_time back does not
	// fire the occurrences it fired again.
	f := hourlySchedule(t, "hourly")
	f.Trigger["start_time"] = "2026-01-01T00:00:00Z"
	sc, err = s.CreateSchedule(ctx, workloadtest.Owner, Request{File: f, Job: job})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 1, 7, 0, 0, 0, time.UTC); sc.NextFire == nil || !sc.NextFire.Equal(want) || !sc.Enabled {
		t.Errorf("updated schedule: next %v, enabled %v; want %s, enabled", sc.NextFire, sc.Enabled, want)
	}
	h.Clock.Advance(50 * time.Minute) // 07:01
	pass()
	if got := scheduledJobs(t, h, "hourly"); len(got) != 4 || got[3] != "hourly-20260101T070000Z" {
		t.Errorf("after the update: jobs %v, want a fourth at 07:00", got)
	}
}

// TestScheduleCopiesJobAndRefusesBadOnes: create_job: azureml:JOB fires
// copies of that job; a job that cannot be submitted is refused at create
// time, naming create_job's field; a missing job to copy is not found.
func TestScheduleCopiesJobAndRefusesBadOnes(t *testing.T) {
	ctx := context.Background()
	h, s := newHarness(t)
	h.Submit(t, "name: template\ncommand: \"true\"\n")
	if _, err := s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "copy"), CopyJob: "template"}); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(time.Hour)
	schedulePass(t, h)
	if got := scheduledJobs(t, h, "copy"); len(got) != 1 {
		t.Errorf("copy schedule fired %v, want one job", got)
	}
	over := map[string]any{"experiment_name": "copies", "tags": map[string]any{"kind": "copy"}}
	if _, err := s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "copy2"), CopyJob: "template", Overrides: over}); err != nil {
		t.Fatal(err)
	}
	schedulePass(t, h)
	if got := scheduledJobs(t, h, "copy2"); len(got) != 1 {
		t.Fatalf("copy2 fired %v, want one job", got)
	} else if j, _ := h.WS.GetJob(ctx, got[0], false); j.ExperimentName != "copies" || j.Spec.Tags["kind"] != "copy" || j.Spec.Command != "true" {
		t.Errorf("copied job with overrides: experiment %q, tags %v, command %q", j.ExperimentName, j.Spec.Tags, j.Spec.Command)
	}
	_, err := s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "copy3"), CopyJob: "template", Overrides: map[string]any{"code": "./src"}})
	if apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "create_job.code") {
		t.Errorf("overriding a copied job's code: %v, want invalid naming create_job.code", err)
	}
	_, err = s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "gone"), CopyJob: "no-such-job"})
	if apperr.CodeOf(err) != apperr.CodeNotFound || !strings.Contains(err.Error(), "create_job") {
		t.Errorf("copying a missing job: %v, want not found naming create_job", err)
	}
	bad := &workspace.Submission{Spec: &spec.Job{Command: "true", Environment: &spec.Environment{Ref: "azureml:never:1"}}}
	_, err = s.CreateSchedule(ctx, workloadtest.Owner, Request{File: hourlySchedule(t, "bad"), Job: bad})
	if apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "create_job: environment") {
		t.Errorf("a job with a missing environment: %v, want invalid naming create_job: environment", err)
	}
	if _, err := s.GetSchedule(ctx, "bad"); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("the refused schedule was stored: %v", err)
	}
}
