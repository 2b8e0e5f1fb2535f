package workspace

import (
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
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Run dispatches queued jobs, watches runner leases, runs the pool loop and
// reconciles engine handles until ctx is done. The pool loop and the
// engine reconcile have goroutines of their own: they call node providers
// and engines, which may be slow (a Docker stop waits out its grace), and
// the local target's jobs and every runner's lease must not wait on them.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		// The lease check runs on the ticker alone: leases are seconds long,
		// and running it on every kick (each job's end) read every active
		// job once more per job (bench/dispatch).
		s.loop(ctx, s.kick, tick.C, loopPass{name: "dispatch", run: s.dispatch}, loopPass{name: "lease check", run: s.expireLeases, tickOnly: true})
	})
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		s.loop(ctx, s.kickPools, tick.C, loopPass{name: "pools", run: s.reconcilePools})
	})
	wg.Go(func() {
		tick := time.NewTicker(s.cfg.EngineInspect)
		defer tick.Stop()
		s.loop(ctx, nil, tick.C, loopPass{name: "engine reconcile", run: s.reconcileEngines})
	})
	for _, c := range s.controllers {
		wg.Go(func() {
			tick := time.NewTicker(c.Interval())
			defer tick.Stop()
			s.loop(ctx, c.Wake(), tick.C, loopPass{name: c.Name(), run: c.Reconcile})
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(registerTick)
		defer tick.Stop()
		s.loop(ctx, nil, tick.C, loopPass{name: "output registration", run: s.reconcileRegistrations})
	})
	wg.Wait()
	s.handOffs.Wait()
}

// loopPass is one pass of a reconcile loop.
type loopPass struct {
	name     string
	run      func(context.Context) error
	tickOnly bool // run every second (and first), not when kicked
}

// loop runs its passes at once, on every tick and when kicked (a nil kick
// never is), until ctx is done.
func (s *Service) loop(ctx context.Context, kick <-chan struct{}, tick <-chan time.Time, passes ...loopPass) {
	ticked := true
	for {
		// Each pass is guarded as a whole too: a panic the per-record
		// guards did not catch costs one pass, not the server, so the API
		// stays up for the owner to cancel or delete what causes it.
		for _, pass := range passes {
			if pass.tickOnly && !ticked {
				continue
			}
			if err := s.guard(pass.name+" pass", func() error { return pass.run(ctx) }); err != nil && ctx.Err() == nil {
				s.log.Error(pass.name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
			ticked = false
		case <-tick:
			ticked = true
		}
	}
}

// dispatch starts as many queued jobs as their targets have free slots.
func (s *Service) dispatch(ctx context.Context) error {
	// Read before the count: a wake that may free a slot comes after what
	// it changed is stored, so one after this read is seen by the count or
	// tells wakeForSubmit that its fullness is out of date.
	wakes := s.freeingWakes.Load()
	s.fullComputes.Store(nil) // until this pass has counted
	// Counted, not read: the pass runs on every end and many submits.
	busy, err := s.st.CountJobs(ctx, activeStatuses)
	if err != nil {
		return err
	}
	computes, err := s.st.ListComputes(ctx)
	if err != nil {
		return err
	}
	s.unusable.keep(computes)
	free := map[string]int{}
	handsOff := map[string]bool{} // computes whose targets queue themselves
	anyFree := false
	slots := map[string]bool{}
	defer s.slotComputes.Store(&slots)
	for _, c := range computes {
		if s.poolType(c.Type) != nil {
			continue // the pool loop places these
		}
		slots[c.Name] = true
		t, err := s.target(ctx, c.Name)
		if err != nil {
			if !isUnusable(err) {
				s.log.Error("compute target", "compute", c.Name, "err", err)
			}
			continue
		}
		waiting, err := s.inEngineQueue(ctx, c.Name, t)
		if err != nil {
			return err
		}
		free[c.Name] = max(0, t.Capacity()-busy[c.Name]-waiting)
		if queuesItself(t) {
			handsOff[c.Name] = true
			if s.handOffsUnderWay(c.Name) >= maxHandOffs {
				free[c.Name] = 0 // they wait for the next batch
			}
		}
		anyFree = anyFree || free[c.Name] > 0
	}
	full := &fullComputes{wakes: wakes, names: map[string]bool{}}
	for name, n := range free {
		// A target that queues itself hands over in batches, whose ends
		// wake the dispatcher as hand-offs, not as freed slots.
		full.names[name] = n == 0 && !handsOff[name]
	}
	s.fullComputes.Store(full)
	if !anyFree {
		return nil // reading the queue would be wasted work
	}
	cands, err := s.candidates(ctx, computes, free)
	if err != nil {
		return err
	}
	// Attempts for targets that queue themselves are handed over in one
	// batch per compute, beside the loop (handoff.go); the others start
	// one by one, here.
	handOffs := map[string][]string{}
	for _, c := range scheduler.Pick(cands, free) {
		if handsOff[c.Compute] {
			handOffs[c.Compute] = append(handOffs[c.Compute], c.Job)
			continue
		}
		if err := s.guard("job "+c.Job, func() error { return s.start(ctx, c.Job, c.Compute) }); err != nil {
			s.log.Error("start job", "job", c.Job, "err", err)
			if errors.Is(err, errInternal) {
				s.failBroken(ctx, c.Job, err)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(handOffs)) {
		s.handOff(ctx, name, handOffs[name])
	}
	return nil
}

// fullScanEvery is how often the dispatcher looks at the whole queue, to
// fail the jobs of computes that are gone; between, and after, it reads
// of each compute with free slots only the jobs that could take them, so
// a pass costs the slots freed, not the length of the queue
// (bench/dispatch).
const fullScanEvery = time.Second

// candidates are the queued jobs that the free slots could take: for each
// compute, its first free[compute] jobs by priority and submit order (what
// scheduler.Pick would take of the whole queue). Every fullScanEvery it
// first fails the jobs whose compute is gone or unusable: the queue is
// counted by compute, and only those computes' jobs are read (reading
// every queued job, each row decoded, was a tenth of the server's CPU
// under a 1,000-job burst).
func (s *Service) candidates(ctx context.Context, computes []store.Compute, free map[string]int) ([]scheduler.Candidate, error) {
	if time.Since(s.queueScanned) >= fullScanEvery {
		s.queueScanned = time.Now()
		if err := s.failQueuedOfGoneComputes(ctx, computes, free); err != nil {
			return nil, err
		}
	}
	var cands []scheduler.Candidate
	for _, name := range slices.Sorted(maps.Keys(free)) {
		if free[name] == 0 {
			continue
		}
		queued, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: []string{apitypes.StatusQueued}, Compute: name, Handle: store.HandleUnset, ByPriority: true, Limit: free[name]})
		if err != nil {
			return nil, err
		}
		for _, j := range queued {
			cands = append(cands, scheduler.Candidate{Job: j.Name, Compute: j.Compute, Priority: j.Priority, Seq: j.Seq})
		}
	}
	return cands, nil
}

// failQueuedOfGoneComputes fails the queued jobs, not yet in an engine's
// queue, of computes that are not in free (gone, or their target
// unusable) and not placed by the pool loop.
func (s *Service) failQueuedOfGoneComputes(ctx context.Context, computes []store.Compute, free map[string]int) error {
	queued, err := s.st.CountJobs(ctx, []string{apitypes.StatusQueued})
	if err != nil {
		return err
	}
	pool := map[string]bool{}
	for _, c := range computes {
		pool[c.Name] = s.poolType(c.Type) != nil
	}
	for _, name := range slices.Sorted(maps.Keys(queued)) {
		if _, ok := free[name]; ok || pool[name] {
			continue
		}
		// Attempts waiting in an engine's queue are Queued too, but launched.
		jobs, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: []string{apitypes.StatusQueued}, Compute: name, Handle: store.HandleUnset})
		if err != nil {
			return err
		}
		for _, j := range jobs {
			s.failQueued(ctx, j.Name, fmt.Sprintf("compute %s no longer exists or is unusable", j.Compute))
		}
	}
	return nil
}

// start moves a job from Queued to Preparing with a new attempt and a run
// token, then asks its target to launch a runner. (Targets that queue
// themselves are handed their attempts by handOff instead: handoff.go.)
func (s *Service) start(ctx context.Context, name, computeName string) error {
	t, err := s.target(ctx, computeName)
	if err != nil {
		return err
	}
	secret, hash := auth.NewToken()
	var attempt int
	var damaged error // the stored spec, checked in the same read
	var js *spec.Job
	var env *environment.Spec
	// The run token is stored in the attempt's own transaction (one
	// commit per start, not two: bench/dispatch).
	tok := store.Token{Hash: hash, Kind: auth.KindRun, Subject: name}
	started, err := s.st.UpdateJobWith(ctx, name, creatingToken(&tok, func(j *store.Job) (*store.Event, error) {
		if j.Status != apitypes.StatusQueued {
			return nil, errNotQueued
		}
		if js, env, damaged = nextAttempt(j); damaged != nil {
			return nil, errNotQueued // nothing written; failed below
		}
		attempt = j.Attempt
		now := s.now()
		j.Status, j.StatusReason, j.Heartbeat = apitypes.StatusPreparing, "runner starting on compute "+computeName, now
		tok.Attempt, tok.Created = attempt, now
		return &store.Event{Job: name, Time: now, From: apitypes.StatusQueued, To: j.Status, Reason: j.StatusReason}, nil
	}))
	if damaged != nil {
		s.failQueued(ctx, name, damaged.Error())
		return nil
	}
	if errors.Is(err, errNotQueued) {
		return nil
	}
	if err != nil {
		return err
	}
	s.runnerLaunched(name, attempt, "on compute "+computeName)
	l := compute.Launch{Job: name, Attempt: attempt, APIURL: s.cfg.APIURL, RunToken: secret, Spec: js, Environment: env}
	l.Assignment = s.handedAssignment(t, started)
	h, err := t.Launch(ctx, l)
	if err != nil {
		s.finish(ctx, name, attempt, apitypes.StatusFailed, "runner could not be started", nil, err.Error())
		return err
	}
	if h != "" {
		// Stored for the record (inspect and cancel are for targets
		// that queue themselves, but a handle is the attempt's name
		// wherever the target has one).
		if err := s.recordHandle(ctx, name, attempt, h); err != nil {
			return err
		}
	}
	s.changed(name)
	return nil
}

// nextAttempt reads, inside the update of a queued job, its stored spec
// and environment (checked again: an error says why the job cannot run)
// and gives it its next attempt, with no handle yet.
func nextAttempt(j *store.Job) (*spec.Job, *environment.Spec, error) {
	js, err := storedJobSpec(*j)
	if err != nil {
		return nil, nil, err
	}
	env, err := storedEnvironment(*j)
	if err != nil {
		return nil, nil, err
	}
	j.Attempt++
	j.Handle = ""
	return js, env, nil
}

// recordHandle stores the handle of an attempt of a target that does not
// queue itself.
func (s *Service) recordHandle(ctx context.Context, name string, attempt int, h compute.Handle) error {
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if j.Attempt == attempt && !apitypes.IsTerminal(j.Status) {
			j.Handle = string(h)
		}
		return nil, nil
	})
	return err
}

var errNotQueued = errors.New("job is no longer queued")

// creatingToken is fn as a function for UpdateJobWith that also stores
// tok, which fn may complete.
func creatingToken(tok *store.Token, fn func(*store.Job) (*store.Event, error)) func(*store.Job) (store.JobChange, error) {
	return func(j *store.Job) (store.JobChange, error) {
		e, err := fn(j)
		if err != nil {
			return store.JobChange{}, err
		}
		ch := store.JobChange{CreateToken: tok}
		if e != nil {
			ch.Events = []store.Event{*e}
		}
		return ch, nil
	}
}

func (s *Service) failQueued(ctx context.Context, name, why string) {
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if j.Status != apitypes.StatusQueued {
			return nil, errNotQueued
		}
		now := s.now()
		j.Status, j.StatusReason, j.Error, j.Ended = apitypes.StatusFailed, why, why, now
		return &store.Event{Job: name, Time: now, From: apitypes.StatusQueued, To: apitypes.StatusFailed, Reason: why}, nil
	})
	if err != nil && !errors.Is(err, errNotQueued) {
		s.log.Error("fail queued job", "job", name, "err", err)
	}
	s.changed(name)
}

// heard records that a job's runner was heard from now.
func (s *Service) heard(name string) {
	s.mu.Lock()
	s.heartbeats[name] = s.now()
	delete(s.unreached, name)
	s.mu.Unlock()
}

// expireLeases fails jobs whose runner has been silent for longer than the
// lease. After a server restart every runner gets a full lease to report
// back, since silence while the server was down is not the runner's fault.
func (s *Service) expireLeases(ctx context.Context) error {
	active, err := s.st.ListJobs(ctx, store.JobFilter{Statuses: activeStatuses})
	if err != nil {
		return err
	}
	now := s.now()
	for _, j := range active {
		if j.Compute == "" {
			continue // a workload's own record: the jobs it made have the runners
		}
		s.mu.Lock()
		last, ok := s.heartbeats[j.Name]
		s.mu.Unlock()
		if !ok || last.Before(s.started) {
			last = s.started
		}
		if now.Sub(last) <= s.cfg.LeaseTimeout {
			if err := s.tellUnreached(ctx, j, ""); err != nil {
				s.log.Error("say a runner has not reached the server", "job", j.Name, "err", err)
			}
			continue
		}
		if s.onPreemptedNode(ctx, j) != "" {
			// Its runner stops heartbeating once told of the preemption;
			// PreemptGrace bounds the wait, and it is no failure.
			continue
		}
		if s.collectFinalReport(ctx, j) {
			continue
		}
		why := fmt.Sprintf("runner lost: no word from it for %s", now.Sub(last).Round(time.Second))
		if u, ok := s.unreachedFor(j); ok {
			why = "runner lost: " + s.unreachedText(u, now.Sub(u.since))
		}
		s.finish(ctx, j.Name, j.Attempt, apitypes.StatusFailed, why, nil, why)
	}
	return nil
}

// collectFinalReport ends a silent attempt with the final report its
// runner kept on the target when it could not deliver it (it gave up on
// the server), and says whether there was one.
func (s *Service) collectFinalReport(ctx context.Context, j store.Job) bool {
	t, err := s.target(ctx, j.Compute)
	if err != nil {
		return false
	}
	fr, ok := t.(compute.FinalReports)
	if !ok {
		return false
	}
	data, ok := fr.FinalReport(j.Name, j.Attempt)
	if !ok {
		return false
	}
	var rep apitypes.Report
	if err := json.Unmarshal(data, &rep); err != nil || !apitypes.IsTerminal(rep.Status) {
		s.log.Warn("a runner's kept final report is not one; the attempt is failed as lost", "job", j.Name, "attempt", j.Attempt, "err", err)
		return false
	}
	s.log.Info("collected the final report a runner kept", "job", j.Name, "attempt", j.Attempt, "status", rep.Status)
	end := attemptEnd{status: rep.Status, reason: rep.Reason + " (collected from the runner's final report)", exit: rep.ExitCode, msg: rep.Error}
	// Its outputs are checked as if its run token had sent them.
	who := auth.Principal{Kind: auth.KindRun, Subject: j.Name, Attempt: j.Attempt}
	if err := s.checkFinalOutputs(ctx, who, j, rep, &end); err != nil {
		s.log.Error("checking the outputs of a runner's kept final report", "job", j.Name, "attempt", j.Attempt, "err", err)
		return false
	}
	end.runningFor = 0 // its age was the report's when it was kept, not now
	return s.finishWith(ctx, j.Name, j.Attempt, end) == nil
}

// fence checks that who may write the attempt of job and that the attempt
// is the job's current one, so a stale runner cannot write over a newer one.
// It returns the job's record as it read it.
func (s *Service) fence(ctx context.Context, who auth.Principal, name string, attempt int) (store.Job, error) {
	if err := mayWriteAttempt(who, name, attempt); err != nil {
		return store.Job{}, err
	}
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Job{}, apperr.NotFound("job %q does not exist", name)
	}
	if err != nil {
		return store.Job{}, err
	}
	if err := attemptCurrent(rec, attempt); err != nil {
		return store.Job{}, err
	}
	return rec, nil
}

// mayWriteAttempt is the part of the fence that needs no record.
func mayWriteAttempt(who auth.Principal, name string, attempt int) error {
	if !who.MayWriteJob(name) {
		return apperr.Forbidden("this token may not write to job %s", name)
	}
	if who.Kind == auth.KindRun && who.Attempt != attempt {
		return apperr.Forbidden("this token belongs to attempt %d of job %s, not %d", who.Attempt, name, attempt)
	}
	return nil
}

// attemptCurrent is the part of the fence that needs the record.
func attemptCurrent(rec store.Job, attempt int) error {
	if rec.Attempt != attempt {
		return apperr.Conflict("attempt %d of job %s is not current (current is %d)", attempt, rec.Name, rec.Attempt)
	}
	return nil
}

// fencedUpdate is fence and UpdateJob in one store transaction: fn runs
// only on the record of the job whose current attempt is attempt. A runner's
// progress report is then one store call instead of a read, then a read
// and a write (bench/dispatch).
func (s *Service) fencedUpdate(ctx context.Context, who auth.Principal, name string, attempt int, fn func(*store.Job) (*store.Event, error)) (store.Job, error) {
	if err := mayWriteAttempt(who, name, attempt); err != nil {
		return store.Job{}, err
	}
	rec, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if err := attemptCurrent(*j, attempt); err != nil {
			return nil, err
		}
		return fn(j)
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.Job{}, apperr.NotFound("job %q does not exist", name)
	}
	return rec, err
}

// Assignment returns what the runner of an attempt needs.
func (s *Service) Assignment(ctx context.Context, who auth.Principal, name string, attempt int) (*apitypes.Assignment, error) {
	rec, err := s.fence(ctx, who, name, attempt)
	if err != nil {
		return nil, err
	}
	// An assignment shows no metrics: the view is made without reading them.
	v, err := s.jobViewWith(rec, nil)
	if err != nil {
		return nil, err
	}
	if len(v.Unreadable) > 0 {
		why := "its stored record is damaged (" + strings.Join(v.Unreadable, "; ") + "); submit it again"
		s.finish(ctx, name, attempt, apitypes.StatusFailed, why, nil, why)
		return nil, apperr.Conflict("job %s: %s", name, why)
	}
	s.heard(name)
	if v.Status == apitypes.StatusQueued {
		if err := s.runnerStarted(ctx, name, attempt); err != nil {
			return nil, err
		}
	}
	return s.assignmentOf(v, attempt), nil
}

// assignmentOf is the assignment of the attempt of the job v.
func (s *Service) assignmentOf(v *apitypes.Job, attempt int) *apitypes.Assignment {
	a := &apitypes.Assignment{Job: v.Name, Attempt: attempt, Spec: v.Spec, CodeSnapshot: v.CodeSnapshot, InputSnapshots: v.InputSnapshots, RemoteInputs: v.RemoteInputs, Environment: v.Environment,
		OutputLimits: s.outputLimits(), FinalOutputs: true, FinalRunning: true}
	if v.Outputs != nil && attempt > 1 {
		a.ResumeOutputs = v.Outputs.Artifacts
	}
	s.decorateAssignment(v, a)
	return a
}

// handedAssignment is the assignment of the attempt rec has just started,
// as JSON, for a target that hands it to the runner with the launch (the
// local executor), which saves the runner's first call (bench/dispatch).
// What the assignment call does besides is done already: the attempt is
// current and heard from, and it is not waiting in an engine's queue. Nil
// for other targets, and for a record that cannot be read whole: its
// runner fetches the assignment, and the fetch fails the job as damaged.
func (s *Service) handedAssignment(t compute.Target, rec store.Job) json.RawMessage {
	if c, ok := t.(compute.AssignmentCarrier); !ok || !c.CarriesAssignment() {
		return nil
	}
	v, err := s.jobViewWith(rec, nil)
	if err != nil || len(v.Unreadable) > 0 {
		return nil
	}
	raw, err := json.Marshal(s.assignmentOf(v, rec.Attempt))
	if err != nil {
		return nil
	}
	return raw
}

// Heartbeat renews an attempt's lease and says whether it should stop.
func (s *Service) Heartbeat(ctx context.Context, who auth.Principal, name string, attempt int) (*apitypes.HeartbeatReply, error) {
	rec, err := s.fence(ctx, who, name, attempt)
	if err != nil {
		return nil, err
	}
	s.heard(name)
	reply := &apitypes.HeartbeatReply{Cancel: rec.Status == apitypes.StatusCancelRequested || apitypes.IsTerminal(rec.Status)}
	reply.Preempt = !reply.Cancel && s.onPreemptedNode(ctx, rec) != ""
	return reply, nil
}

// ReportStatus records a runner's report. Running and Finalizing are
// progress; Completed, Failed and Canceled end the job, revoke its run
// token, and are idempotent so a runner may resend them.
func (s *Service) ReportStatus(ctx context.Context, who auth.Principal, name string, attempt int, r apitypes.Report) error {
	if r.Rank > 0 && (r.Status == apitypes.StatusRunning || r.Status == apitypes.StatusFinalizing) {
		// Rank 0 speaks for a multi-node job's progress.
		if _, err := s.fence(ctx, who, name, attempt); err != nil {
			return err
		}
		s.heard(name)
		return nil
	}
	switch r.Status {
	case apitypes.StatusRunning, apitypes.StatusFinalizing:
		_, err := s.fencedUpdate(ctx, who, name, attempt, func(j *store.Job) (*store.Event, error) {
			if apitypes.IsTerminal(j.Status) || j.Status == apitypes.StatusCancelRequested || j.Status == r.Status {
				return nil, nil // a cancel in flight or a resend: keep what we have
			}
			from := j.Status
			now := s.now()
			j.Status, j.StatusReason, j.Heartbeat = r.Status, r.Reason, now
			if r.Status == apitypes.StatusRunning {
				j.Started = now
			}
			return &store.Event{Job: name, Time: now, From: from, To: r.Status, Reason: r.Reason}, nil
		})
		if err != nil {
			return err
		}
		s.heard(name)
		s.changed(name)
	case apitypes.StatusCompleted, apitypes.StatusFailed, apitypes.StatusCanceled:
		if r.Rank == 0 && (r.Outputs == nil || r.Outputs.Empty()) {
			// The end of a single-node attempt with no outputs to
			// check, the most common one, is fenced inside its own
			// transaction, without a read before it (bench/dispatch).
			err := s.fencedFinish(ctx, who, name, attempt, r)
			if !errors.Is(err, errSeveralRanks) {
				return err
			}
		}
		rec, err := s.fence(ctx, who, name, attempt)
		if err != nil {
			return err
		}
		s.heard(name)
		end := attemptEnd{status: r.Status, reason: r.Reason, exit: r.ExitCode, msg: r.Error}
		if err := s.checkFinalOutputs(ctx, who, rec, r, &end); err != nil {
			return err
		}
		if len(placementOf(rec).Ranks) > 1 { // a single-node attempt is over at once
			// Rank 0's outputs and Finalizing step are recorded now, as
			// their own calls would have been: the attempt may not be over.
			if err := s.recordApart(ctx, who, name, attempt, r.Rank, &end); err != nil {
				return err
			}
			done, err := s.rankEnded(ctx, name, attempt, r)
			if err != nil || !done {
				return err
			}
		}
		if r.Rank > 0 {
			end.reason = fmt.Sprintf("node rank %d: %s", r.Rank, end.reason)
		}
		return s.finishWith(ctx, name, attempt, end)
	case apitypes.StatusPreempted:
		rec, err := s.fence(ctx, who, name, attempt)
		if err != nil {
			return err
		}
		s.heard(name)
		var end attemptEnd
		if err := s.checkFinalOutputs(ctx, who, rec, r, &end); err != nil {
			return err
		}
		if err := s.recordApart(ctx, who, name, attempt, r.Rank, &end); err != nil {
			return err
		}
		node := s.onPreemptedNode(ctx, rec)
		if ranks := placementOf(rec).Ranks; node == "" && r.Rank < len(ranks) {
			node = ranks[r.Rank].Node // the node went since; the attempt still ends
		}
		if node == "" {
			return apperr.Invalid("status: attempt %d of job %s runs on no cluster node, which alone can be preempted; report how the command ended", attempt, name)
		}
		return s.requeuePreempted(ctx, name, attempt, node, "node "+node+" was preempted; the runner stopped the job and kept its outputs")
	default:
		if _, err := s.fence(ctx, who, name, attempt); err != nil {
			return err
		}
		return apperr.Invalid("status: a runner may report Running, Finalizing, Completed, Failed, Canceled or Preempted, not %q", r.Status)
	}
	return nil
}

// finish ends an attempt with a terminal status (once: a later call for an
// ended job changes nothing) and revokes the attempt's run token.
func (s *Service) finish(ctx context.Context, name string, attempt int, status, reason string, exit *int, msg string) error {
	return s.finishWith(ctx, name, attempt, attemptEnd{status: status, reason: reason, exit: exit, msg: msg})
}

// attemptEnd is how an attempt ended, as finishWith records it.
type attemptEnd struct {
	status, reason string
	exit           *int
	msg            string
	// outputs, when not nil, are the attempt's outputs (checked), recorded
	// with the end.
	outputs json.RawMessage
	// finalizing, when not empty, is the reason of a Finalizing step that
	// the runner did not report apart: recorded just before the end, as
	// ReportStatus would have recorded the report.
	finalizing string
	// running, likewise, is the reason of a Running step not reported
	// apart, recorded (from Preparing only) runningFor before the end.
	running    string
	runningFor time.Duration
}

// errSeveralRanks is fencedFinish's answer for an attempt of several node
// ranks, whose end is recorded rank by rank.
var errSeveralRanks = errors.New("the attempt has several node ranks")

// fencedFinish is ReportStatus for the final report r of rank 0 that
// carries no outputs to check: the fence (the attempt is current) is
// checked on the record the end's transaction reads, so the end is one
// store call, not a read and then a transaction. It returns
// errSeveralRanks, having changed nothing, when the attempt has several
// node ranks.
func (s *Service) fencedFinish(ctx context.Context, who auth.Principal, name string, attempt int, r apitypes.Report) error {
	if err := mayWriteAttempt(who, name, attempt); err != nil {
		return err
	}
	end := attemptEnd{status: r.Status, reason: r.Reason, exit: r.ExitCode, msg: r.Error, finalizing: r.Finalizing,
		running: r.Running, runningFor: runningFor(r)}
	if r.Outputs != nil {
		raw, err := json.Marshal(*r.Outputs)
		if err != nil {
			return err
		}
		end.outputs = raw
	}
	fenced := false // the runner was heard, as by the read the old path fences with
	err := s.endAttempt(ctx, name, attempt, end, func(j store.Job) error {
		if err := attemptCurrent(j, attempt); err != nil {
			return err
		}
		if len(placementOf(j).Ranks) > 1 {
			return errSeveralRanks
		}
		fenced = true
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return apperr.NotFound("job %q does not exist", name)
	}
	if err != nil && fenced {
		// The end was not recorded (the runner sends it again): its
		// lease is renewed as the old path's fence renewed it. A
		// recorded end drops the lease.
		s.heard(name)
	}
	return err
}

// finishWith is finish with the outputs and Finalizing step a runner's
// final report may carry, all in one transaction with the end.
func (s *Service) finishWith(ctx context.Context, name string, attempt int, end attemptEnd) error {
	return s.endAttempt(ctx, name, attempt, end, nil)
}

// endAttempt is finishWith, with fence, when not nil, checked first on the
// record the transaction read: an error it returns is returned as it is,
// and nothing is changed.
func (s *Service) endAttempt(ctx context.Context, name string, attempt int, end attemptEnd, fence func(store.Job) error) error {
	// The run token goes in the end's own transaction (one commit, not
	// two: bench/dispatch), even when the job had ended already, as a
	// resent end must still leave no token behind.
	owes, slot, err := s.recordEnd(ctx, name, attempt, end, fence)
	if err != nil {
		return err
	}
	if owes {
		s.registerOwed(ctx, name)
	}
	s.mu.Lock()
	delete(s.heartbeats, name)
	delete(s.unreached, name)
	delete(s.diskFull, name)
	delete(s.cancelAsked, name)
	delete(s.engineCanceled, name)
	s.mu.Unlock()
	s.scopes.forget(name)
	s.changed(name)
	if slot {
		s.wakeSlotDispatcher() // a pool pass would find nothing changed
	} else {
		s.wakeDispatcher()
	}
	return nil
}

// recordEnd is endAttempt's transaction: it records the end and, with a
// completion, the outputs it owes a data asset registration. Its return
// says whether it recorded a completion that owes one: most jobs declare
// no output to register, and the registration's read of the record they
// would otherwise pay was a share of a small job's server CPU
// (bench/dispatch). slot says whether the job ran on a compute whose
// jobs the dispatcher starts, on no pool node (onSlotCompute).
func (s *Service) recordEnd(ctx context.Context, name string, attempt int, end attemptEnd, fence func(store.Job) error) (owes, slot bool, err error) {
	_, err = s.st.UpdateJobWith(ctx, name, func(j *store.Job) (store.JobChange, error) {
		owes = false // a transaction tried again starts over
		slot = s.onSlotCompute(*j)
		if fence != nil {
			if err := fence(*j); err != nil {
				return store.JobChange{}, err
			}
		}
		ch := store.JobChange{DeleteTokens: auth.KindRun}
		if apitypes.IsTerminal(j.Status) || j.Attempt != attempt {
			return ch, nil
		}
		from := j.Status
		now := s.now()
		if end.outputs != nil {
			j.Outputs = end.outputs
		}
		if end.running != "" && from == apitypes.StatusPreparing {
			// As ReportStatus records Running, at the time the command
			// started (never before the attempt's start).
			at := now.Add(-end.runningFor)
			if at.Before(j.Heartbeat) {
				at = j.Heartbeat
			}
			if at.After(now) {
				at = now
			}
			ch.Events = append(ch.Events, store.Event{Job: name, Time: at, From: from, To: apitypes.StatusRunning, Reason: end.running})
			j.Started, from = at, apitypes.StatusRunning
		}
		if end.finalizing != "" && from != apitypes.StatusCancelRequested && from != apitypes.StatusFinalizing {
			ch.Events = append(ch.Events, store.Event{Job: name, Time: now, From: from, To: apitypes.StatusFinalizing, Reason: end.finalizing})
			from = apitypes.StatusFinalizing
		}
		reason := end.reason
		if end.status == apitypes.StatusCanceled && j.CancelBy != "" {
			reason = "canceled by " + j.CancelBy
		}
		j.Status, j.StatusReason, j.ExitCode, j.Error, j.Ended, j.Heartbeat = end.status, reason, end.exit, end.msg, now, now
		if j.Started.IsZero() && end.status != apitypes.StatusCanceled {
			j.Started = now
		}
		ch.Events = append(ch.Events, store.Event{Job: name, Time: now, From: from, To: end.status, Reason: reason})
		j.Outputs = owedOutputs(j.Outputs, j.Spec, end.status == apitypes.StatusCompleted)
		owes = len(pendingOutputs(j.Outputs)) > 0
		return ch, nil
	})
	return owes, slot, err
}

// rankEnded records the end of one node rank of a multi-node attempt and
// says whether the attempt is over: at the first rank that did not
// complete (the others are then stopped through their agents), or when the
// last rank completed. A single-node attempt is over at once.
func (s *Service) rankEnded(ctx context.Context, name string, attempt int, r apitypes.Report) (bool, error) {
	over := true
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		pl := placementOf(*j)
		if j.Attempt != attempt || len(pl.Ranks) < 2 {
			return nil, nil
		}
		if r.Rank >= len(pl.Ranks) {
			return nil, apperr.Invalid("rank: attempt %d of job %s has %d node ranks, not %d", attempt, name, len(pl.Ranks), r.Rank+1)
		}
		pl.Ranks[r.Rank].Status, pl.Ranks[r.Rank].ExitCode = r.Status, r.ExitCode
		for _, rp := range pl.Ranks {
			if rp.Status != apitypes.StatusCompleted {
				over = r.Status != apitypes.StatusCompleted
				break
			}
		}
		raw, err := json.Marshal(pl)
		if err != nil {
			return nil, err
		}
		j.Placement = raw
		return nil, nil
	})
	return over, err
}
