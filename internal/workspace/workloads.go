package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// What the core offers workloads beyond Jobs, for what only some of them
// do: refer to snapshots, environments and models as a job does (batch
// and online deployments, pipeline steps), read the logs of the jobs
// they made (a replica's status line), end their own records with more
// than a status (a pipeline's error) or store a job that has already
// ended (a pipeline step reused). Each workload names the methods it
// uses in an interface of its own, which *Service satisfies.

// RequireSnapshot checks that id, the snapshot a request's field names,
// is a SHA-256 that was uploaded; the error names field.
func (s *Service) RequireSnapshot(id, field string) error { return s.requireSnapshot(id, field) }

// ResolveEnvironment turns an environment as a job file gives it (a
// reference, or inline with snap, the snapshot of its files) into what a
// runner builds, as a job's is: a reference is looked up, an inline one
// is checked against its files.
func (s *Service) ResolveEnvironment(ctx context.Context, e *spec.Environment, snap string) (*environment.Spec, error) {
	return s.assets.ResolveEnvironment(ctx, e, snap)
}

// ResolveModel finds the registered model a reference names
// (Assets.ResolveModel): how deployments find their model.
func (s *Service) ResolveModel(ctx context.Context, ref string) (*apitypes.Model, error) {
	return s.assets.ResolveModel(ctx, ref)
}

// HasBlob says whether a blob (a file, or a snapshot's manifest) is
// stored.
func (s *Service) HasBlob(digest string) bool { return s.blobs.Has(digest) }

// ReadSnapshot reads a stored snapshot's manifest, unscoped: for what
// the server itself reads of an upload it checked.
func (s *Service) ReadSnapshot(id string) (*snapshot.Manifest, error) { return s.readSnapshot(id) }

// OpenStoredBlob opens stored content, unscoped (OpenBlob is a caller's
// read, scoped to what its token may read).
func (s *Service) OpenStoredBlob(digest string) (*blob.Reader, error) { return s.openBlob(digest) }

// StoreSnapshot stores a snapshot the server built itself (snapshot.Build
// of a folder of its own, files by digest → path) and returns its id:
// the files not stored yet, then its manifest. what names the snapshot
// in the error of a full disk.
func (s *Service) StoreSnapshot(m *snapshot.Manifest, files map[string]string, what string) (string, error) {
	for digest, path := range files {
		if s.blobs.Has(digest) {
			continue
		}
		if _, _, err := s.blobs.PutFile(path); err != nil {
			return "", apperr.NoSpace(err, what)
		}
	}
	id := m.ID()
	if !s.blobs.Has(id) {
		if _, _, err := s.blobs.Put(bytes.NewReader(m.MarshalCanonical()), id); err != nil {
			return "", apperr.NoSpace(err, what)
		}
	}
	return id, nil
}

// ReadAttemptLog copies the log of rank of an attempt of job from offset
// to w, at most max bytes, and returns how many it copied: what a
// workload reads of the jobs it made (ReadLog follows a job's current
// attempt).
func (s *Service) ReadAttemptLog(job string, attempt, rank int, offset, max int64, w io.Writer) (int64, error) {
	return s.logs.ReadAt(job, attempt, rank, offset, max, w)
}

// AttemptLogSize is the stored size of the log of rank of an attempt of
// job (0 if none yet).
func (s *Service) AttemptLogSize(job string, attempt, rank int) int64 {
	return s.logs.Size(job, attempt, rank)
}

// CheckComponentUploads checks that a component's code and environment
// files were uploaded; field prefixes the fields the error names.
func (s *Service) CheckComponentUploads(c *spec.Component, field string) error {
	return s.assets.CheckComponentUploads(c, field)
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
		return store.Job{}, apperr.NoSpace(err, "the log of job "+rec.Name)
	}
	completed := rec.Status == apitypes.StatusCompleted
	rec.Outputs = owedOutputs(rec.Outputs, rec.Spec, completed)
	created, err := s.st.CreateJob(ctx, rec, first)
	if errors.Is(err, store.ErrConflict) {
		return store.Job{}, apperr.Conflict("job %s exists", rec.Name)
	}
	if err != nil {
		return store.Job{}, apperr.NoSpace(err, "job "+rec.Name)
	}
	if completed {
		s.registerOwed(ctx, created.Name)
	}
	s.changed(created.Name)
	return created, nil
}
