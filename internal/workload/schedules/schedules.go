package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/instance"
	"github.com/ferry-ml/ferry/internal/schedule"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/pipelines"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Config is how the schedule loop is set up.
type Config struct {
	// Minute is how long the minute of job schedules' minute recurrences
	// lasts: 0 means a minute; tests of the server shorten it to see a
	// schedule fire every few seconds of real time.
	Minute time.Duration
}

// Store is the part of the workspace's store the schedule loop reads and
// writes: the schedules, which store the jobs they fire (FireSchedule),
// and the jobs a schedule copies.
type Store interface {
	store.Schedules
	store.Jobs
}

// Core is what the schedule loop needs of the workspace: its firings of
// command and sweep jobs are submitted as the API submits them. The
// workspace's *Service is one.
type Core interface {
	workspace.Jobs
	SubmitJob(ctx context.Context, who auth.Principal, sub workspace.Submission) (*apitypes.Job, error)
}

var _ Core = (*workspace.Service)(nil)

// Pipelines is how the schedule loop submits the pipeline jobs it fires:
// the pipeline workload's *pipelines.Controller.
type Pipelines interface {
	SubmitPipeline(ctx context.Context, who auth.Principal, sub pipelines.Submission) (*apitypes.Job, error)
}

var _ Pipelines = (*pipelines.Controller)(nil)

// Controller is the schedule loop and the schedules' operations: register
// it with Register.
type Controller struct {
	core  Core
	st    Store
	pipes Pipelines
	cfg   Config
	log   *slog.Logger
	wake  chan struct{}
}

var _ workspace.Controller = (*Controller)(nil)

// New makes the schedule loop of a workspace, which fires pipeline jobs
// through pipes.
func New(core Core, st Store, pipes Pipelines, cfg Config, log *slog.Logger) *Controller {
	return &Controller{core: core, st: st, pipes: pipes, cfg: cfg, log: log, wake: make(chan struct{}, 1)}
}

// Registry is where the server registers a workload: the workspace.
type Registry interface {
	RegisterController(c workspace.Controller)
}

// Register makes c's loop one that Run runs.
func Register(r Registry, c *Controller) { r.RegisterController(c) }

// Name implements workspace.Controller.
func (sl *Controller) Name() string { return "schedules" }

// Interval implements workspace.Controller.
func (sl *Controller) Interval() time.Duration { return scheduleTick }

// Wake implements workspace.Controller.
func (sl *Controller) Wake() <-chan struct{} { return sl.wake }

// Reconcile implements workspace.Controller.
func (sl *Controller) Reconcile(ctx context.Context) error { return sl.reconcileSchedules(ctx) }

// Request creates or updates a schedule: its file, and the job each
// firing submits, either Job (as `ferry job create` would submit it, with
// its snapshots uploaded) or CopyJob, a job of the workspace whose spec
// and snapshots are copied (create_job: azureml:JOB).
type Request struct {
	File *spec.ScheduleFile
	Job  *workspace.Submission
	// Pipeline is a pipeline job each firing submits, as `ferry job
	// create` would submit it (components read, snapshots uploaded).
	Pipeline *pipelines.Submission
	CopyJob  string
	// Overrides are fields laid over the copied job's (create_job's
	// other fields beside job: azureml:JOB), mapping into mapping.
	Overrides map[string]any
}

// storedSubmission is the Job of a stored schedule: a command or sweep
// job (Spec) or a pipeline job (Pipeline, with InputSnapshots keyed as
// pipelines.Submission's are).
type storedSubmission struct {
	Spec                json.RawMessage   `json:"spec,omitempty"`
	Pipeline            json.RawMessage   `json:"pipeline,omitempty"`
	CodeSnapshot        string            `json:"code_snapshot,omitempty"`
	InputSnapshots      map[string]string `json:"input_snapshots,omitempty"`
	EnvironmentSnapshot string            `json:"environment_snapshot,omitempty"`
}

func (sl *Controller) scheduleClock() schedule.Clock { return schedule.Clock{Minute: sl.cfg.Minute} }

// CreateSchedule stores a schedule, or updates the one of that name: its
// file and job are replaced, it keeps its enabled state and the
// occurrences it fired, and its next firing is the trigger's first
// occurrence from now. A new schedule without start_time starts now and
// fires its first job at once, as Azure's does. The job is checked as a
// submission would be.
func (sl *Controller) CreateSchedule(ctx context.Context, who auth.Principal, req Request) (*apitypes.Schedule, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot create schedules")
	}
	f := req.File
	if f == nil {
		return nil, apperr.Invalid("spec: the schedule is missing")
	}
	if err := f.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	now := sl.core.Now()
	_, hasStart := f.Trigger["start_time"]
	if !hasStart {
		// Azure counts a schedule from its creation, and fires its first
		// job at once; stored, so that an update or a restart counts from
		// the same instant.
		f.Trigger["start_time"] = now.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	t, err := schedule.Trigger(f)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	var (
		sub    workspace.Submission
		pipe   *pipelines.Submission
		stored storedSubmission
	)
	switch {
	case btoi(req.CopyJob != "")+btoi(req.Job != nil)+btoi(req.Pipeline != nil) > 1:
		return nil, apperr.Invalid("create_job: give one of a job, a pipeline job or a job to copy")
	case req.CopyJob != "":
		if sub, pipe, err = sl.copyJob(ctx, req.CopyJob, req.Overrides); err != nil {
			return nil, err
		}
	case len(req.Overrides) > 0:
		return nil, apperr.Invalid("create_job: overrides go with a job to copy (azureml:JOB); the client lays them over a job file itself")
	case req.Job != nil:
		sub = *req.Job
	case req.Pipeline != nil:
		pipe = req.Pipeline
	default:
		return nil, apperr.Invalid("create_job: the schedule names no job")
	}
	switch {
	case pipe != nil:
		stored, err = sl.checkScheduledPipeline(ctx, who, f.Name, *pipe)
	case sub.Spec == nil:
		return nil, apperr.Invalid("create_job: the job spec is missing")
	default:
		stored, err = sl.checkScheduledJob(ctx, who, f.Name, sub)
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
	next := sl.scheduleClock().Next(t, now)
	if !hasStart {
		next = t.StartTime
	}
	rec := store.Schedule{
		Name: f.Name, Spec: specJSON, Job: jobJSON, Enabled: true,
		NextFire: next, CreatedBy: who.Subject, Created: now, Updated: now,
	}
	err = sl.st.CreateSchedule(ctx, rec)
	if errors.Is(err, store.ErrConflict) {
		rec, err = sl.st.UpdateSchedule(ctx, f.Name, func(sc *store.Schedule) error {
			sc.Spec, sc.Job, sc.CreatedBy, sc.Updated = specJSON, jobJSON, who.Subject, now
			sc.NextFire = sl.scheduleClock().Next(t, latest(now, sc.LastFired))
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	sl.kickScheduleLoop()
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
func (sl *Controller) checkScheduledJob(ctx context.Context, who auth.Principal, name string, sub workspace.Submission) (storedSubmission, error) {
	j := sub.Spec.Clone()
	j.Name = firedJobName(name, sl.core.Now())
	check := sub
	check.Spec, check.DryRun, check.Create = j, true, nil
	if _, err := sl.core.SubmitJob(ctx, who, check); err != nil {
		var e *apperr.Error
		if errors.As(err, &e) {
			return storedSubmission{}, &apperr.Error{Code: e.Code, Msg: "create_job: " + e.Msg, Err: err}
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
func (sl *Controller) checkScheduledPipeline(ctx context.Context, who auth.Principal, name string, sub pipelines.Submission) (storedSubmission, error) {
	if sub.Spec == nil {
		return storedSubmission{}, apperr.Invalid("create_job: the pipeline job spec is missing")
	}
	clean := *sub.Spec
	clean.Name = "" // each firing names its job
	raw, err := json.Marshal(&clean)
	if err != nil {
		return storedSubmission{}, err
	}
	p, err := spec.DecodePipelineJobJSON(raw)
	if err != nil {
		return storedSubmission{}, &apperr.Error{Code: apperr.CodeInvalid, Msg: "create_job: " + err.Error(), Err: err}
	}
	p.Name = firedJobName(name, sl.core.Now())
	check := pipelines.Submission{Spec: p, InputSnapshots: sub.InputSnapshots, DryRun: true}
	if _, err := sl.pipes.SubmitPipeline(ctx, who, check); err != nil {
		var e *apperr.Error
		if errors.As(err, &e) {
			return storedSubmission{}, &apperr.Error{Code: e.Code, Msg: "create_job: " + e.Msg, Err: err}
		}
		return storedSubmission{}, err
	}
	return storedSubmission{Pipeline: raw, InputSnapshots: sub.InputSnapshots}, nil
}

// copyJob is the submission that made job name, for create_job:
// azureml:NAME: its spec and the snapshots it was given (not those the
// workspace looked up for registered data, which a firing looks up
// again). A pipeline job is copied whole, with its components.
func (sl *Controller) copyJob(ctx context.Context, name string, overrides map[string]any) (workspace.Submission, *pipelines.Submission, error) {
	rec, err := sl.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return workspace.Submission{}, nil, apperr.NotFound("create_job: there is no job %s to copy; `ferry job list` shows the jobs, or name a job file (create_job: ./job.yml)", name)
	}
	if err != nil {
		return workspace.Submission{}, nil, err
	}
	if pipelines.IsPipeline(rec) {
		p, err := copyPipeline(rec, overrides)
		return workspace.Submission{}, p, err
	}
	sub, err := copyCommandJob(rec, overrides)
	return sub, nil, err
}

// copyPipeline is copyJob for a pipeline job.
func copyPipeline(rec store.Job, overrides map[string]any) (*pipelines.Submission, error) {
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
			return nil, apperr.Invalid("create_job: pipeline job %s with create_job's fields laid over it: %v", rec.Name, err)
		}
		return nil, fmt.Errorf("job %s: stored spec: %w", rec.Name, err)
	}
	var inputs map[string]string
	if len(rec.Inputs) > 0 {
		if err := json.Unmarshal(rec.Inputs, &inputs); err != nil {
			return nil, fmt.Errorf("job %s: stored inputs: %w", rec.Name, err)
		}
	}
	maps.DeleteFunc(inputs, func(k, _ string) bool { return !pipelines.KnownInputKey(p, k) })
	return &pipelines.Submission{Spec: p, InputSnapshots: inputs}, nil
}

// copyCommandJob is copyJob for a command or sweep job.
func copyCommandJob(rec store.Job, overrides map[string]any) (workspace.Submission, error) {
	name := rec.Name
	raw := rec.Spec
	if len(overrides) > 0 {
		if _, ok := overrides["code"]; ok {
			return workspace.Submission{}, apperr.Invalid("create_job.code: a copied job keeps the code it was given; to change it, write the job's file and name it in create_job.job")
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return workspace.Submission{}, fmt.Errorf("job %s: stored spec: %w", name, err)
		}
		var err error
		if raw, err = json.Marshal(spec.MergeFields(m, overrides)); err != nil {
			return workspace.Submission{}, err
		}
	}
	j, err := spec.DecodeJobJSON(raw)
	if err != nil {
		if len(overrides) > 0 {
			return workspace.Submission{}, apperr.Invalid("create_job: job %s with create_job's fields laid over it: %v", name, err)
		}
		return workspace.Submission{}, fmt.Errorf("job %s: stored spec: %w", name, err)
	}
	var inputs map[string]string
	if len(rec.Inputs) > 0 {
		if err := json.Unmarshal(rec.Inputs, &inputs); err != nil {
			return workspace.Submission{}, fmt.Errorf("job %s: stored inputs: %w", name, err)
		}
	}
	maps.DeleteFunc(inputs, func(k, _ string) bool {
		in, ok := j.Inputs[k]
		return !ok || in.IsLiteral() || spec.IsDataRef(in.Path)
	})
	sub := workspace.Submission{Spec: j, CodeSnapshot: rec.CodeSnapshot, InputSnapshots: inputs}
	if j.Environment != nil && j.Environment.Ref == "" && len(rec.Environment) > 0 {
		var es environment.Spec
		if err := json.Unmarshal(rec.Environment, &es); err != nil {
			return workspace.Submission{}, fmt.Errorf("job %s: stored environment: %w", name, err)
		}
		sub.EnvironmentSnapshot = es.Context
	}
	return sub, nil
}

// GetSchedule returns one schedule.
func (sl *Controller) GetSchedule(ctx context.Context, name string) (*apitypes.Schedule, error) {
	rec, err := sl.st.GetSchedule(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("schedule %s does not exist; `ferry schedule list` shows the schedules", name)
	}
	if err != nil {
		return nil, err
	}
	return scheduleView(rec)
}

// ListSchedules returns every schedule, by name.
func (sl *Controller) ListSchedules(ctx context.Context) ([]*apitypes.Schedule, error) {
	recs, err := sl.st.ListSchedules(ctx)
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
func (sl *Controller) SetScheduleEnabled(ctx context.Context, who auth.Principal, name string, enabled bool) (*apitypes.Schedule, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot change schedules")
	}
	now := sl.core.Now()
	rec, err := sl.st.UpdateSchedule(ctx, name, func(sc *store.Schedule) error {
		if sc.Enabled == enabled {
			return nil
		}
		sc.Enabled, sc.Updated = enabled, now
		if enabled {
			t, err := storedTrigger(*sc)
			if err != nil {
				return apperr.Invalid("schedule %s: %v", name, err)
			}
			sc.NextFire = sl.scheduleClock().Next(t, latest(now, sc.LastFired))
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("schedule %s does not exist; `ferry schedule list` shows the schedules", name)
	}
	if err != nil {
		return nil, err
	}
	sl.kickScheduleLoop()
	return scheduleView(rec)
}

// DeleteSchedule removes a schedule; the jobs it fired stay.
func (sl *Controller) DeleteSchedule(ctx context.Context, who auth.Principal, name string) error {
	if !who.IsOwner() {
		return apperr.Forbidden("a run token cannot delete schedules")
	}
	err := sl.st.DeleteSchedule(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return apperr.NotFound("schedule %s does not exist; `ferry schedule list` shows the schedules", name)
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

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
