package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// The job core and the workloads around it. The Service keeps computes,
// jobs, their dispatch, runs, logs and metrics; what is built from jobs
// (sweeps, pipelines, schedules, batch and online endpoints) lives in a
// package of its own under internal/workload, sees the core through Jobs
// (and, for what only some workloads do, the methods of workloads.go),
// and plugs into it in these ways, all registered by the server before
// Run:
//
//   - a JobType takes the submits of the job type it drives and adds its
//     view to the job's (GetJob);
//   - a RecordType shows the records of a type whose jobs the workload
//     submits through a route of its own (a pipeline's spec and steps);
//   - a Controller is one reconcile loop, with its own state, run by Run
//     on its tick and whenever its wake channel fires;
//   - a controller that is also a JobWatcher hears of every job's change,
//     and one that is also a LogWatcher hears of a log chunk as such;
//   - a controller that is an AssignmentDecorator adds to an attempt's
//     assignment what its runner needs of the workload (a replica's
//     secret).
//
// The core names none of them: a new workload is a package and one
// registration in the server.

// Jobs is what the core offers a workload. The Service is one; every
// method is safe for concurrent use.
type Jobs interface {
	// PrepareJob checks a command job as SubmitJob would (compute,
	// environment, inputs, snapshots) and returns its record, unstored and
	// unnamed.
	PrepareJob(ctx context.Context, sub Submission) (store.Job, error)
	// CreateJob stores rec, a job record a workload made, with its first
	// event, as sub says (sub.Create; ErrDryRun for a dry run). It wakes
	// nobody: the caller calls Changed, and WakeDispatcher for a job that
	// needs a slot.
	CreateJob(ctx context.Context, sub Submission, rec store.Job, first store.Event) (store.Job, error)
	// EndJob ends a job that has no runner (a workload's own record) with
	// status and reason, and outputs when not nil; the outputs it owes a
	// data asset are registered when it completed. A job already ended
	// is left as it is.
	EndJob(ctx context.Context, name, status, reason string, outputs json.RawMessage) error
	// CancelJob asks for a job's end, who being who asked.
	CancelJob(ctx context.Context, who auth.Principal, name string) (*apitypes.Job, error)
	// JobView is a stored job as the API shows it.
	JobView(rec store.Job) (*apitypes.Job, error)
	// JobCompute is the compute a job runs on: its own, or the serverless
	// cluster of its resources.
	JobCompute(ctx context.Context, j *spec.Job) (string, error)
	// GetComponent reads a registered component ("" version: the latest).
	GetComponent(ctx context.Context, name, version string) (*apitypes.Component, error)
	// Changed wakes those waiting on job, and the JobWatchers.
	Changed(job string)
	// WakeDispatcher asks for a dispatch pass: a job was queued.
	WakeDispatcher()
	// Guard runs fn and turns a panic into an error naming what: a bad
	// record costs its own pass, never the server.
	Guard(what string, fn func() error) error
	// Now is the workspace's clock.
	Now() time.Time
}

var _ Jobs = (*Service)(nil)

// JobType is a type of job a workload drives (type: sweep): the core
// validates the job file and hands the submit over.
type JobType interface {
	// Submit stores a valid job of this type, as sub says (a dry run
	// stores nothing).
	Submit(ctx context.Context, who auth.Principal, sub Submission) (*apitypes.Job, error)
	// Decorate adds to v, the job as GetJob shows it, what the type
	// shows of it (a sweep's trials).
	Decorate(ctx context.Context, rec store.Job, v *apitypes.Job) error
}

// Controller is a reconcile loop of a workload. Reconcile is one pass,
// run every Interval and whenever Wake fires (a nil channel never does);
// a pass's error is logged and the loop goes on, a panic costs the pass.
type Controller interface {
	Name() string
	Interval() time.Duration
	Wake() <-chan struct{}
	Reconcile(ctx context.Context) error
}

// JobWatcher is a controller's optional power: it hears of every job's
// change (status, logs, metrics), on the changer's goroutine, so it only
// notes the change or wakes its loop.
type JobWatcher interface {
	JobChanged(job string)
}

// ErrDryRun is what CreateJob answers a dry run with: the submission
// was checked, nothing was stored.
var ErrDryRun = errors.New("dry run")

// RegisterJobType makes typ's submits and views the workload's. Call it
// before Run and before the API serves.
func (s *Service) RegisterJobType(typ string, t JobType) {
	s.jobTypes[typ] = t
}

// RegisterController adds a workload's loop to those Run runs, and to
// the JobWatchers when it is one. Call it before Run and before the API
// serves.
func (s *Service) RegisterController(c Controller) {
	s.controllers = append(s.controllers, c)
	if w, ok := c.(JobWatcher); ok {
		s.watchers = append(s.watchers, w)
	}
}

// PrepareJob implements Jobs.
func (s *Service) PrepareJob(ctx context.Context, sub Submission) (store.Job, error) {
	return s.prepareJob(ctx, sub.Spec, sub)
}

// CreateJob implements Jobs.
func (s *Service) CreateJob(ctx context.Context, sub Submission, rec store.Job, first store.Event) (store.Job, error) {
	return s.createJobRecord(ctx, sub, rec, first)
}

// createJobRecord stores a submitted job: through the submission's own
// Create when it has one (a schedule's firing), not at all for a dry run.
func (s *Service) createJobRecord(ctx context.Context, sub Submission, rec store.Job, first store.Event) (store.Job, error) {
	switch {
	case sub.DryRun:
		return store.Job{}, ErrDryRun
	case sub.Create != nil:
		return sub.Create(ctx, rec, first)
	}
	return s.st.CreateJob(ctx, rec, first)
}

// EndJob implements Jobs.
func (s *Service) EndJob(ctx context.Context, name, status, reason string, outputs json.RawMessage) error {
	return s.EndJobWith(ctx, name, status, reason, outputs, nil)
}

// JobView implements Jobs.
func (s *Service) JobView(rec store.Job) (*apitypes.Job, error) { return s.jobViewWith(rec, nil) }

// JobCompute implements Jobs.
func (s *Service) JobCompute(ctx context.Context, j *spec.Job) (string, error) {
	return s.jobCompute(ctx, j)
}

// GetComponent implements Jobs: it reads the registry (Assets.GetComponent).
func (s *Service) GetComponent(ctx context.Context, name, version string) (*apitypes.Component, error) {
	return s.assets.GetComponent(ctx, name, version)
}

// Changed implements Jobs.
func (s *Service) Changed(job string) { s.changed(job) }

// WakeDispatcher implements Jobs.
func (s *Service) WakeDispatcher() { s.wakeDispatcher() }

// Guard implements Jobs.
func (s *Service) Guard(what string, fn func() error) error { return s.guard(what, fn) }

// Now implements Jobs.
func (s *Service) Now() time.Time { return s.now() }

// NewJobName is a fresh job name, as a job submitted without one gets.
func NewJobName() string { return newJobName() }

// PriorityOf is the priority a job's file gives it (queue_settings).
func PriorityOf(j *spec.Job) int { return priorityOf(j) }

// RunPass runs one pass of one of the core's loops now, as its tick
// would ("dispatch", "lease check", "pools", "engine reconcile") or of a
// registered controller by its Name: for the tests of workloads, which
// drive the loops by hand on a fake clock.
func (s *Service) RunPass(ctx context.Context, name string) error {
	switch name {
	case "dispatch":
		err := s.dispatch(ctx)
		s.handOffs.Wait()
		return err
	case "lease check":
		return s.expireLeases(ctx)
	case "pools":
		return s.reconcilePools(ctx)
	case "engine reconcile":
		return s.reconcileEngines(ctx)
	}
	for _, c := range s.controllers {
		if c.Name() == name {
			return c.Reconcile(ctx)
		}
	}
	return errors.New("no loop named " + name)
}

// RecordType is a type of job record a workload keeps whose spec is not
// a command job's (type: pipeline): its jobs are submitted through the
// workload's own route, never SubmitJob, and run on no compute. The core
// shows such records through it.
type RecordType interface {
	// ViewSpec puts rec's spec into v, in place of Spec; its error is
	// that of a spec that cannot be read, which the view names as
	// unreadable.
	ViewSpec(rec store.Job, v *apitypes.Job) error
	// Decorate adds to v, the job as GetJob shows it, what the type
	// shows of it beside its record (a pipeline's steps).
	Decorate(ctx context.Context, rec store.Job, v *apitypes.Job) error
}

// RegisterRecordType makes t show the records of type typ. Call it before
// Run and before the API serves.
func (s *Service) RegisterRecordType(typ string, t RecordType) {
	s.recordTypes[typ] = t
}

// recordType is the type of rec and its RecordType, when it is a record
// of a registered one: such records run on no compute, so a job that has
// one is read no further.
func (s *Service) recordType(rec store.Job) (string, RecordType) {
	if rec.Compute != "" {
		return "", nil
	}
	var t struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(rec.Spec, &t) != nil {
		return "", nil
	}
	rt, ok := s.recordTypes[t.Type]
	if !ok {
		return "", nil
	}
	return t.Type, rt
}

// decorate adds to v what the workload of the job's type shows of it.
func (s *Service) decorate(ctx context.Context, rec store.Job, v *apitypes.Job) error {
	if _, rt := s.recordType(rec); rt != nil {
		return rt.Decorate(ctx, rec, v)
	}
	if t, ok := s.jobTypes[jobType(v)]; ok {
		return t.Decorate(ctx, rec, v)
	}
	return nil
}

// LogWatcher is a JobWatcher's optional power: it hears of a chunk of an
// attempt's log as such (JobLogged) instead of as a change (JobChanged),
// so that it can pass over the chunks it has no use for. A serving
// replica ships its access log all the time, and a deployment pass on
// every chunk was over a quarter of ferry server's CPU under scoring load
// (bench/endpoint). Like JobChanged, it is called on the appender's
// goroutine, so it only notes the chunk or wakes its loop.
type LogWatcher interface {
	JobLogged(job string, attempt int)
}

// AssignmentDecorator is a controller's optional power: it adds to the
// assignment of an attempt what the job's runner needs of the workload
// that made the job (a replica of an online deployment gets the secret it
// requires of every request). It is called for every attempt's
// assignment, on the assigning goroutine: it is quick, and leaves the
// assignments of other jobs as they are.
type AssignmentDecorator interface {
	DecorateAssignment(job *apitypes.Job, a *apitypes.Assignment)
}

// decorateAssignment lets the controllers that are AssignmentDecorators
// add to a.
func (s *Service) decorateAssignment(v *apitypes.Job, a *apitypes.Assignment) {
	for _, c := range s.controllers {
		if d, ok := c.(AssignmentDecorator); ok {
			d.DecorateAssignment(v, a)
		}
	}
}
