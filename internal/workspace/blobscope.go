package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/store"
)

// A run token reads only its own job's content: the snapshots of its code,
// inputs, environment and outputs, their files, and what the job itself
// uploaded. Anything else is "not stored" to it, whether or not the
// workspace has it, so that a job can neither read another job's files by
// digest nor learn that some content exists (POST /v1/blobs/missing says
// every digest outside the job's own is missing; the runner then uploads
// it again, which costs bytes, not secrets).

// runScopes holds, per job, what its run token may read. Entries are made
// on first use from the job's record and dropped when the job ends.
type runScopes struct {
	mu   sync.Mutex
	jobs map[string]*runScope
}

// runScope is one job's readable content.
type runScope struct {
	snapshots map[string]bool // snapshot ids
	digests   map[string]bool // file digests
	uploaded  int64           // bytes the attempt's uploads stored, against the output quota
	attempt   int             // the attempt uploaded is counted for
}

func (r *runScopes) forget(job string) {
	r.mu.Lock()
	delete(r.jobs, job)
	r.mu.Unlock()
}

// scopeOf returns the scope of a run principal, or nil for any other
// principal, whose reads are not scoped.
func (s *Service) scopeOf(ctx context.Context, who auth.Principal) (*runScope, error) {
	if who.Kind != auth.KindRun {
		return nil, nil
	}
	s.scopes.mu.Lock()
	sc, ok := s.scopes.jobs[who.Subject]
	if ok && who.Attempt > sc.attempt {
		sc.attempt, sc.uploaded = who.Attempt, 0 // the quota is per attempt
	}
	s.scopes.mu.Unlock()
	if ok {
		return sc, nil
	}
	rec, err := s.st.GetJob(ctx, who.Subject)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("job %s does not exist", who.Subject)
	}
	if err != nil {
		return nil, err
	}
	v, err := s.jobViewWith(rec, nil) // a scope needs no metrics
	if err != nil {
		return nil, err
	}
	sc = &runScope{snapshots: map[string]bool{}, digests: map[string]bool{}, attempt: who.Attempt}
	ids := []string{v.CodeSnapshot}
	for _, id := range v.InputSnapshots {
		ids = append(ids, id)
	}
	if v.Environment != nil {
		ids = append(ids, v.Environment.Context)
	}
	if v.Outputs != nil {
		ids = append(ids, v.Outputs.Artifacts)
		for _, id := range v.Outputs.Named {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		m, err := s.readSnapshot(id)
		if err != nil {
			continue // a snapshot that is gone has nothing to read
		}
		sc.snapshots[id] = true
		for _, d := range m.Digests() {
			sc.digests[d] = true
		}
	}
	s.scopes.mu.Lock()
	if s.scopes.jobs == nil {
		s.scopes.jobs = map[string]*runScope{}
	}
	if have, ok := s.scopes.jobs[who.Subject]; ok {
		sc = have // another request made it first
	} else {
		s.scopes.jobs[who.Subject] = sc
	}
	s.scopes.mu.Unlock()
	return sc, nil
}

// canRead says whether the scope lets its job read a digest (nil: any).
func (s *Service) canRead(sc *runScope, digest string, snapshot bool) bool {
	if sc == nil {
		return true
	}
	s.scopes.mu.Lock()
	defer s.scopes.mu.Unlock()
	if snapshot {
		return sc.snapshots[digest]
	}
	return sc.digests[digest]
}

// grant lets the scope's job read what it uploaded or made.
func (s *Service) grant(sc *runScope, digest string, snapshot bool) {
	if sc == nil {
		return
	}
	s.scopes.mu.Lock()
	defer s.scopes.mu.Unlock()
	if snapshot {
		sc.snapshots[digest] = true
	} else {
		sc.digests[digest] = true
	}
}

// What a job uploads counts against its output quota on the server too:
// the runner skips outputs over it before uploading, but a job holds its
// run token and could PUT blobs itself. Only uploads that succeed are
// counted, so a runner retrying through a full disk is not charged for
// every try; uploads in flight together may pass the quota by what each
// of them sends.

// errUploadQuota is returned by a metered reader past the quota.
var errUploadQuota = errors.New("over the job's output quota")

// meteredReader counts what one upload sends and stops past what is left
// of the quota (left < 0: no quota).
type meteredReader struct {
	r    io.Reader
	n    int64
	left int64
}

func (m *meteredReader) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.n += int64(n)
	if m.left >= 0 && m.n > m.left {
		return n, errUploadQuota
	}
	return n, err
}

// meter wraps an upload of the scope's job (nil: not a run token's).
func (s *Service) meter(sc *runScope, r io.Reader) *meteredReader {
	m := &meteredReader{r: r, left: -1}
	if limit := s.outputLimits().JobBytes; sc != nil && limit > 0 {
		s.scopes.mu.Lock()
		m.left = max(limit-sc.uploaded, 0)
		s.scopes.mu.Unlock()
	}
	return m
}

// charge counts a finished upload against the scope's quota.
func (s *Service) charge(sc *runScope, m *meteredReader) {
	if sc == nil {
		return
	}
	s.scopes.mu.Lock()
	sc.uploaded += m.n
	s.scopes.mu.Unlock()
}

func (s *Service) uploadQuotaError() error {
	return &apperr.Error{Code: apperr.CodeTooLarge, Msg: fmt.Sprintf("upload refused: the job's uploads are over its output quota of %d bytes (ferry server --output-quota); nothing more is stored for it", s.outputLimits().JobBytes)}
}
