package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

// MissingBlobs returns which of the digests the workspace lacks, so a client
// uploads only those. To a run token, every digest outside its job's own
// content is missing (blobscope.go).
func (s *Service) MissingBlobs(ctx context.Context, who auth.Principal, digests []string) ([]string, error) {
	if len(digests) > 1_000_000 {
		return nil, Invalid("digests: at most 1,000,000 per request (got %d)", len(digests))
	}
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return nil, err
	}
	var hidden []string
	if sc != nil {
		visible := make([]string, 0, len(digests))
		for _, d := range digests {
			if s.canRead(sc, d, false) {
				visible = append(visible, d)
			} else {
				hidden = append(hidden, d)
			}
		}
		digests = visible
	}
	missing, err := s.blobs.Missing(digests)
	if errors.Is(err, blob.ErrInvalidDigest) {
		return nil, &Error{Code: CodeInvalid, Msg: "digests: " + err.Error(), Err: err}
	}
	if err == nil && len(hidden) > 0 {
		if _, err := s.blobs.Missing(hidden); errors.Is(err, blob.ErrInvalidDigest) {
			return nil, &Error{Code: CodeInvalid, Msg: "digests: " + err.Error(), Err: err}
		}
		missing = append(missing, hidden...)
	}
	return missing, err
}

// PutBlob stores content that must hash to digest. A run token may read
// back what it stored.
func (s *Service) PutBlob(ctx context.Context, who auth.Principal, digest string, r io.Reader) error {
	if !blob.ValidDigest(digest) {
		return Invalid("digest %q is not a lowercase hex SHA-256", digest)
	}
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return err
	}
	_, _, err = s.blobs.Put(r, digest)
	switch {
	case errors.Is(err, blob.ErrDigestMismatch):
		return &Error{Code: CodeInvalid, Msg: fmt.Sprintf("blob %s: the uploaded content does not hash to this digest; nothing was stored", digest), Err: err}
	case err == nil:
		s.grant(sc, digest, false)
	}
	return err
}

// OpenBlob opens stored content that who may read.
func (s *Service) OpenBlob(ctx context.Context, who auth.Principal, digest string) (*os.File, error) {
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return nil, err
	}
	if !s.canRead(sc, digest, false) {
		if !blob.ValidDigest(digest) {
			return nil, Invalid("digest %q is not a lowercase hex SHA-256", digest)
		}
		return nil, NotFound("blob %s is not stored", digest)
	}
	return s.openBlob(digest)
}

func (s *Service) openBlob(digest string) (*os.File, error) {
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
// returns its id (the digest of its canonical form). A run token may use
// only files its job may read.
func (s *Service) CreateSnapshot(ctx context.Context, who auth.Principal, data []byte) (string, error) {
	m, err := snapshot.ParseManifest(data)
	if err != nil {
		return "", &Error{Code: CodeInvalid, Msg: "manifest: " + err.Error(), Err: err}
	}
	if total := m.TotalSize(); total > s.cfg.MaxSnapshotSize {
		return "", &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("manifest: the snapshot holds %d bytes, over the limit of %d", total, s.cfg.MaxSnapshotSize)}
	}
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return "", err
	}
	missing, err := s.MissingBlobs(ctx, who, m.Digests())
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
	if err == nil {
		s.grant(sc, id, true)
	}
	return id, err
}

// GetSnapshot returns a stored manifest that who may read.
func (s *Service) GetSnapshot(ctx context.Context, who auth.Principal, id string) (*snapshot.Manifest, error) {
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return nil, err
	}
	if !s.canRead(sc, id, true) {
		if !blob.ValidDigest(id) {
			return nil, Invalid("snapshot id %q is not a lowercase hex SHA-256", id)
		}
		return nil, NotFound("blob %s is not stored", id)
	}
	return s.readSnapshot(id)
}

// readSnapshot reads a stored manifest, unscoped.
func (s *Service) readSnapshot(id string) (*snapshot.Manifest, error) {
	f, err := s.openBlob(id)
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
