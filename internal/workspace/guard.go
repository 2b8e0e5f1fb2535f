package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// One bad stored record must never stop the server (docs/architecture.md, "Failure"):
// records are checked again when a loop reads them, a record that fails the
// check is marked Failed with the reason, and a panic while one record is
// handled becomes that record's error instead of the process's end.

// StateFailed is the state of a compute whose stored spec Ferry can no
// longer use; its reason is in the compute's events.
const StateFailed = "Failed"

// errInternal is wrapped by the error guard returns for a panic.
var errInternal = errors.New("internal error")

// guard runs fn and turns a panic into an error wrapping errInternal that
// names what, logging the stack so the bug can be found.
func (s *Service) guard(what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("internal error", "record", what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w while handling %s: %v", errInternal, what, r)
		}
	}()
	return fn()
}

// storedJobSpec decodes and checks a stored job's spec again, so that a
// job stored before a bound existed (or by a buggy version) is refused
// with the reason rather than handed to the scheduler.
func storedJobSpec(j store.Job) (*spec.Job, error) {
	var js spec.Job
	if err := json.Unmarshal(j.Spec, &js); err != nil {
		return nil, fmt.Errorf("its stored spec cannot be read (%v); submit it again", err)
	}
	if err := js.CheckBounds(); err != nil {
		return nil, fmt.Errorf("its stored spec is no longer valid: %v; fix the file and submit it again", err)
	}
	return &js, nil
}

// storedEnvironment decodes a stored job's resolved environment: nil when
// the job has none.
func storedEnvironment(j store.Job) (*environment.Spec, error) {
	if len(j.Environment) == 0 {
		return nil, nil
	}
	env := &environment.Spec{}
	if err := json.Unmarshal(j.Environment, env); err != nil {
		return nil, fmt.Errorf("its stored environment cannot be read (%v); submit it again", err)
	}
	return env, nil
}

// storedComputeSpec decodes and checks a stored compute's spec again.
func storedComputeSpec(rec store.Compute) (*spec.Compute, error) {
	var c spec.Compute
	if err := json.Unmarshal(rec.Spec, &c); err != nil {
		return nil, fmt.Errorf("its stored spec cannot be read (%v)", err)
	}
	if err := c.CheckBounds(); err != nil {
		return nil, fmt.Errorf("its stored spec is no longer valid: %v", err)
	}
	return &c, nil
}

// failCompute marks a compute Failed with why, once: the reason goes into
// its events, where `compute show` lists it. A compute being deleted stays
// Deleting, so that its deletion can finish.
func (s *Service) failCompute(ctx context.Context, name, why string) {
	changed := false
	_, err := s.st.UpdateCompute(ctx, name, func(c *store.Compute) error {
		if c.State == StateFailed || c.State == StateDeleting {
			return nil
		}
		c.State, c.Modified, changed = StateFailed, s.now(), true
		return nil
	})
	if err != nil {
		s.log.Error("mark compute failed", "compute", name, "err", err)
		return
	}
	s.unusable.unusable(name, why)
	if changed {
		s.event(ctx, name, "failed", "Failed: "+why+"; delete it and create it again")
	}
}

// failBroken fails a job that a panic stopped the loop from handling,
// whatever its status short of the end: a job left Preparing with no runner
// would otherwise wait for its lease to run out.
func (s *Service) failBroken(ctx context.Context, name string, err error) {
	j, gerr := s.st.GetJob(ctx, name)
	if gerr != nil || apitypes.IsTerminal(j.Status) {
		return
	}
	why := "it could not be started: " + err.Error()
	if j.Status == apitypes.StatusQueued {
		s.failQueued(ctx, name, why)
		return
	}
	if ferr := s.finish(ctx, name, j.Attempt, apitypes.StatusFailed, why, nil, why); ferr != nil {
		s.log.Error("fail job", "job", name, "err", ferr)
	}
}
