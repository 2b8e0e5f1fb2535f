package workspace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

// MissingBlobs returns which of the digests the workspace lacks, so a client
// uploads only those.
func (s *Service) MissingBlobs(digests []string) ([]string, error) {
	if len(digests) > 1_000_000 {
		return nil, Invalid("digests: at most 1,000,000 per request (got %d)", len(digests))
	}
	missing, err := s.blobs.Missing(digests)
	if errors.Is(err, blob.ErrInvalidDigest) {
		return nil, &Error{Code: CodeInvalid, Msg: "digests: " + err.Error(), Err: err}
	}
	return missing, err
}

// PutBlob stores content that must hash to digest.
func (s *Service) PutBlob(digest string, r io.Reader) error {
	if !blob.ValidDigest(digest) {
		return Invalid("digest %q is not a lowercase hex SHA-256", digest)
	}
	_, _, err := s.blobs.Put(r, digest)
	switch {
	case errors.Is(err, blob.ErrDigestMismatch):
		return &Error{Code: CodeInvalid, Msg: fmt.Sprintf("blob %s: the uploaded content does not hash to this digest; nothing was stored", digest), Err: err}
	}
	return err
}

// OpenBlob opens stored content.
func (s *Service) OpenBlob(digest string) (*os.File, error) {
	f, err := s.blobs.Open(digest)
	switch {
	case errors.Is(err, blob.ErrInvalidDigest):
		return nil, Invalid("digest %q is not a lowercase hex SHA-256", digest)
	case errors.Is(err, blob.ErrNotFound):
		return nil, NotFound("blob %s is not stored", digest)
	}
	return f, err
}

// CreateSnapshot stores a manifest whose files are all uploaded already and
// returns its id (the digest of its canonical form).
func (s *Service) CreateSnapshot(data []byte) (string, error) {
	m, err := snapshot.ParseManifest(data)
	if err != nil {
		return "", &Error{Code: CodeInvalid, Msg: "manifest: " + err.Error(), Err: err}
	}
	if total := m.TotalSize(); total > s.cfg.MaxSnapshotSize {
		return "", &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("manifest: the snapshot holds %d bytes, over the limit of %d", total, s.cfg.MaxSnapshotSize)}
	}
	missing, err := s.blobs.Missing(m.Digests())
	if err != nil {
		return "", err
	}
	if len(missing) > 0 {
		return "", Invalid("manifest: %d of its files were not uploaded (for example %s); upload them first", len(missing), missing[0])
	}
	canonical, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	id, _, err := s.blobs.Put(bytes.NewReader(canonical), "")
	return id, err
}

// GetSnapshot returns a stored manifest.
func (s *Service) GetSnapshot(id string) (*snapshot.Manifest, error) {
	f, err := s.OpenBlob(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	m, err := snapshot.ParseManifest(data)
	if err != nil {
		return nil, Invalid("%s is not a snapshot manifest", id)
	}
	return m, nil
}
