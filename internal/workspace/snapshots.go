package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

// MissingBlobs returns which of the digests the workspace lacks, so a client
// uploads only those. To a run token, every digest outside its job's own
// content is missing (blobscope.go).
func (s *Service) MissingBlobs(ctx context.Context, who auth.Principal, digests []string) ([]string, error) {
	if len(digests) > 1_000_000 {
		return nil, apperr.Invalid("digests: at most 1,000,000 per request (got %d)", len(digests))
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
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: "digests: " + err.Error(), Err: err}
	}
	if err == nil && len(hidden) > 0 {
		if _, err := s.blobs.Missing(hidden); errors.Is(err, blob.ErrInvalidDigest) {
			return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: "digests: " + err.Error(), Err: err}
		}
		missing = append(missing, hidden...)
	}
	return missing, err
}

// PutBlob stores content that must hash to digest. A run token may read
// back what it stored, and its job is told when the disk is full.
func (s *Service) PutBlob(ctx context.Context, who auth.Principal, digest string, r io.Reader) error {
	if !blob.ValidDigest(digest) {
		return apperr.Invalid("digest %q is not a lowercase hex SHA-256", digest)
	}
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return err
	}
	q := s.meter(sc, r)
	_, _, err = s.blobs.Put(q, digest)
	switch {
	case errors.Is(err, errUploadQuota):
		return s.uploadQuotaError()
	case errors.Is(err, blob.ErrDigestMismatch):
		return &apperr.Error{Code: apperr.CodeInvalid, Msg: fmt.Sprintf("blob %s: the uploaded content does not hash to this digest; nothing was stored", digest), Err: err}
	case err == nil:
		s.grant(sc, digest, false)
		s.charge(sc, q)
	}
	return s.noteNoSpace(who, apperr.NoSpace(err, "blob "+digest))
}

// noteNoSpace shows a full disk on the job of a run token that could not
// upload, and clears it once an upload succeeds; it returns err.
func (s *Service) noteNoSpace(who auth.Principal, err error) error {
	if who.Kind != auth.KindRun {
		return err
	}
	switch {
	case err == nil:
		s.setDiskFull(who.Subject, "")
	case apperr.CodeOf(err) == apperr.CodeNoSpace:
		s.setDiskFull(who.Subject, "server disk full: output upload paused; the job's node keeps its outputs and sends them when there is room again")
	}
	return err
}

// MaxBatchBlobs is the most blobs one PutBlobs stream may hold.
const MaxBatchBlobs = 100_000

// PutBlobs stores the blobs of a tar stream in one go: every entry is a
// regular file named by the lowercase hex SHA-256 of its content. Each
// blob is verified as it is written; the batch is made durable and
// installed only once all of it has been read and verified, so a bad entry
// stores nothing. It returns how many blobs the stream held.
//
// It is how clients send many small files: one request and one disk sync
// for thousands of blobs instead of one of each per blob.
func (s *Service) PutBlobs(ctx context.Context, who auth.Principal, r io.Reader) (int, error) {
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return 0, err
	}
	// A batch is metered by the sizes its entries declare, which the tar
	// reader holds each entry to, not by its headers and padding.
	q := s.meter(sc, nil)
	digests, err := s.putBlobs(r, q)
	if errors.Is(err, errUploadQuota) {
		return 0, s.uploadQuotaError()
	}
	if err == nil {
		for _, d := range digests {
			s.grant(sc, d, false)
		}
		s.charge(sc, q)
	}
	return len(digests), s.noteNoSpace(who, err)
}

func (s *Service) putBlobs(r io.Reader, q *meteredReader) ([]string, error) {
	b := s.blobs.NewBatch()
	defer b.Abort()
	var digests []string
	// One blob at a time: a small one only costs hashing and a copy into
	// the batch's pack, less than handing it to another goroutine would.
	_, err := readBatch(tar.NewReader(r), s.cfg.MaxSnapshotSize, func(h *tar.Header, tr io.Reader) error {
		digests = append(digests, h.Name)
		if q.n += h.Size; q.left >= 0 && q.n > q.left {
			return errUploadQuota
		}
		src := &sourceReader{r: tr}
		if _, err := b.Put(src, h.Name); err != nil {
			if src.err != nil {
				// The cause stays in the chain: a body over its limit is
				// answered as such.
				return &apperr.Error{Code: apperr.CodeInvalid, Err: src.err, Msg: fmt.Sprintf("blob batch: blob %s: %v", h.Name, src.err)}
			}
			if errors.Is(err, blob.ErrDigestMismatch) {
				return &apperr.Error{Code: apperr.CodeInvalid, Msg: fmt.Sprintf("blob batch: blob %s: the content does not hash to its name; nothing was stored", h.Name), Err: err}
			}
			return apperr.NoSpace(err, "a batch of blobs")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return digests, apperr.NoSpace(b.Commit(), "a batch of blobs")
}

// sourceReader tells a failure to read the request from one to store what
// was read.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// readBatch checks every entry of a batch's tar stream and hands it to fn,
// until the stream ends or fn fails; it returns how many entries it handed
// on.
func readBatch(tr *tar.Reader, maxBlob int64, fn func(*tar.Header, io.Reader) error) (int, error) {
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			// The cause stays in the chain: a body over its limit is
			// answered as such.
			return 0, &apperr.Error{Code: apperr.CodeInvalid, Err: err, Msg: fmt.Sprintf("blob batch: entry %d: %v (send a tar stream of files named by their SHA-256)", n+1, err)}
		}
		switch {
		case n >= MaxBatchBlobs:
			return 0, apperr.Invalid("blob batch: more than %d blobs; send the rest in another batch", MaxBatchBlobs)
		case h.Typeflag != tar.TypeReg:
			return 0, apperr.Invalid("blob batch: entry %q is not a regular file", h.Name)
		case !blob.ValidDigest(h.Name):
			return 0, apperr.Invalid("blob batch: entry %q is not named by a lowercase hex SHA-256", h.Name)
		case h.Size > maxBlob:
			return 0, &apperr.Error{Code: apperr.CodeTooLarge, Msg: fmt.Sprintf("blob batch: blob %s is %d bytes, over the limit of %d", h.Name, h.Size, maxBlob)}
		}
		if err := fn(h, tr); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// OpenBlob opens stored content that who may read.
func (s *Service) OpenBlob(ctx context.Context, who auth.Principal, digest string) (*blob.Reader, error) {
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return nil, err
	}
	if !s.canRead(sc, digest, false) {
		if !blob.ValidDigest(digest) {
			return nil, apperr.Invalid("digest %q is not a lowercase hex SHA-256", digest)
		}
		return nil, apperr.NotFound("blob %s is not stored", digest)
	}
	return s.openBlob(digest)
}

func (s *Service) openBlob(digest string) (*blob.Reader, error) {
	f, err := s.blobs.Open(digest)
	switch {
	case errors.Is(err, blob.ErrInvalidDigest):
		return nil, apperr.Invalid("digest %q is not a lowercase hex SHA-256", digest)
	case errors.Is(err, blob.ErrNotFound):
		return nil, apperr.NotFound("blob %s is not stored", digest)
	}
	return f, err
}

// CreateSnapshot stores a manifest whose files are all uploaded already and
// returns its id (the digest of its canonical form). A run token may use
// only files its job may read.
func (s *Service) CreateSnapshot(ctx context.Context, who auth.Principal, data []byte) (string, error) {
	m, err := snapshot.ParseManifest(data)
	if err != nil {
		return "", &apperr.Error{Code: apperr.CodeInvalid, Msg: "manifest: " + err.Error(), Err: err}
	}
	if total := m.TotalSize(); total > s.cfg.MaxSnapshotSize {
		return "", &apperr.Error{Code: apperr.CodeTooLarge, Msg: fmt.Sprintf("manifest: the snapshot holds %d bytes, over the limit of %d", total, s.cfg.MaxSnapshotSize)}
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
		return "", apperr.Invalid("manifest: %d of its files were not uploaded (for example %s); upload them first", len(missing), missing[0])
	}
	canonical := m.MarshalCanonical()
	sum := sha256.Sum256(canonical)
	id := hex.EncodeToString(sum[:])
	// A folder sent again unchanged has its manifest stored already:
	// storing it again would cost a disk sync for nothing.
	if !s.blobs.Has(id) {
		if _, _, err := s.blobs.Put(bytes.NewReader(canonical), id); err != nil {
			return "", apperr.NoSpace(err, "the snapshot manifest")
		}
	}
	s.grant(sc, id, true)
	return id, nil
}

// GetSnapshot returns a stored manifest that who may read.
func (s *Service) GetSnapshot(ctx context.Context, who auth.Principal, id string) (*snapshot.Manifest, error) {
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return nil, err
	}
	if !s.canRead(sc, id, true) {
		if !blob.ValidDigest(id) {
			return nil, apperr.Invalid("snapshot id %q is not a lowercase hex SHA-256", id)
		}
		return nil, apperr.NotFound("blob %s is not stored", id)
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
		return nil, apperr.Invalid("%s is not a snapshot manifest", id)
	}
	return m, nil
}
