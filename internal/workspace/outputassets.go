package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Outputs with name: (and version:) register as data assets when their
// job completes, as Azure ML registers them: a command job's, a pipeline
// step's (its command job's), a sweep's (its best trial's) and a
// pipeline's own. The asset's files are the output's snapshot; its tags
// name the job and the output. What was registered, or why not, is a line
// of the job's log (of a sweep's or a pipeline's history, which have no
// log).
//
// The server may be killed at any moment, so the registration is owed
// before it is done: the transaction that records a job's completion also
// records, in its stored outputs, the outputs still to register
// (registerKey). They are registered right after that commit, and the
// mark is then removed; a server that died in between finds the mark at
// its start and registers them then. Registering twice makes no second
// version: an asset version tagged with the job and the output is the
// output's registration.

// registerKey is the key, in a job's stored outputs, of the outputs still
// to register as data assets. Outputs (the API's view) has no such field,
// so it is never shown.
const registerKey = "register"

// registerTick is how often registrations that failed for a reason that
// may pass (the store, a full disk) are tried again.
const registerTick = 10 * time.Second

// registrations is the memory of the registration of outputs: jobs whose
// registration is to be tried again, and whether the completed jobs were
// looked through since the server started.
type registrations struct {
	mu      sync.Mutex // held while registering: one job's outputs at a time
	scanned bool
	retry   map[string]bool
}

func newRegistrations() *registrations { return &registrations{retry: map[string]bool{}} }

// assetOutputs are the outputs of a stored spec that name a data asset.
func assetOutputs(specJSON []byte) map[string]spec.Output {
	// Most jobs' outputs name no asset: a look for the key saves the
	// decoding of their spec at their end (bench/dispatch).
	if !bytes.Contains(specJSON, []byte(`"outputs"`)) || !bytes.Contains(specJSON, []byte(`"name"`)) {
		return nil
	}
	var sp struct {
		Outputs map[string]spec.Output `json:"outputs"`
	}
	if json.Unmarshal(specJSON, &sp) != nil {
		return nil
	}
	out := map[string]spec.Output{}
	for k, o := range sp.Outputs {
		if o.Name != "" {
			out[k] = o
		}
	}
	return out
}

// owedOutputs returns a job's stored outputs marked with what its end
// owes: when completed, the outputs of its spec that name a data asset;
// otherwise nothing, so that a mark copied from another job (a reused
// step's, a best trial's) is dropped. It is called in the transaction
// that records the end.
func owedOutputs(outputs, specJSON json.RawMessage, completed bool) json.RawMessage {
	var keys []string
	if completed {
		keys = slices.Sorted(maps.Keys(assetOutputs(specJSON)))
	}
	return withPending(outputs, keys)
}

// withPending returns outputs with keys as the outputs still to register
// (none: no mark). Outputs that are not a JSON object are returned as
// they are: their registration then says they cannot be read.
func withPending(outputs json.RawMessage, keys []string) json.RawMessage {
	if len(keys) == 0 && !bytes.Contains(outputs, []byte(`"`+registerKey+`"`)) {
		return outputs
	}
	m := map[string]json.RawMessage{}
	if len(outputs) > 0 && !bytes.Equal(outputs, []byte("null")) {
		if json.Unmarshal(outputs, &m) != nil {
			return outputs
		}
	}
	delete(m, registerKey)
	if len(keys) > 0 {
		m[registerKey], _ = json.Marshal(keys) // strings: cannot fail
	}
	if len(m) == 0 {
		return nil
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return outputs
	}
	return raw
}

// pendingOutputs are the outputs a job's stored outputs mark as still to
// register.
func pendingOutputs(outputs json.RawMessage) []string {
	if !bytes.Contains(outputs, []byte(`"`+registerKey+`"`)) {
		return nil
	}
	var m struct {
		Register []string `json:"register"`
	}
	if json.Unmarshal(outputs, &m) != nil {
		return nil
	}
	return m.Register
}

// registerOwed registers the outputs job's record marks as still to
// register, then removes from the mark those that are done (registered,
// or refused for good: a version taken by other content, nothing
// written). Those that failed for a reason that may pass stay marked and
// are tried again on the registration loop.
func (s *Service) registerOwed(ctx context.Context, job string) {
	s.regs.mu.Lock()
	defer s.regs.mu.Unlock()
	err := s.registerOwedLocked(ctx, job)
	if err == nil {
		delete(s.regs.retry, job)
		return
	}
	s.regs.retry[job] = true
	if ctx.Err() == nil {
		s.log.Warn("register outputs: tried again later", "job", job, "err", err)
	}
}

func (s *Service) registerOwedLocked(ctx context.Context, job string) error {
	rec, err := s.st.GetJob(ctx, job)
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted: nothing is owed
	}
	if err != nil {
		return err
	}
	keys := pendingOutputs(rec.Outputs)
	if len(keys) == 0 {
		return nil
	}
	declared := assetOutputs(rec.Spec)
	var got apitypes.Outputs
	if err := json.Unmarshal(rec.Outputs, &got); err != nil {
		// Not to be fixed by trying again: said once, and dropped.
		s.log.Error("register outputs: the job's stored outputs cannot be read", "job", job, "err", err)
		got = apitypes.Outputs{}
	}
	var lines []string
	var done []string
	var failed error
	for _, k := range keys {
		line, err := s.registerOutput(ctx, rec, k, declared[k], got.Named[k])
		if err != nil {
			failed = errors.Join(failed, fmt.Errorf("output %s: %w", k, err))
			continue
		}
		lines = append(lines, line)
		done = append(done, k)
	}
	if len(lines) > 0 {
		s.logRegistration(rec, lines)
	}
	if len(done) > 0 {
		_, err := s.st.UpdateJobWith(ctx, job, func(j *store.Job) (store.JobChange, error) {
			left := slices.DeleteFunc(pendingOutputs(j.Outputs), func(k string) bool { return slices.Contains(done, k) })
			j.Outputs = withPending(j.Outputs, left)
			var ch store.JobChange
			if j.Attempt == 0 {
				// A sweep's or a pipeline's record has no log: its
				// history says it, once, with the mark's removal.
				now := s.now()
				for _, l := range lines {
					ch.Events = append(ch.Events, store.Event{Job: job, Time: now, From: j.Status, To: j.Status, Reason: l})
				}
			}
			return ch, nil
		})
		if err != nil {
			// Registered but still marked: the next try finds the
			// versions tagged with the job and registers nothing twice.
			failed = errors.Join(failed, err)
		}
		s.changed(job) // a follower of the log waits for the mark to go (ReadLog)
	}
	return failed
}

// registerOutput registers output k of the completed job rec, declared as
// o, whose snapshot is snap. It returns the log line that says what it
// did, or why the output is not registered when that will not change; an
// error when it may (the store, a full disk), to be tried again.
func (s *Service) registerOutput(ctx context.Context, rec store.Job, k string, o spec.Output, snap string) (string, error) {
	if o.Name == "" {
		return fmt.Sprintf("output %s is not registered as a data asset: its spec no longer names one", k), nil
	}
	if snap == "" {
		return fmt.Sprintf("output %s is not registered as data asset %s: the job wrote nothing there", k, o.Name), nil
	}
	if id, err := s.assets.RegisteredOutput(ctx, o.Name, rec.Name, k); err != nil {
		return "", err
	} else if id != "" {
		return fmt.Sprintf("output %s registered as data asset %s", k, id), nil
	}
	desc := o.Description
	if desc == "" {
		desc = fmt.Sprintf("output %s of job %s", k, rec.Name)
	}
	f := &spec.DataFile{Name: o.Name, Version: o.Version, Type: spec.OutputAssetType(o.Type), Path: "outputs/" + k,
		Description: desc, Tags: map[string]string{"ferry.job": rec.Name, "ferry.output": k}}
	a, err := s.assets.CreateData(ctx, auth.Principal{Kind: auth.KindOwner, Subject: rec.CreatedBy}, f, snap)
	if err != nil {
		if c := apperr.CodeOf(err); c == apperr.CodeInternal || c == apperr.CodeNoSpace || c == apperr.CodeUnavailable {
			return "", err
		}
		return fmt.Sprintf("output %s is not registered as data asset %s: %v", k, o.Name, err), nil
	}
	return fmt.Sprintf("output %s registered as data asset %s", k, a.ID), nil
}

// logRegistration writes what the registration did to the log of the
// job's attempt (none for a sweep's or a pipeline's record, which have no
// attempt: their history says it) and to the server's log.
func (s *Service) logRegistration(rec store.Job, lines []string) {
	if rec.Attempt > 0 {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString("ferry: " + l + "\n")
		}
		if _, err := s.logs.Append(rec.Name, rec.Attempt, 0, s.logs.Size(rec.Name, rec.Attempt, 0), []byte(b.String())); err != nil {
			s.log.Warn("register outputs: log", "job", rec.Name, "err", err)
		}
	}
	s.log.Info("outputs registered", "job", rec.Name, "lines", strings.Join(lines, "; "))
}

// reconcileRegistrations is one pass of the registration loop. Its first
// pass looks through the completed jobs for outputs still marked to
// register, which a server killed after a job's end left; later passes
// try again the jobs whose registration failed for a reason that may pass.
func (s *Service) reconcileRegistrations(ctx context.Context) error {
	s.regs.mu.Lock()
	scanned := s.regs.scanned
	jobs := slices.Sorted(maps.Keys(s.regs.retry))
	s.regs.mu.Unlock()
	if !scanned {
		recs, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: []string{apitypes.StatusCompleted}})
		if err != nil {
			return err
		}
		for _, r := range recs {
			if len(pendingOutputs(r.Outputs)) > 0 && !slices.Contains(jobs, r.Name) {
				jobs = append(jobs, r.Name)
			}
		}
	}
	for _, job := range jobs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.registerOwed(ctx, job)
	}
	if !scanned {
		s.regs.mu.Lock()
		s.regs.scanned = true
		s.regs.mu.Unlock()
	}
	return nil
}
