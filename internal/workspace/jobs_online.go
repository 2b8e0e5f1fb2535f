package workspace

import (
	"bytes"
	"context"
	"io"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
)

// What the online endpoints (internal/workload/online) need of the core
// beyond Jobs: two optional powers of a controller, and the reads and
// writes of snapshots, logs and environments that a deployment's
// replicas are made of.

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

// RequireSnapshot refuses a snapshot id that is not a SHA-256, or whose
// manifest was not uploaded, naming field.
func (s *Service) RequireSnapshot(id, field string) error { return s.requireSnapshot(id, field) }

// ReadSnapshot reads a stored snapshot's manifest, unscoped: for what
// the server itself reads of an upload it checked.
func (s *Service) ReadSnapshot(id string) (*snapshot.Manifest, error) { return s.readSnapshot(id) }

// OpenStoredBlob opens stored content, unscoped (OpenBlob is a caller's
// read, scoped to what its token may read).
func (s *Service) OpenStoredBlob(digest string) (*blob.Reader, error) { return s.openBlob(digest) }

// HasBlob says whether content of that digest is stored.
func (s *Service) HasBlob(digest string) bool { return s.blobs.Has(digest) }

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
			return "", noSpace(err, what)
		}
	}
	id := m.ID()
	if !s.blobs.Has(id) {
		if _, _, err := s.blobs.Put(bytes.NewReader(m.MarshalCanonical()), id); err != nil {
			return "", noSpace(err, what)
		}
	}
	return id, nil
}

// ResolveEnvironment turns an environment as a file gives it (with the
// snapshot of its build context, if uploaded) into what a runner builds,
// as a submitted job's is.
func (s *Service) ResolveEnvironment(ctx context.Context, e *spec.Environment, snap string) (*environment.Spec, error) {
	return s.resolveEnvironment(ctx, e, snap)
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

// NoSpace turns a write that failed because the server's disk is full
// into a CodeNoSpace error that names what was not stored; other errors
// are returned as they are.
func NoSpace(err error, what string) error { return noSpace(err, what) }

// ModelPathName is the name of the file or folder a model's path names
// ("model" for ../model-1/model/); "" when it names none.
func ModelPathName(p string) string { return modelPathName(p) }
