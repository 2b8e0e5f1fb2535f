package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

func hourlySchedule(t *testing.T, name string) *spec.ScheduleFile {
	t.Helper()
	f, err := spec.ParseSchedule([]byte("name: "+name+"\ntrigger: {type: cron, expression: \"0 * * * *\"}\ncreate_job: ./job.yml\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func scheduledJobs(t *testing.T, s *Service, schedule string) []string {
	t.Helper()
	jobs, err := s.ListJobs(context.Background(), store.JobFilter{})
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
	s, clk := newService(t, &fakeTarget{capacity: 1})
	clk.now = time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)
	name, when := "${{name}}", "at ${{creation_context.trigger_time}}"
	job := &Submission{Spec: &spec.Job{Command: "echo ${{inputs.who}} ${{inputs.when}}", Tags: map[string]string{"team": "a"},
		Inputs: map[string]spec.Input{"who": {Value: &name}, "when": {Value: &when}}}}
	sc, err := s.CreateSchedule(ctx, owner, ScheduleRequest{File: hourlySchedule(t, "hourly"), Job: job})
	if err != nil {
		t.Fatal(err)
	}
	// No start_time: it starts now and fires at once, as Azure's do.
	if want := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC); sc.NextFire == nil || !sc.NextFire.Equal(want) {
		t.Fatalf("next firing %v, want %s", sc.NextFire, want)
	}
	pass := func() {
		t.Helper()
		if err := s.reconcileSchedules(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	clk.advance(29 * time.Minute) // 00:59
	pass()
	if got, want := scheduledJobs(t, s, "hourly"), []string{"hourly-20260101T003000Z"}; !slices.Equal(got, want) {
		t.Fatalf("jobs %v, want %v: the first at once, and none before 01:00", got, want)
	}
	clk.advance(2 * time.Minute) // 01:01
	pass()
	pass()
	if got, want := scheduledJobs(t, s, "hourly"), []string{"hourly-20260101T003000Z", "hourly-20260101T010000Z"}; !slices.Equal(got, want) {
		t.Fatalf("jobs %v, want %v", got, want)
	}
	j, err := s.GetJob(ctx, "hourly-20260101T010000Z", false)
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

	clk.advance(3*time.Hour + 10*time.Minute) // 04:11: 02:00, 03:00 and 04:00 missed
	pass()
	got := scheduledJobs(t, s, "hourly")
	if want := []string{"hourly-20260101T003000Z", "hourly-20260101T010000Z", "hourly-20260101T040000Z"}; !slices.Equal(got, want) {
		t.Fatalf("after a gap: jobs %v, want %v (the latest missed only)", got, want)
	}
	if j, _ := s.GetJob(ctx, "hourly-20260101T040000Z", false); j.Spec.Tags[TagMissed] != "2" {
		t.Errorf("catch-up job's missed tag %q, want 2", j.Spec.Tags[TagMissed])
	}

	if _, err := s.SetScheduleEnabled(ctx, owner, "hourly", false); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Hour) // 06:11
	pass()
	if _, err := s.SetScheduleEnabled(ctx, owner, "hourly", true); err != nil {
		t.Fatal(err)
	}
	pass()
	if got := scheduledJobs(t, s, "hourly"); len(got) != 3 {
		t.Fatalf("disabled, or missed while disabled, it fired: %v", got)
	}
	// An update keeps what it fired: moving start_time back does not
	// fire the occurrences it fired again.
	f := hourlySchedule(t, "hourly")
	f.Trigger["start_time"] = "2026-01-01T00:00:00Z"
	sc, err = s.CreateSchedule(ctx, owner, ScheduleRequest{File: f, Job: job})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 1, 7, 0, 0, 0, time.UTC); sc.NextFire == nil || !sc.NextFire.Equal(want) || !sc.Enabled {
		t.Errorf("updated schedule: next %v, enabled %v; want %s, enabled", sc.NextFire, sc.Enabled, want)
	}
	clk.advance(50 * time.Minute) // 07:01
	pass()
	if got := scheduledJobs(t, s, "hourly"); len(got) != 4 || got[3] != "hourly-20260101T070000Z" {
		t.Errorf("after the update: jobs %v, want a fourth at 07:00", got)
	}
}

// TestScheduleCopiesJobAndRefusesBadOnes: create_job: azureml:JOB fires
// copies of that job; a job that cannot be submitted is refused at create
// time, naming create_job's field; a missing job to copy is not found.
func TestScheduleCopiesJobAndRefusesBadOnes(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "template")
	if _, err := s.CreateSchedule(ctx, owner, ScheduleRequest{File: hourlySchedule(t, "copy"), CopyJob: "template"}); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	if err := s.reconcileSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scheduledJobs(t, s, "copy"); len(got) != 1 {
		t.Errorf("copy schedule fired %v, want one job", got)
	}
	over := map[string]any{"experiment_name": "copies", "tags": map[string]any{"kind": "copy"}}
	if _, err := s.CreateSchedule(ctx, owner, ScheduleRequest{File: hourlySchedule(t, "copy2"), CopyJob: "template", Overrides: over}); err != nil {
		t.Fatal(err)
	}
	if err := s.reconcileSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scheduledJobs(t, s, "copy2"); len(got) != 1 {
		t.Fatalf("copy2 fired %v, want one job", got)
	} else if j, _ := s.GetJob(ctx, got[0], false); j.ExperimentName != "copies" || j.Spec.Tags["kind"] != "copy" || j.Spec.Command != "true" {
		t.Errorf("copied job with overrides: experiment %q, tags %v, command %q", j.ExperimentName, j.Spec.Tags, j.Spec.Command)
	}
	_, err := s.CreateSchedule(ctx, owner, ScheduleRequest{File: hourlySchedule(t, "copy3"), CopyJob: "template", Overrides: map[string]any{"code": "./src"}})
	if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), "create_job.code") {
		t.Errorf("overriding a copied job's code: %v, want invalid naming create_job.code", err)
	}
	_, err = s.CreateSchedule(ctx, owner, ScheduleRequest{File: hourlySchedule(t, "gone"), CopyJob: "no-such-job"})
	if CodeOf(err) != CodeNotFound || !strings.Contains(err.Error(), "create_job") {
		t.Errorf("copying a missing job: %v, want not found naming create_job", err)
	}
	bad := &Submission{Spec: &spec.Job{Command: "true", Environment: &spec.Environment{Ref: "azureml:never:1"}}}
	_, err = s.CreateSchedule(ctx, owner, ScheduleRequest{File: hourlySchedule(t, "bad"), Job: bad})
	if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), "create_job: environment") {
		t.Errorf("a job with a missing environment: %v, want invalid naming create_job: environment", err)
	}
	if _, err := s.GetSchedule(ctx, "bad"); CodeOf(err) != CodeNotFound {
		t.Errorf("the refused schedule was stored: %v", err)
	}
}

func TestCheckReferences(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	ps, err := s.CheckReferences(ctx, []apitypes.Reference{
		{Field: "environment", Kind: "environment", Ref: "azureml:nope@latest"},
		{Field: "compute", Kind: "compute", Ref: "azureml:local"},
		{Field: "compute", Kind: "compute", Ref: "azureml:gpu"},
		{Field: "inputs.d.path", Kind: "data", Ref: "azureml:cifar:1"},
		{Field: "inputs.e.path", Kind: "data", Ref: "./local/folder"},
		{Field: "environment", Kind: "environment", Ref: "file:./env.yml"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, p := range ps {
		fields = append(fields, p.Field+" "+p.Ref)
		if p.Message == "" || strings.HasPrefix(p.Message, p.Field+":") {
			t.Errorf("problem %+v: want a message without the field's name in front", p)
		}
	}
	want := []string{"environment azureml:nope@latest", "compute azureml:gpu", "inputs.d.path azureml:cifar:1"}
	if !slices.Equal(fields, want) {
		t.Errorf("problems %v, want %v", fields, want)
	}
	if _, err := s.CheckReferences(ctx, []apitypes.Reference{{Field: "x", Kind: "widget", Ref: "y"}}); CodeOf(err) != CodeInvalid {
		t.Errorf("unknown kind: %v, want invalid", err)
	}
}
