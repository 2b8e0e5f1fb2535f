package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/store"
)

// Handing attempts to targets that queue themselves (Slurm, Kubernetes).
//
// Such an attempt waits in its engine's queue, so in Ferry it stays Queued
// from submit until its runner first calls: handing it over is no status
// of its own (a Preparing in between would show the job going back to
// Queued). While the engine call is under way the attempt carries a
// hand-off mark where its handle goes, which names the server making the
// call:
//
//   - the dispatcher does not pick it again (its handle is set), and it
//     holds a slot of the target's capacity (inEngineQueue counts it);
//   - a cancel asked meanwhile ends the job at once and revokes the run
//     token; the engine is told as soon as the handle comes (launched);
//   - a runner the engine starts before the call returns moves it on as
//     usual (runnerStarted), and the handle is stored all the same;
//   - a server killed during the call leaves the mark, and the next
//     server, finding a mark not its own, takes the attempt back and
//     hands the job over again as a new attempt (retakeHandOff). Whether
//     the engine got the old attempt is unknown; if it did, that
//     attempt's runner is refused (its token is revoked, its attempt is
//     no longer current), so nothing runs twice.
//
// Attempts are handed over in batches, beside the dispatcher's loop: each
// dispatcher pass gives a target all its picks in one call (a
// compute.BatchLauncher makes that one engine call, such as one sbatch
// --array), and while maxHandOffs calls to a target are under way, newly
// queued attempts wait for the next pass and go in its batch. A burst of
// submissions then reaches the engine in a few calls instead of one per
// job (bench/dispatch).

// handOffPrefix begins every hand-off mark. No engine's handle begins with
// it (compute.Handle).
const handOffPrefix = "!handing-off/"

// maxHandOffs bounds the hand-off calls under way to one compute.
const maxHandOffs = 4

// handOffParallel is how many Launch calls a hand-off makes at once to a
// target that cannot launch a batch.
const handOffParallel = 8

// newInstanceID names this server among those that used the store, for
// its hand-off marks.
func newInstanceID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// handOffMark is this server's mark on the attempts it is handing over.
func (s *Service) handOffMark() string { return handOffPrefix + s.instance }

func isHandOffMark(h string) bool { return strings.HasPrefix(h, handOffPrefix) }

// shownHandle is the handle a job's view shows: a hand-off mark is no
// engine's name for the attempt.
func shownHandle(h string) string {
	if isHandOffMark(h) {
		return ""
	}
	return h
}

// handOffsUnderWay is how many hand-off calls to a compute are under way.
func (s *Service) handOffsUnderWay(computeName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handing[computeName]
}

// handOff marks each named queued job with a new attempt being handed to
// the compute's target, makes the attempts' run tokens, and hands them
// over in one batch beside the dispatcher's loop. The marks with their
// tokens, and then the answers, are each one transaction for the batch.
func (s *Service) handOff(ctx context.Context, computeName string, names []string) {
	t, err := s.target(ctx, computeName)
	if err != nil {
		if !isUnusable(err) {
			s.log.Error("compute target", "compute", computeName, "err", err)
		}
		return
	}
	var ls []compute.Launch
	err = s.guard("the hand-off of "+strings.Join(names, ", "), func() (err error) {
		ls, err = s.markHandOffs(ctx, computeName, names)
		return err
	})
	if err != nil {
		s.log.Error("hand jobs over", "compute", computeName, "err", err)
		return // the jobs stay queued, unmarked, for a later pass
	}
	if len(ls) == 0 {
		return
	}
	s.mu.Lock()
	s.handing[computeName]++
	s.mu.Unlock()
	s.handOffs.Go(func() {
		defer func() {
			s.mu.Lock()
			s.handing[computeName]--
			s.mu.Unlock()
			s.wakeDispatcher() // attempts may wait for this call to end
		}()
		results := s.launchAll(ctx, t, ls)
		// What the engine answered is stored even when the server is
		// stopping: a handle not stored would leave the attempt to the
		// next server's retake.
		err := s.guard("the hand-off of "+strings.Join(names, ", "), func() error {
			return s.handedOff(context.WithoutCancel(ctx), ctx.Err() != nil, t, computeName, ls, results)
		})
		if err != nil {
			s.log.Error("record a hand-off", "compute", computeName, "err", err)
		}
	})
}

// markHandOffs gives each named job that is still queued its next
// attempt, marked as being handed over by this server, with its run
// token, all in one transaction. It returns the launches of the jobs
// marked; a job whose stored record cannot run is failed with the reason.
func (s *Service) markHandOffs(ctx context.Context, computeName string, names []string) ([]compute.Launch, error) {
	mark := s.handOffMark()
	launches := map[string]*compute.Launch{}
	damaged := map[string]error{}
	_, errs, err := s.st.UpdateJobs(ctx, names, func(j *store.Job) (store.JobChange, error) {
		delete(launches, j.Name)
		if j.Status != apitypes.StatusQueued || j.Handle != "" {
			return store.JobChange{}, errNotQueued
		}
		js, env, bad := nextAttempt(j)
		if bad != nil {
			damaged[j.Name] = bad
			return store.JobChange{}, errNotQueued
		}
		j.Handle = mark
		// An engine that queues itself starts one runner per node of a
		// multi-node job; each reports its own end under its rank, and
		// the attempt ends as rankEnded decides, as on a cluster.
		j.Placement = nil
		if n := instancesOf(js); n > 1 {
			raw, err := json.Marshal(Placement{Ranks: make([]RankPlacement, n)})
			if err != nil {
				return store.JobChange{}, err
			}
			j.Placement = raw
		}
		j.StatusReason = "queued: being handed to compute " + computeName + "'s queue"
		secret, hash := auth.NewToken()
		launches[j.Name] = &compute.Launch{Job: j.Name, Attempt: j.Attempt, APIURL: s.cfg.APIURL, RunToken: secret, Spec: js, Environment: env}
		return store.JobChange{CreateToken: &store.Token{Hash: hash, Kind: auth.KindRun, Subject: j.Name, Attempt: j.Attempt, Created: s.now()}}, nil
	})
	if err != nil {
		return nil, err
	}
	for name, why := range damaged {
		s.failQueued(ctx, name, why.Error())
	}
	var ls []compute.Launch
	for i, name := range names {
		l := launches[name]
		if errs[i] != nil || l == nil {
			if errs[i] != nil && !errors.Is(errs[i], errNotQueued) && !errors.Is(errs[i], store.ErrNotFound) {
				s.log.Error("hand a job over", "job", name, "compute", computeName, "err", errs[i])
			}
			continue
		}
		ls = append(ls, *l)
		s.changed(name)
	}
	return ls, nil
}

// launchAll hands ls to t: in one call when t launches batches, else
// handOffParallel Launch calls at a time. A panic in the target becomes
// the error of the launches it hit.
func (s *Service) launchAll(ctx context.Context, t compute.Target, ls []compute.Launch) []compute.Launched {
	recovered := func(err *error) {
		if r := recover(); r != nil {
			*err = fmt.Errorf("%w in compute target %s: %v", errInternal, t.Type(), r)
		}
	}
	if b, ok := t.(compute.BatchLauncher); ok {
		var rs []compute.Launched
		var err error
		func() {
			defer recovered(&err)
			rs = b.LaunchBatch(ctx, ls)
		}()
		if err == nil && len(rs) != len(ls) {
			err = fmt.Errorf("compute target %s answered %d results for %d launches", t.Type(), len(rs), len(ls))
		}
		if err != nil {
			rs = make([]compute.Launched, len(ls))
			for i := range rs {
				rs[i].Err = err
			}
		}
		return rs
	}
	rs := make([]compute.Launched, len(ls))
	sem := make(chan struct{}, handOffParallel)
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			defer recovered(&rs[i].Err)
			rs[i].Handle, rs[i].Err = t.Launch(ctx, l)
		})
	}
	wg.Wait()
	return rs
}

// handedOff records what the engine answered for the attempts ls of one
// hand-off call: their handles, in one transaction, and the failures.
// When the server was stopping during the call (stopping), a failed
// launch leaves its mark for the next server: the engine may have the
// attempt all the same.
func (s *Service) handedOff(ctx context.Context, stopping bool, t compute.Target, computeName string, ls []compute.Launch, rs []compute.Launched) error {
	var ok, failed []compute.Launch
	handles := map[string]compute.Handle{}
	whys := map[string]string{}
	for i, l := range ls {
		r := rs[i]
		if r.Err == nil && (r.Handle == "" || isHandOffMark(string(r.Handle))) {
			r.Err = fmt.Errorf("compute target %s returned no handle for attempt %d", t.Type(), l.Attempt)
		}
		switch {
		case r.Err == nil:
			ok = append(ok, l)
			handles[l.Job] = r.Handle
		case !stopping:
			failed = append(failed, l)
			whys[l.Job] = fmt.Sprintf("compute %s could not take the attempt: %v", computeName, r.Err)
		}
	}
	if len(failed) > 0 {
		s.handOffFailed(ctx, failed, whys)
	}
	if len(ok) == 0 {
		return nil
	}
	// A handle not stored leaves its attempt marked until the next
	// server finds it (compute.Finder) or takes it back: worth a few
	// tries when the store refuses a write (a full disk, a busy lock).
	var err error
	for try := range 5 {
		if err = s.launched(ctx, t, computeName, ok, handles); err == nil {
			return nil
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	return err
}

// handOffFailed fails each job of ls, whose attempt this server could not
// hand over, with its reason in whys (unless the attempt ended or moved
// on meanwhile), and revokes its run token, in one transaction.
func (s *Service) handOffFailed(ctx context.Context, ls []compute.Launch, whys map[string]string) {
	mark := s.handOffMark()
	names, attempts := attemptsOf(ls)
	failed := map[string]bool{}
	_, _, err := s.st.UpdateJobs(ctx, names, func(j *store.Job) (store.JobChange, error) {
		delete(failed, j.Name)
		if j.Attempt != attempts[j.Name] || j.Handle != mark || j.Status != apitypes.StatusQueued {
			return store.JobChange{}, nil
		}
		now, why := s.now(), whys[j.Name]
		j.Status, j.StatusReason, j.Error, j.Ended, j.Handle = apitypes.StatusFailed, why, why, now, ""
		failed[j.Name] = true
		return store.JobChange{
			Events:       []store.Event{{Job: j.Name, Time: now, From: apitypes.StatusQueued, To: apitypes.StatusFailed, Reason: why}},
			DeleteTokens: auth.KindRun,
		}, nil
	})
	if err != nil {
		s.log.Error("fail the jobs whose hand-off failed", "jobs", names, "err", err)
		return
	}
	for _, name := range names {
		if failed[name] {
			s.log.Warn("hand-off failed", "job", name, "attempt", attempts[name], "reason", whys[name])
			s.changed(name)
		}
	}
	s.wakeDispatcher()
}

// attemptsOf is the job names of ls, in order, and each one's attempt.
func attemptsOf(ls []compute.Launch) ([]string, map[string]int) {
	names := make([]string, len(ls))
	attempts := make(map[string]int, len(ls))
	for i, l := range ls {
		names[i], attempts[l.Job] = l.Job, l.Attempt
	}
	return names, attempts
}

// launched records, in one transaction, the handles the engine gave the
// attempts ls this server handed over. Each attempt waits in the engine's
// queue, Queued with a reason that names its handle, unless its runner
// has already called (a fast engine: it stays as the runner put it). An
// attempt canceled during the call, or taken back meanwhile, is canceled
// through the engine at once: no runner would hear of it.
func (s *Service) launched(ctx context.Context, t compute.Target, computeName string, ls []compute.Launch, handles map[string]compute.Handle) error {
	mark := s.handOffMark()
	names, attempts := attemptsOf(ls)
	giveUp := map[string]bool{}
	_, _, err := s.st.UpdateJobs(ctx, names, func(j *store.Job) (store.JobChange, error) {
		delete(giveUp, j.Name)
		h := handles[j.Name]
		if j.Attempt != attempts[j.Name] || j.Handle != mark {
			giveUp[j.Name] = true
			return store.JobChange{}, nil
		}
		j.Handle = string(h) // kept for the record, whatever became of the job
		if apitypes.IsTerminal(j.Status) {
			giveUp[j.Name] = true
			return store.JobChange{}, nil
		}
		if j.Status != apitypes.StatusQueued {
			return store.JobChange{}, nil // its runner spoke first
		}
		j.StatusReason = fmt.Sprintf("queued: handed to compute %s (engine handle %s); waiting in its queue", computeName, h)
		return store.JobChange{Events: []store.Event{{Job: j.Name, Time: s.now(), From: apitypes.StatusQueued, To: apitypes.StatusQueued, Reason: j.StatusReason}}}, nil
	})
	if err != nil {
		return err
	}
	for _, name := range names {
		s.changed(name)
	}
	c, ok := t.(compute.Canceller)
	if !ok {
		return nil
	}
	for _, name := range names {
		if !giveUp[name] {
			continue
		}
		if err := c.Cancel(ctx, handles[name]); err != nil {
			// Its run token is revoked: a runner the engine starts
			// anyway is refused and ends.
			s.log.Error("cancel through the engine an attempt given up during its hand-off", "compute", computeName, "job", name, "handle", handles[name], "err", err)
			continue
		}
		s.mu.Lock()
		s.engineCanceled[name] = attempts[name]
		s.mu.Unlock()
	}
	return nil
}

// settleHandOffs deals with the attempts of compute that an earlier
// server was handing over when it stopped (marks not this server's): a
// target that keeps a record of its launches (compute.Finder) is asked
// for their handles, and each one found is adopted; the others are taken
// back (retakeHandOff). Only a server before this one can have left such
// marks, so this runs once per compute, in the dispatcher's goroutine:
// no new attempt of their jobs is made meanwhile.
func (s *Service) settleHandOffs(ctx context.Context, computeName string, t compute.Target) error {
	js, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: engineStates, Compute: computeName, Handle: store.HandleSet})
	if err != nil {
		return err
	}
	mine := s.handOffMark()
	js = slices.DeleteFunc(js, func(j store.Job) bool { return !isHandOffMark(j.Handle) || j.Handle == mine })
	if len(js) == 0 {
		return nil
	}
	found := map[compute.Attempt]compute.Handle{}
	if f, ok := t.(compute.Finder); ok {
		as := make([]compute.Attempt, len(js))
		for i, j := range js {
			as[i] = compute.Attempt{Job: j.Name, Attempt: j.Attempt}
		}
		if found, err = f.FindHandles(ctx, as); err != nil {
			return fmt.Errorf("find the handles of interrupted hand-offs: %w", err)
		}
	}
	var errs []error
	for _, j := range js {
		if h, ok := found[compute.Attempt{Job: j.Name, Attempt: j.Attempt}]; ok && h != "" && !isHandOffMark(string(h)) {
			errs = append(errs, s.adoptHandOff(ctx, computeName, j, h))
			continue
		}
		errs = append(errs, s.retakeHandOff(ctx, computeName, j))
	}
	return errors.Join(errs...)
}

// adoptHandOff stores the handle of an attempt an earlier server handed
// over without storing its answer: the engine has it, and it is followed
// as any other.
func (s *Service) adoptHandOff(ctx context.Context, computeName string, j store.Job, h compute.Handle) error {
	_, err := s.st.UpdateJob(ctx, j.Name, func(cur *store.Job) (*store.Event, error) {
		if cur.Attempt != j.Attempt || cur.Handle != j.Handle {
			return nil, nil
		}
		cur.Handle = string(h)
		if cur.Status != apitypes.StatusQueued {
			return nil, nil // its runner speaks for it
		}
		cur.StatusReason = fmt.Sprintf("queued: handed to compute %s (engine handle %s) by the server before a restart; waiting in its queue", computeName, h)
		return &store.Event{Job: j.Name, Time: s.now(), From: apitypes.StatusQueued, To: apitypes.StatusQueued, Reason: cur.StatusReason}, nil
	})
	if err == nil {
		s.log.Info("adopted the handle of an attempt handed over before a restart", "job", j.Name, "attempt", j.Attempt, "handle", h)
		s.changed(j.Name)
	}
	return err
}

// retakeHandOff takes back an attempt that an earlier server was handing
// over and whose handle is unknown. A queued one goes back to the
// dispatcher with its run token revoked, to be handed over again as a new
// attempt (if the engine got the old one, its runner is refused); one
// whose runner has called keeps running, as its runner and lease decide,
// without a handle.
func (s *Service) retakeHandOff(ctx context.Context, computeName string, j store.Job) error {
	requeued := false
	_, err := s.st.UpdateJobWith(ctx, j.Name, func(cur *store.Job) (store.JobChange, error) {
		requeued = false
		if cur.Attempt != j.Attempt || cur.Handle != j.Handle {
			return store.JobChange{}, nil
		}
		cur.Handle = ""
		if cur.Status != apitypes.StatusQueued {
			return store.JobChange{}, nil
		}
		requeued = true
		cur.StatusReason = fmt.Sprintf("queued: a server restart cut short handing attempt %d to compute %s; it is handed over again as a new attempt", cur.Attempt, computeName)
		return store.JobChange{
			Events:       []store.Event{{Job: j.Name, Time: s.now(), From: apitypes.StatusQueued, To: apitypes.StatusQueued, Reason: cur.StatusReason}},
			DeleteTokens: auth.KindRun,
		}, nil
	})
	if err != nil || !requeued {
		return err
	}
	s.log.Info("took back an attempt whose hand-off a server restart cut short", "job", j.Name, "attempt", j.Attempt, "compute", computeName)
	s.changed(j.Name)
	s.wakeDispatcher()
	return nil
}
