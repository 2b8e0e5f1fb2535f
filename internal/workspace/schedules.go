package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/instance"
	"github.com/ferry-ml/ferry/internal/schedule"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Job schedules: a schedule stores the submission each firing makes (a
// job's spec and the snapshots uploaded once, at create time), and the
// schedule loop submits it through SubmitJob, as the API does, when an
// occurrence comes. The firing's job and the schedule's last fired
// occurrence are written in one transaction (store.FireSchedule), which
// refuses an occurrence at or before the last fired one: a server killed
// at any moment fires each occurrence at most once, and one that was down
// fires only the latest occurrence it missed (schedule.Clock.Due).

// scheduleTick is how often the schedule loop looks for occurrences that
// have come without being woken: firings are at most this late.
const scheduleTick = time.Second

// Tags a fired job carries: its schedule, the occurrence it was fired
// for, and, on a catch-up firing, how many earlier occurrences the server
// missed (it was down) and skipped.
const (
	TagSchedule   = "ferry.schedule"
	TagOccurrence = "ferry.schedule.occurrence"
	TagMissed     = "ferry.schedule.missed"
)

// firing is the occurrence of a schedule a submission fires.
type firing struct {
	schedule         string
	occurrence, next time.Time
}

// ScheduleRequest creates or updates a schedule: its file, and the job
// each firing submits, either Job (as `ferry job create` would submit it,
// with its snapshots uploaded) or CopyJob, a job of the workspace whose
// spec and snapshots are copied (create_job: azureml:JOB).
type ScheduleRequest struct {
	File *spec.ScheduleFile
	Job  *Submission
	// Pipeline is a pipeline job each firing submits, as `ferry job
	// create` would submit it (components read, snapshots uploaded).
	Pipeline *PipelineSubmission
	CopyJob  string
	// Overrides are fields laid over the copied job's (create_job's
	// other fields beside job: azureml:JOB), mapping into mapping.
	Overrides map[string]any
}

// storedSubmission is the Job of a stored schedule: a command or sweep
// job (Spec) or a pipeline job (Pipeline, with InputSnapshots keyed as
// PipelineSubmission's are).
type storedSubmission struct {
	Spec                json.RawMessage   `json:"spec,omitempty"`
	Pipeline            json.RawMessage   `json:"pipeline,omitempty"`
	CodeSnapshot        string            `json:"code_snapshot,omitempty"`
	InputSnapshots      map[string]string `json:"input_snapshots,omitempty"`
	EnvironmentSnapshot string            `json:"environment_snapshot,omitempty"`
}

func (s *Service) scheduleClock() schedule.Clock { return schedule.Clock{Minute: s.cfg.ScheduleMinute} }

// CreateSchedule stores a schedule, or updates the one of that name: its
// file and job are replaced, it keeps its enabled state and the
// occurrences it fired, and its next firing is the trigger's first
// occurrence from now. A new schedule without start_time starts now and
// fires its first job at once, as Azure's does. The job is checked as a
// submission would be.
func (s *Service) CreateSchedule(ctx context.Context, who auth.Principal, req ScheduleRequest) (*apitypes.Schedule, error) {
	if !who.IsOwner() {
		return nil, Forbidden("a run token cannot create schedules")
	}
	f := req.File
	if f == nil {
		return nil, Invalid("spec: the schedule is missing")
	}
	if err := f.Validate(); err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error(), Err: err}
	}
	now := s.now()
	_, hasStart := f.Trigger["start_time"]
	if !hasStart {
		// Azure counts a schedule from its creation, and fires its first
		// job at once; stored, so that an update or a restart counts from
		// the same instant.
		f.Trigger["start_time"] = now.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	t, err := schedule.Trigger(f)
	if err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error(), Err: err}
	}
	var (
		sub    Submission
		pipe   *PipelineSubmission
		stored storedSubmission
	)
	switch {
	case btoi(req.CopyJob != "")+btoi(req.Job != nil)+btoi(req.Pipeline != nil) > 1:
		return nil, Invalid("create_job: give one of a job, a pipeline job or a job to copy")
	case req.CopyJob != "":
		if sub, pipe, err = s.copyJob(ctx, req.CopyJob, req.Overrides); err != nil {
			return nil, err
		}
	case len(req.Overrides) > 0:
		return nil, Invalid("create_job: overrides go with a job to copy (azureml:JOB); the client lays them over a job file itself")
	case req.Job != nil:
		sub = *req.Job
	case req.Pipeline != nil:
		pipe = req.Pipeline
	default:
		return nil, Invalid("create_job: the schedule names no job")
	}
	switch {
	case pipe != nil:
		stored, err = s.checkScheduledPipeline(ctx, who, f.Name, *pipe)
	case sub.Spec == nil:
		return nil, Invalid("create_job: the job spec is missing")
	default:
		stored, err = s.checkScheduledJob(ctx, who, f.Name, sub)
	}
	if err != nil {
		return nil, err
	}
	specJSON, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	jobJSON, err := json.Marshal(stored)
	if err != nil {
		return nil, err
	}
	next := s.scheduleClock().Next(t, now)
	if !hasStart {
		next = t.StartTime
	}
	rec := store.Schedule{
		Name: f.Name, Spec: specJSON, Job: jobJSON, Enabled: true,
		NextFire: next, CreatedBy: who.Subject, Created: now, Updated: now,
	}
	err = s.st.CreateSchedule(ctx, rec)
	if errors.Is(err, store.ErrConflict) {
		rec, err = s.st.UpdateSchedule(ctx, f.Name, func(sc *store.Schedule) error {
			sc.Spec, sc.Job, sc.CreatedBy, sc.Updated = specJSON, jobJSON, who.Subject, now
			sc.NextFire = s.scheduleClock().Next(t, latest(now, sc.LastFired))
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	s.kickScheduleLoop()
	return scheduleView(rec)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkScheduledJob checks sub as SubmitJob would check a firing of it,
// storing nothing, and returns it as the schedule keeps it.
func (s *Service) checkScheduledJob(ctx context.Context, who auth.Principal, name string, sub Submission) (storedSubmission, error) {
	j := sub.Spec.Clone()
	j.Name = firedJobName(name, s.now())
	check := sub
	check.Spec, check.DryRun, check.Create = j, true, nil
	if _, err := s.SubmitJob(ctx, who, check); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return storedSubmission{}, &Error{Code: e.Code, Msg: "create_job: " + e.Msg, Err: err}
		}
		return storedSubmission{}, err
	}
	clean := sub.Spec.Clone()
	clean.Name = "" // each firing names its job
	raw, err := json.Marshal(clean)
	if err != nil {
		return storedSubmission{}, err
	}
	return storedSubmission{Spec: raw, CodeSnapshot: sub.CodeSnapshot, InputSnapshots: sub.InputSnapshots, EnvironmentSnapshot: sub.EnvironmentSnapshot}, nil
}

// checkScheduledPipeline checks sub as SubmitPipeline would check a
// firing of it, storing nothing, and returns it as the schedule keeps
// it: the spec as the client sent it, so that each firing resolves its
// registered components (azureml:NAME@latest) again, as Azure does.
func (s *Service) checkScheduledPipeline(ctx context.Context, who auth.Principal, name string, sub PipelineSubmission) (storedSubmission, error) {
	if sub.Spec == nil {
		return storedSubmission{}, Invalid("create_job: the pipeline job spec is missing")
	}
	clean := *sub.Spec
	clean.Name = "" // each firing names its job
	raw, err := json.Marshal(&clean)
	if err != nil {
		return storedSubmission{}, err
	}
	p, err := spec.DecodePipelineJobJSON(raw)
	if err != nil {
		return storedSubmission{}, &Error{Code: CodeInvalid, Msg: "create_job: " + err.Error(), Err: err}
	}
	p.Name = firedJobName(name, s.now())
	check := PipelineSubmission{Spec: p, InputSnapshots: sub.InputSnapshots, DryRun: true}
	if _, err := s.SubmitPipeline(ctx, who, check); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return storedSubmission{}, &Error{Code: e.Code, Msg: "create_job: " + e.Msg, Err: err}
		}
		return storedSubmission{}, err
	}
	return storedSubmission{Pipeline: raw, InputSnapshots: sub.InputSnapshots}, nil
}

// copyJob is the submission that made job name, for create_job:
// azureml:NAME: its spec and the snapshots it was given (not those the
// workspace looked up for registered data, which a firing looks up
// again). A pipeline job is copied whole, with its components.
func (s *Service) copyJob(ctx context.Context, name string, overrides map[string]any) (Submission, *PipelineSubmission, error) {
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return Submission{}, nil, NotFound("create_job: there is no job %s to copy; `ferry job list` shows the jobs, or name a job file (create_job: ./job.yml)", name)
	}
	if err != nil {
		return Submission{}, nil, err
	}
	if isPipeline(rec) {
		p, err := copyPipeline(rec, overrides)
		return Submission{}, p, err
	}
	sub, err := copyCommandJob(rec, overrides)
	return sub, nil, err
}

// copyPipeline is copyJob for a pipeline job.
func copyPipeline(rec store.Job, overrides map[string]any) (*PipelineSubmission, error) {
	raw := rec.Spec
	if len(overrides) > 0 {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("job %s: stored spec: %w", rec.Name, err)
		}
		var err error
		if raw, err = json.Marshal(spec.MergeFields(m, overrides)); err != nil {
			return nil, err
		}
	}
	p, err := spec.DecodePipelineJobJSON(raw)
	if err != nil {
		if len(overrides) > 0 {
			return nil, Invalid("create_job: pipeline job %s with create_job's fields laid over it: %v", rec.Name, err)
		}
		return nil, fmt.Errorf("job %s: stored spec: %w", rec.Name, err)
	}
	var inputs map[string]string
	if len(rec.Inputs) > 0 {
		if err := json.Unmarshal(rec.Inputs, &inputs); err != nil {
			return nil, fmt.Errorf("job %s: stored inputs: %w", rec.Name, err)
		}
	}
	maps.DeleteFunc(inputs, func(k, _ string) bool { return !knownInputKey(p, k) })
	return &PipelineSubmission{Spec: p, InputSnapshots: inputs}, nil
}

// copyCommandJob is copyJob for a command or sweep job.
func copyCommandJob(rec store.Job, overrides map[string]any) (Submission, error) {
	name := rec.Name
	raw := rec.Spec
	if len(overrides) > 0 {
		if _, ok := overrides["code"]; ok {
			return Submission{}, Invalid("create_job.code: a copied job keeps the code it was given; to change it, write the job's file and name it in create_job.job")
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return Submission{}, fmt.Errorf("job %s: stored spec: %w", name, err)
		}
		var err error
		if raw, err = json.Marshal(spec.MergeFields(m, overrides)); err != nil {
			return Submission{}, err
		}
	}
	j, err := spec.DecodeJobJSON(raw)
	if err != nil {
		if len(overrides) > 0 {
			return Submission{}, Invalid("create_job: job %s with create_job's fields laid over it: %v", name, err)
		}
		return Submission{}, fmt.Errorf("job %s: stored spec: %w", name, err)
	}
	var inputs map[string]string
	if len(rec.Inputs) > 0 {
		if err := json.Unmarshal(rec.Inputs, &inputs); err != nil {
			return Submission{}, fmt.Errorf("job %s: stored inputs: %w", name, err)
		}
	}
	maps.DeleteFunc(inputs, func(k, _ string) bool {
		in, ok := j.Inputs[k]
		return !ok || in.IsLiteral() || spec.IsDataRef(in.Path)
	})
	sub := Submission{Spec: j, CodeSnapshot: rec.CodeSnapshot, InputSnapshots: inputs}
	if j.Environment != nil && j.Environment.Ref == "" && len(rec.Environment) > 0 {
		var es environment.Spec
		if err := json.Unmarshal(rec.Environment, &es); err != nil {
			return Submission{}, fmt.Errorf("job %s: stored environment: %w", name, err)
		}
		sub.EnvironmentSnapshot = es.Context
	}
	return sub, nil
}

// firedJobName is the name of the job an occurrence fires: the schedule's
// name and the occurrence in UTC, so that the name says what fired it.
func firedJobName(schedule string, occurrence time.Time) string {
	return schedule + "-" + occurrence.UTC().Format("20060102T150405Z")
}

// GetSchedule returns one schedule.
func (s *Service) GetSchedule(ctx context.Context, name string) (*apitypes.Schedule, error) {
	rec, err := s.st.GetSchedule(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, NotFound("schedule %s does not exist; `ferry schedule list` shows the schedules", name)
	}
	if err != nil {
		return nil, err
	}
	return scheduleView(rec)
}

// ListSchedules returns every schedule, by name.
func (s *Service) ListSchedules(ctx context.Context) ([]*apitypes.Schedule, error) {
	recs, err := s.st.ListSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*apitypes.Schedule, 0, len(recs))
	for _, rec := range recs {
		v, err := scheduleView(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// SetScheduleEnabled enables or disables a schedule. A schedule enabled
// again fires from its next occurrence after now: what it missed while
// disabled is not fired.
func (s *Service) SetScheduleEnabled(ctx context.Context, who auth.Principal, name string, enabled bool) (*apitypes.Schedule, error) {
	if !who.IsOwner() {
		return nil, Forbidden("a run token cannot change schedules")
	}
	now := s.now()
	rec, err := s.st.UpdateSchedule(ctx, name, func(sc *store.Schedule) error {
		if sc.Enabled == enabled {
			return nil
		}
		sc.Enabled, sc.Updated = enabled, now
		if enabled {
			t, err := storedTrigger(*sc)
			if err != nil {
				return Invalid("schedule %s: %v", name, err)
			}
			sc.NextFire = s.scheduleClock().Next(t, latest(now, sc.LastFired))
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, NotFound("schedule %s does not exist; `ferry schedule list` shows the schedules", name)
	}
	if err != nil {
		return nil, err
	}
	s.kickScheduleLoop()
	return scheduleView(rec)
}

// DeleteSchedule removes a schedule; the jobs it fired stay.
func (s *Service) DeleteSchedule(ctx context.Context, who auth.Principal, name string) error {
	if !who.IsOwner() {
		return Forbidden("a run token cannot delete schedules")
	}
	err := s.st.DeleteSchedule(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return NotFound("schedule %s does not exist; `ferry schedule list` shows the schedules", name)
	}
	return err
}

func storedFile(rec store.Schedule) (*spec.ScheduleFile, error) {
	var f spec.ScheduleFile
	if err := json.Unmarshal(rec.Spec, &f); err != nil {
		return nil, fmt.Errorf("stored schedule file: %w", err)
	}
	return &f, nil
}

func storedTrigger(rec store.Schedule) (instance.Trigger, error) {
	f, err := storedFile(rec)
	if err != nil {
		return instance.Trigger{}, err
	}
	return schedule.Trigger(f)
}

func scheduleView(rec store.Schedule) (*apitypes.Schedule, error) {
	f, err := storedFile(rec)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w", rec.Name, err)
	}
	v := &apitypes.Schedule{
		Name: rec.Name, DisplayName: f.DisplayName, Description: f.Description, Tags: f.Tags,
		Enabled: rec.Enabled, Spec: f, NextFire: timePtr(rec.NextFire), LastFired: timePtr(rec.LastFired),
		LastJob: rec.LastJob, LastError: rec.LastError, Created: rec.Created, Updated: rec.Updated,
	}
	if !rec.Enabled {
		v.NextFire = nil
	}
	if t, err := schedule.Trigger(f); err == nil {
		v.Trigger = t.String()
	} else {
		v.Trigger = "invalid: " + err.Error()
	}
	var sub storedSubmission
	if err := json.Unmarshal(rec.Job, &sub); err == nil && len(sub.Pipeline) > 0 {
		var p spec.PipelineJob
		if json.Unmarshal(sub.Pipeline, &p) == nil {
			v.JobType, v.Compute = "pipeline", p.Compute
			if v.Compute == "" && p.Settings != nil {
				v.Compute = p.Settings.DefaultCompute
			}
			v.Compute = strings.TrimPrefix(v.Compute, "azureml:")
		}
	} else if err == nil {
		var j spec.Job
		if json.Unmarshal(sub.Spec, &j) == nil {
			v.JobType, v.Compute = j.Type, j.ComputeName()
		}
	}
	return v, nil
}

func (s *Service) kickScheduleLoop() {
	select {
	case s.kickSchedules <- struct{}{}:
	default:
	}
}

// reconcileSchedules is one pass of the schedule loop: every enabled
// schedule whose next occurrence has come fires it.
func (s *Service) reconcileSchedules(ctx context.Context) error {
	recs, err := s.st.ListSchedules(ctx)
	if err != nil {
		return err
	}
	now := s.now()
	for _, rec := range recs {
		if !rec.Enabled || rec.NextFire.IsZero() || rec.NextFire.After(now) {
			continue
		}
		if err := s.guard("schedule "+rec.Name, func() error { return s.fireSchedule(ctx, rec, now) }); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error("schedule", "schedule", rec.Name, "err", err)
		}
	}
	return nil
}

// fireSchedule fires the occurrence of rec that has come by now (the
// latest, when the server missed several).
func (s *Service) fireSchedule(ctx context.Context, rec store.Schedule, now time.Time) error {
	t, err := storedTrigger(rec)
	if err != nil {
		return s.scheduleFailed(ctx, rec.Name, time.Time{}, now, time.Time{}, fmt.Sprintf("its trigger can no longer be read: %v", err))
	}
	fr, ok := s.scheduleClock().Due(t, rec.NextFire, now)
	if !ok {
		return nil
	}
	var stored storedSubmission
	if err := json.Unmarshal(rec.Job, &stored); err != nil {
		return s.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, fmt.Sprintf("its stored job can no longer be read: %v", err))
	}
	if len(stored.Pipeline) > 0 {
		return s.firePipeline(ctx, rec, fr, now, stored)
	}
	j, err := spec.DecodeJobJSON(stored.Spec)
	if err != nil {
		return s.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, fmt.Sprintf("its stored job is no longer valid: %v", err))
	}
	j.Name = firedJobName(rec.Name, fr.Occurrence)
	if j.ExperimentName == "" {
		j.ExperimentName = rec.Name // Azure's default for a schedule's jobs
	}
	expand := firedExpander(j.Name, fr)
	for name, in := range j.Inputs {
		if in.IsLiteral() && strings.Contains(*in.Value, "${{") {
			v := expand.Replace(*in.Value)
			in.Value = &v
			j.Inputs[name] = in
		}
	}
	j.Tags = firedTags(j.Tags, rec.Name, fr)
	sub := Submission{
		Spec: j, CodeSnapshot: stored.CodeSnapshot, InputSnapshots: stored.InputSnapshots, EnvironmentSnapshot: stored.EnvironmentSnapshot,
		Create: func(ctx context.Context, job store.Job, first store.Event) (store.Job, error) {
			return s.st.FireSchedule(ctx, rec.Name, fr.Occurrence, fr.Next, job, first, nil)
		},
	}
	owner := auth.Principal{Kind: auth.KindOwner, Subject: rec.CreatedBy}
	job, err := s.SubmitJob(ctx, owner, sub)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, err.Error())
	}
	s.log.Info("schedule fired", "schedule", rec.Name, "occurrence", fr.Occurrence, "job", job.Name, "skipped", fr.Skipped, "next", fr.Next)
	return nil
}

// firedExpander replaces the expressions Azure gives a schedule's job's
// literal inputs: the fired job's name and the occurrence it fires.
func firedExpander(job string, fr schedule.Firing) *strings.Replacer {
	return strings.NewReplacer("${{name}}", job, "${{creation_context.trigger_time}}", fr.Occurrence.UTC().Format(time.RFC3339))
}

// firedTags are a fired job's tags: its own, and the schedule's.
func firedTags(own map[string]string, name string, fr schedule.Firing) map[string]string {
	tags := maps.Clone(own)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagSchedule] = name
	tags[TagOccurrence] = fr.Occurrence.UTC().Format(time.RFC3339)
	if fr.Skipped > 0 {
		tags[TagMissed] = strconv.Itoa(fr.Skipped)
	}
	return tags
}

// firePipeline is fireSchedule for a schedule of a pipeline job: the
// parent job and its steps are stored with the occurrence in one
// transaction, and the pipeline loop makes the steps' jobs, as for a
// pipeline job submitted through the API.
func (s *Service) firePipeline(ctx context.Context, rec store.Schedule, fr schedule.Firing, now time.Time, stored storedSubmission) error {
	p, err := spec.DecodePipelineJobJSON(stored.Pipeline)
	if err != nil {
		return s.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, fmt.Sprintf("its stored pipeline job is no longer valid: %v", err))
	}
	p.Name = firedJobName(rec.Name, fr.Occurrence)
	if p.ExperimentName == "" {
		p.ExperimentName = rec.Name
	}
	expand := firedExpander(p.Name, fr)
	for name, in := range p.Inputs {
		if in.IsLiteral() && strings.Contains(*in.Value, "${{") {
			v := expand.Replace(*in.Value)
			in.Value = &v
			p.Inputs[name] = in
		}
	}
	p.Tags = firedTags(p.Tags, rec.Name, fr)
	sub := PipelineSubmission{Spec: p, InputSnapshots: stored.InputSnapshots,
		firing: &firing{schedule: rec.Name, occurrence: fr.Occurrence, next: fr.Next}}
	owner := auth.Principal{Kind: auth.KindOwner, Subject: rec.CreatedBy}
	job, err := s.SubmitPipeline(ctx, owner, sub)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.scheduleFailed(ctx, rec.Name, fr.Occurrence, now, fr.Next, err.Error())
	}
	s.log.Info("schedule fired", "schedule", rec.Name, "occurrence", fr.Occurrence, "job", job.Name, "skipped", fr.Skipped, "next", fr.Next)
	return nil
}

// scheduleFailed records that occurrence of a schedule made no job, and
// why, and moves it on to next, unless the schedule was disabled or fired
// the occurrence meanwhile (a conflict that is no failure). A zero
// occurrence is a schedule that cannot fire any more: it ends.
func (s *Service) scheduleFailed(ctx context.Context, name string, occurrence, now, next time.Time, why string) error {
	_, err := s.st.UpdateSchedule(ctx, name, func(sc *store.Schedule) error {
		if !sc.Enabled || (!occurrence.IsZero() && !sc.LastFired.IsZero() && !sc.LastFired.Before(occurrence)) {
			return errNoChange
		}
		if !occurrence.IsZero() {
			sc.LastFired, sc.LastJob = occurrence, ""
			why = "occurrence " + occurrence.UTC().Format(time.RFC3339) + " created no job: " + why
		}
		sc.NextFire, sc.LastError, sc.Updated = next, strings.TrimSpace(why), now
		return nil
	})
	if errors.Is(err, errNoChange) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err == nil {
		s.log.Warn("schedule fired no job", "schedule", name, "reason", why)
	}
	return err
}

var errNoChange = errors.New("no change")
