package workspace

import (
	"context"
	"errors"
	"sync"

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
	s.scopes.mu.Unlock()
	if ok {
		return sc, nil
	}
	rec, err := s.st.GetJob(ctx, who.Subject)
	if errors.Is(err, store.ErrNotFound) {
		return nil, NotFound("job %s does not exist", who.Subject)
	}
	if err != nil {
		return nil, err
	}
	v, err := s.jobView(ctx, rec)
	if err != nil {
		return nil, err
	}
	sc = &runScope{snapshots: map[string]bool{}, digests: map[string]bool{}}
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
