package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

// PutSnapshotStream stores a whole folder sent as one snapshot stream
// (snapshot.StreamReader): every file is checked by the snapshot path
// rules, bounded by the snapshot size limit and the run token's output
// quota, hashed here from the bytes received and written into one blob
// batch; the server builds the manifest itself. Nothing is stored unless
// the whole stream is good: a bad record answers apperr.CodeInvalid (or
// apperr.CodeTooLarge over a limit) naming it, a full disk apperr.CodeNoSpace.
//
// It is how runners send a job's outputs: one request, one pass and one
// disk sync for a folder of any number of files, with no round trips to
// ask which blobs are missing or to send the manifest.
func (s *Service) PutSnapshotStream(ctx context.Context, who auth.Principal, r io.Reader) (apitypes.StreamedSnapshot, error) {
	sc, err := s.scopeOf(ctx, who)
	if err != nil {
		return apitypes.StreamedSnapshot{}, err
	}
	q := s.meter(sc, nil)
	m, id, err := s.putSnapshotStream(r, q)
	if errors.Is(err, errUploadQuota) {
		return apitypes.StreamedSnapshot{}, s.uploadQuotaError()
	}
	if err != nil {
		return apitypes.StreamedSnapshot{}, s.noteNoSpace(who, err)
	}
	s.grantSnapshot(sc, id, m)
	s.charge(sc, q)
	return apitypes.StreamedSnapshot{ID: id, Files: len(m.Files), Bytes: m.TotalSize()}, s.noteNoSpace(who, nil)
}

func (s *Service) putSnapshotStream(r io.Reader, q *meteredReader) (*snapshot.Manifest, string, error) {
	b := s.blobs.NewBatch()
	defer b.Abort()
	sr := snapshot.NewStreamReader(r, snapshot.StreamLimits{MaxFileSize: s.cfg.MaxSnapshotSize, MaxTotalSize: s.cfg.MaxSnapshotSize})
	m := &snapshot.Manifest{Files: []snapshot.File{}}
	for {
		f, body, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", streamError(err)
		}
		// Metered by the sizes the records declare, which the reader holds
		// each record to.
		if q.n += f.Size; q.left >= 0 && q.n > q.left {
			return nil, "", errUploadQuota
		}
		src := &sourceReader{r: body}
		d, _, err := b.Add(src)
		if err != nil {
			if src.err != nil {
				return nil, "", streamError(src.err)
			}
			return nil, "", apperr.NoSpace(err, "a snapshot stream")
		}
		f.Digest = d
		m.Files = append(m.Files, f)
	}
	slices.SortFunc(m.Files, func(a, b snapshot.File) int { return strings.Compare(a.Path, b.Path) })
	id, _, err := b.Add(bytes.NewReader(m.MarshalCanonical()))
	if err != nil {
		return nil, "", apperr.NoSpace(err, "the snapshot manifest")
	}
	if err := b.Commit(); err != nil {
		return nil, "", apperr.NoSpace(err, "a snapshot stream")
	}
	return m, id, nil
}

// streamError classes an error of a snapshot stream: a stream that breaks
// the format or the path rules is the request's fault, a file or a total
// over a limit too large; a failure to read the body (the connection, a
// body limit) stays in the chain as it is.
func streamError(err error) error {
	switch {
	case errors.Is(err, snapshot.ErrTooLarge):
		return &apperr.Error{Code: apperr.CodeTooLarge, Err: err, Msg: fmt.Sprintf("%v; nothing was stored", err)}
	case errors.Is(err, snapshot.ErrInvalidStream):
		return &apperr.Error{Code: apperr.CodeInvalid, Err: err, Msg: fmt.Sprintf("%v; nothing was stored", err)}
	}
	return err
}

// grantSnapshot lets the scope's job read a snapshot it made and its files.
func (s *Service) grantSnapshot(sc *runScope, id string, m *snapshot.Manifest) {
	if sc == nil {
		return
	}
	s.scopes.mu.Lock()
	defer s.scopes.mu.Unlock()
	for _, f := range m.Files {
		sc.digests[f.Digest] = true
	}
	sc.snapshots[id] = true
}
