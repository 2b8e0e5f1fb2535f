package workspace

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// What the core offers the pipeline workload (internal/workload/pipelines)
// beyond Jobs: the checks a pipeline's steps pass at submit, the end and
// the reuse of its records, and RecordType, how the core shows a record
// whose spec is not a command job's.

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

// CheckComponentUploads checks that a component's code and environment
// files were uploaded; field prefixes the fields the error names.
func (s *Service) CheckComponentUploads(c *spec.Component, field string) error {
	return s.checkComponentUploads(c, field)
}

// UnknownCompute is the error for compute name, which the workspace does
// not have: not found, naming those it has.
func (s *Service) UnknownCompute(ctx context.Context, name string) error {
	return s.unknownCompute(ctx, name)
}

// Panicked says whether err is Guard's for a panic: a record whose pass
// panicked is one to give up on, not to try again.
func Panicked(err error) bool { return errors.Is(err, errInternal) }

// EndJobWith is EndJob with edit applied to the record in the write that
// ends it, after its status, reason, end and outputs are set (a failed
// pipeline's reason is its error too); nil edits nothing.
func (s *Service) EndJobWith(ctx context.Context, name, status, reason string, outputs json.RawMessage, edit func(j *store.Job)) error {
	completed := false // the outputs it owes a registration are to register
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		completed = false
		if apitypes.IsTerminal(j.Status) {
			return nil, nil
		}
		from, now := j.Status, s.now()
		j.Status, j.StatusReason, j.Ended = status, reason, now
		if len(outputs) > 0 {
			j.Outputs = outputs
		}
		if edit != nil {
			edit(j)
		}
		completed = status == apitypes.StatusCompleted
		j.Outputs = owedOutputs(j.Outputs, j.Spec, completed)
		return &store.Event{Job: name, Time: now, From: from, To: status, Reason: reason}, nil
	})
	if err != nil {
		return err
	}
	if completed {
		s.registerOwed(ctx, name)
	}
	s.mu.Lock()
	delete(s.heartbeats, name)
	delete(s.cancelAsked, name) // a cancel of the job is done
	s.mu.Unlock()
	s.changed(name)
	return nil
}

// CreateEndedJob stores rec, a job that has ended as it is made (a
// pipeline step that takes the outputs of one that ran the same thing),
// with its first event; line is its attempt's log, written first, so the
// job has it once it shows. When it completed, the outputs it owes a data
// asset are registered. A name taken is a conflict.
func (s *Service) CreateEndedJob(ctx context.Context, rec store.Job, first store.Event, line []byte) (store.Job, error) {
	if _, err := s.logs.Append(rec.Name, rec.Attempt, 0, 0, line); err != nil {
		return store.Job{}, noSpace(err, "the log of job "+rec.Name)
	}
	completed := rec.Status == apitypes.StatusCompleted
	rec.Outputs = owedOutputs(rec.Outputs, rec.Spec, completed)
	created, err := s.st.CreateJob(ctx, rec, first)
	if errors.Is(err, store.ErrConflict) {
		return store.Job{}, Conflict("job %s exists", rec.Name)
	}
	if err != nil {
		return store.Job{}, noSpace(err, "job "+rec.Name)
	}
	if completed {
		s.registerOwed(ctx, created.Name)
	}
	s.changed(created.Name)
	return created, nil
}
