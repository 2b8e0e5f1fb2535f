package workspace

import (
	"bytes"
	"context"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
)

// What a workload that refers to the core's models, environments and
// snapshots (batch endpoints' deployments, internal/workload/batch)
// checks them with, as the core checks a job's.

// RequireSnapshot checks that id, the snapshot a request's field names,
// is a SHA-256 that was uploaded; the error names field.
func (s *Service) RequireSnapshot(id, field string) error { return s.requireSnapshot(id, field) }

// ResolveEnvironment turns an environment as a job file gives it (a
// reference, or inline with snap, the snapshot of its files) into what a
// runner builds, as a job's is: a reference is looked up, an inline one
// is checked against its files.
func (s *Service) ResolveEnvironment(ctx context.Context, e *spec.Environment, snap string) (*environment.Spec, error) {
	return s.resolveEnvironment(ctx, e, snap)
}

// ModelPathName is the name of the file or folder a model's path names
// ("model" for ../model-1/model/); "" when it names none.
func ModelPathName(p string) string { return modelPathName(p) }

// NoSpace turns a write that failed because the server's disk is full
// into the CodeNoSpace error that says so, what naming what was being
// stored; other errors are returned as they are.
func NoSpace(err error, what string) error { return noSpace(err, what) }

// HasBlob says whether a blob (a file, or a snapshot's manifest) is
// stored.
func (s *Service) HasBlob(digest string) bool { return s.blobs.Has(digest) }

// PutBuiltSnapshot stores a snapshot the server built itself
// (snapshot.Build of a folder of its own): the files of files, by
// digest, that are not stored yet, then the manifest m; it returns the
// snapshot's id. what names the snapshot in a full disk's error.
func (s *Service) PutBuiltSnapshot(m *snapshot.Manifest, files map[string]string, what string) (string, error) {
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
