package workspace

import (
	"context"
	"fmt"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// A runner its target has started but that has not reached the server
// (issue 29 #7): a pod whose runner cannot call the URL the server
// advertises, a process given an address that leads nowhere. The target
// knows when it started the runner (the launch of a process, a node's
// placement, an engine that says Running); the server knows when the
// runner first called (heard). Between the two the job says so in its
// reason once RunnerReachGrace has passed, on every target, and a runner
// lease that expires in that gap says the runner never reached the
// server, where it would say only that the runner fell silent.

// runnerReachGrace is how long a started runner may go without reaching
// the server before the job's reason says so.
const runnerReachGrace = 60 * time.Second

// unreachedRunner is an attempt whose runner was started and has not
// called yet.
type unreachedRunner struct {
	attempt int
	since   time.Time // when the target started it (as this server saw)
	where   string    // "on compute local", "in pod train-0-x7k2q"
	told    bool      // the job's reason says so already
}

// runnerLaunched records that the target started the runner of a job's
// attempt now, where: its lease runs from now, and until it calls it is
// an unreached runner.
func (s *Service) runnerLaunched(name string, attempt int, where string) {
	now := s.now()
	s.mu.Lock()
	s.heartbeats[name] = now
	s.unreached[name] = unreachedRunner{attempt: attempt, since: now, where: where}
	s.mu.Unlock()
}

// engineStartedRunner records, for an attempt still Queued whose engine
// says it runs, that its runner was started (first seen now), unless that
// is known; it returns what is recorded.
func (s *Service) engineStartedRunner(j store.Job, where string) unreachedRunner {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.unreached[j.Name]
	if !ok || u.attempt != j.Attempt {
		u = unreachedRunner{attempt: j.Attempt, since: s.now(), where: where}
		s.unreached[j.Name] = u
	}
	return u
}

// unreachedFor is the unreached runner of the attempt of j, if any.
func (s *Service) unreachedFor(j store.Job) (unreachedRunner, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.unreached[j.Name]
	return u, ok && u.attempt == j.Attempt
}

// unreachedText says that the runner u has not reached the server for d.
func (s *Service) unreachedText(u unreachedRunner, d time.Duration) string {
	return fmt.Sprintf("the runner %s has not reached the server at %s for %d s; check that it can reach that address, which the server advertises (--advertise-url)",
		u.where, s.cfg.APIURL, int(d.Round(time.Second).Seconds()))
}

// tellUnreached sets the reason of job j (as read, in its status then) to
// say that its runner has not reached the server, once runnerReachGrace
// has passed since it started; prefix goes before the text ("queued: ").
// The reason is set once per attempt, as an event of the job's history.
func (s *Service) tellUnreached(ctx context.Context, j store.Job, prefix string) error {
	u, ok := s.unreachedFor(j)
	if !ok || u.told || s.now().Sub(u.since) < runnerReachGrace {
		return nil
	}
	text := prefix + s.unreachedText(u, runnerReachGrace)
	changed := false
	_, err := s.st.UpdateJob(ctx, j.Name, func(cur *store.Job) (*store.Event, error) {
		// A runner that called since the read has moved the job on.
		if cur.Status != j.Status || cur.Attempt != j.Attempt || cur.StatusReason == text {
			return nil, nil
		}
		cur.StatusReason, changed = text, true
		return &store.Event{Job: j.Name, Time: s.now(), From: cur.Status, To: cur.Status, Reason: text}, nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	if cur, ok := s.unreached[j.Name]; ok && cur.attempt == j.Attempt {
		cur.told = true
		s.unreached[j.Name] = cur
	}
	s.mu.Unlock()
	if changed {
		s.changed(j.Name)
	}
	return nil
}
