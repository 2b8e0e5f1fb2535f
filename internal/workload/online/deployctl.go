package online

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/serving"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// The deployment controller: one pass (reconcileDeployments) every
// deployTick, and at once when a replica's job changes. Per deployment it
//
//   - drops replicas whose jobs ended, and counts those that ended before
//     they were ever ready: during Creating or Updating one such is the
//     deployment's failure (the reason is the end of its log, the
//     traceback of init()); afterwards three in a row are;
//   - finds each replica's address in its log (the inference server's
//     first status line) and probes GET / on it: readiness takes it into
//     routing and out again, liveness past its failure threshold restarts
//     it (its job is cancelled and replaced);
//   - starts replica jobs up to the count it wants (instance_count, or
//     autoscale's target) and drains the ones beyond it;
//   - rolls updates: replicas of the new generation start beside the old,
//     and the old drain once every new one is ready;
//   - drains before it stops: a draining replica leaves routing first and
//     its job is cancelled once the gateway has no request in flight to it.
//
// What the controller knows of a replica beyond its job (its address, its
// probes) is in memory: a restarted server reads it again from the logs
// and probes.

const (
	deployTick = 200 * time.Millisecond
	// replicaFailuresToFail is how many replicas in a row may end before
	// they were ever ready before a Succeeded deployment is Failed.
	replicaFailuresToFail = 3
)

// DeploymentLoad is what the router says of a deployment's traffic.
type DeploymentLoad struct {
	InFlight int // requests being answered
	Waiting  int // requests waiting for a free replica
	// PerReplica are the requests in flight per replica URL, including
	// replicas no longer routed that still finish requests.
	PerReplica  map[string]int
	LastRequest time.Time
	Requests    int64
	Errors      int64
	P50, P99    time.Duration
}

// RoutedDeployment is a deployment as the router needs it.
type RoutedDeployment struct {
	Replicas []string // base URLs of ready replicas
	// Workers are, by replica URL, its workers' own sockets (unix:/PATH)
	// for a replica on this host that has them.
	Workers map[string][]string
	// Secrets are, by replica URL, the replica's secret, which the router
	// sends with every request to it (replicaSecret).
	Secrets        map[string]secrets.Secret
	RequestTimeout time.Duration
	MaxConcurrent  int
	MaxQueueWait   time.Duration
}

type deployCtl struct {
	mu      sync.Mutex
	started time.Time
	reps    map[string]*replicaLive    // by job
	ended   map[string][]string        // "endpoint/deployment" → replica jobs ended lately
	demand  map[string]time.Time       // cold starts asked, by "endpoint/deployment"
	waiters map[string][]chan struct{} // cold starts waiting for a ready replica
	// routedAny says, by "endpoint/deployment", whether the router was
	// last given at least one replica of it (release keeps it).
	routedAny map[string]bool
	routed    map[string]string       // endpoint → what was last routed
	scale     map[string]*ScaleWindow // autoscale's, by "endpoint/deployment"
	kube      map[string]*kubeLive    // Kubernetes deployments, by "endpoint/deployment"
}

type replicaLive struct {
	key     string // endpoint/deployment
	attempt int
	offset  int64
	partial []byte
	address string // host:port, from its first status line
	// socket is the Unix socket it listens on as well, when the server
	// (and so the gateway in it) can reach it there: it runs on this
	// host (inferenceserver.Status.OnThisHost). Empty: reached over TCP.
	socket string
	// workers are its workers' own Unix sockets, when it is on this host
	// and has them (inferenceserver.Status.WorkersOnThisHost; found sets
	// them only with socket): the gateway sends its requests there,
	// balancing across the workers itself.
	workers  []string
	ready    bool
	everUp   bool
	probing  bool      // a readiness probe is under way
	probeAt  time.Time // when the next readiness probe is due
	okRun    int       // readiness probes that passed in a row
	failRun  int       // readiness probes that failed in a row
	living   bool      // a liveness probe is under way
	liveAt   time.Time // when the next liveness probe is due
	liveFail int       // liveness probes that failed in a row
	draining time.Time // when it left routing; zero while it serves
	canceled bool
	restart  string // why liveness restarts it
}

func newDeployCtl(now time.Time) *deployCtl {
	return &deployCtl{started: now, reps: map[string]*replicaLive{}, ended: map[string][]string{},
		demand: map[string]time.Time{}, waiters: map[string][]chan struct{}{}, routed: map[string]string{}, routedAny: map[string]bool{},
		scale: map[string]*ScaleWindow{}, kube: map[string]*kubeLive{}}
}

func (c *deployCtl) isReplica(job string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.reps[job]
	return ok
}

// readsLog says whether a chunk of the log of attempt of job may change
// what the controller does: job is a replica whose status line the
// controller has not found in that attempt's log yet (readReplicaLog).
func (c *deployCtl) readsLog(job string, attempt int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.reps[job]
	return ok && (l.address == "" || l.attempt != attempt)
}

func (c *deployCtl) live(job, key string) *replicaLive {
	l, ok := c.reps[job]
	if !ok {
		l = &replicaLive{key: key}
		c.reps[job] = l
	}
	return l
}

func (c *deployCtl) forget(job, key string) {
	delete(c.reps, job)
	c.ended[key] = append(c.ended[key], job)
	if n := len(c.ended[key]); n > 5 {
		c.ended[key] = c.ended[key][n-5:]
	}
}

func (c *deployCtl) endedJobs(endpoint, name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ended[endpoint+"/"+name])
}

func (c *deployCtl) replicaView(ctx context.Context, s *Service, r replicaRec) apitypes.DeploymentReplica {
	v := apitypes.DeploymentReplica{Job: r.Job, Generation: r.Generation, State: apitypes.ReplicaPreparing}
	if j, err := s.st.GetJob(ctx, r.Job); err == nil {
		v.JobStatus = j.Status
		if j.Status == apitypes.StatusQueued || j.Status == apitypes.StatusPreparing {
			v.Reason = j.StatusReason
		}
	} else {
		v.JobStatus = "NotSubmitted"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.reps[r.Job]; ok {
		v.Address, v.Socket, v.WorkerSockets = l.address, l.socket, l.workers
		switch {
		case !l.draining.IsZero():
			v.State = apitypes.ReplicaDraining
		case l.ready:
			v.State = apitypes.ReplicaReady
		case l.everUp:
			v.State = apitypes.ReplicaNotReady
		}
	}
	return v
}

// ColdStart is the gateway's hook for a request to a deployment with no
// ready replica: it asks the controller for one (a deployment scaled to
// zero scales to one) and returns once the deployment has one routed, or
// ctx ends. A deployment that cannot get one (it failed, or is deleted)
// returns an error at once.
func (s *Service) ColdStart(ctx context.Context, endpoint, deployment string) error {
	rec, err := s.st.GetDeployment(ctx, endpoint, deployment)
	if err != nil {
		return fmt.Errorf("deployment %s: %w", deployment, err)
	}
	switch rec.State {
	case apitypes.DeploymentFailed:
		return fmt.Errorf("deployment %s failed: %s", deployment, firstLine(rec.Reason))
	case apitypes.DeploymentDeleting:
		return fmt.Errorf("deployment %s is being deleted", deployment)
	}
	key := endpoint + "/" + deployment
	ch := make(chan struct{})
	c := s.deployCtl
	c.mu.Lock()
	c.demand[key] = s.now()
	if c.routedAny[key] {
		// Routed with a replica since the gateway looked: a waiter
		// registered now would wait for the next change instead.
		c.mu.Unlock()
		return nil
	}
	c.waiters[key] = append(c.waiters[key], ch)
	c.mu.Unlock()
	s.kickDeployments()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// reconcileDeployments is one pass of the controller.
func (s *Service) reconcileDeployments(ctx context.Context) error {
	recs, err := s.st.ListDeployments(ctx, "")
	if err != nil {
		return err
	}
	c := s.deployCtl
	c.mu.Lock()
	idle := len(recs) == 0 && len(c.routed) == 0 && len(c.reps) == 0
	c.mu.Unlock()
	if idle {
		return nil
	}
	eps, err := s.st.ListEndpoints(ctx)
	if err != nil {
		return err
	}
	endpoints := map[string]store.Endpoint{}
	for _, e := range eps {
		endpoints[e.Name] = e
	}
	for _, rec := range recs {
		s.startProbes(rec)
	}
	var errs []error
	for _, rec := range recs {
		if err := s.reconcileDeployment(ctx, rec.Endpoint, rec.Name, endpoints); err != nil {
			errs = append(errs, fmt.Errorf("deployment %s/%s: %w", rec.Endpoint, rec.Name, err))
		}
	}
	for _, e := range eps {
		if err := s.routeIfChanged(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startProbes starts the probes that are due, each in a goroutine of its
// own, so that a replica that hangs delays no other. A replica is probed
// for readiness at every pass until it first answers, then every
// readiness_probe.period; for liveness every liveness_probe.period from
// its initial_delay after it first answered.
func (s *Service) startProbes(rec store.Deployment) {
	doc, set, err := decodeDeployment(rec)
	if err != nil {
		return
	}
	c := s.deployCtl
	now := s.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range set.Replicas {
		l, ok := c.reps[r.Job]
		if !ok || l.address == "" || l.canceled || !l.draining.IsZero() {
			continue
		}
		if !l.probing && (!l.everUp || !now.Before(l.probeAt)) {
			l.probing = true
			go s.probeReplica(r.Job, l.attempt, l.url(), doc.Spec, false)
		}
		if l.everUp && !l.living && !now.Before(l.liveAt) {
			l.living = true
			go s.probeReplica(r.Job, l.attempt, l.url(), doc.Spec, true)
		}
	}
}

// probeReplica probes one replica (attempt of job, at baseURL) and
// counts the answer: readiness takes it into routing and out, liveness
// past its failure_threshold restarts it.
func (s *Service) probeReplica(job string, attempt int, baseURL string, d *spec.OnlineDeployment, liveness bool) {
	p := d.ReadinessProbe
	if liveness {
		p = d.LivenessProbe
	}
	ok := true
	if s.cfg.ProbeReplica != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cmp.Or(p.Timeout, 2))*time.Second)
		secret, _ := s.replicaSecret(job, attempt)
		ok = s.cfg.ProbeReplica(ctx, baseURL, secret) == nil
		cancel()
	}
	period := time.Duration(cmp.Or(p.Period, 10)) * time.Second
	c := s.deployCtl
	c.mu.Lock()
	l, live := c.reps[job]
	if !live {
		c.mu.Unlock()
		return
	}
	kick := false
	now := s.now()
	switch {
	case liveness:
		l.living, l.liveAt = false, now.Add(period)
		if ok {
			l.liveFail = 0
		} else if l.liveFail++; l.liveFail >= cmp.Or(p.FailureThreshold, 30) && l.restart == "" {
			l.restart, kick = fmt.Sprintf("its liveness probe failed %d times in a row", l.liveFail), true
		}
	case ok:
		l.probing, l.probeAt = false, now.Add(period)
		l.okRun, l.failRun = l.okRun+1, 0
		if !l.everUp {
			// The first success after the server said it listens: its
			// workers' init() returned (the server answers 200 only
			// then), so it takes requests now rather than after
			// initial_delay, which delays the probes that follow
			// (docs/endpoints.md).
			l.everUp, l.ready, kick = true, true, true
			l.liveAt = now.Add(time.Duration(*d.LivenessProbe.InitialDelay) * time.Second)
			l.probeAt = now.Add(time.Duration(*d.ReadinessProbe.InitialDelay) * time.Second)
		} else if !l.ready && l.okRun >= cmp.Or(p.SuccessThreshold, 1) {
			l.ready, kick = true, true
		}
	default:
		l.probing, l.okRun = false, 0
		if l.everUp {
			l.probeAt = now.Add(period)
			if l.failRun++; l.failRun >= cmp.Or(p.FailureThreshold, 30) && l.ready {
				l.ready, kick = false, true
			}
		}
	}
	c.mu.Unlock()
	if kick {
		s.kickDeployments()
	}
}

// reconcileDeployment brings one deployment a step toward what it wants.
// It holds epMu, so that an API call's write and its own do not cross.
func (s *Service) reconcileDeployment(ctx context.Context, endpoint, name string, endpoints map[string]store.Endpoint) error {
	s.epMu.Lock()
	defer s.epMu.Unlock()
	rec, err := s.st.GetDeployment(ctx, endpoint, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	doc, set, err := decodeDeployment(rec)
	if err != nil {
		return err
	}
	key := endpoint + "/" + name
	_, hasEndpoint := endpoints[endpoint]
	deleting := rec.State == apitypes.DeploymentDeleting || !hasEndpoint
	if doc.Kube {
		return s.reconcileKubeDeployment(ctx, rec, doc, set, deleting)
	}
	before := string(rec.Replicas) + rec.State + rec.Reason
	c := s.deployCtl
	now := s.now()

	// 1. The replicas' jobs: ended ones go, the others are read.
	var lastFailure string
	kept := set.Replicas[:0:0]
	for _, r := range set.Replicas {
		j, err := s.st.GetJob(ctx, r.Job)
		if errors.Is(err, store.ErrNotFound) {
			if r.Submitted || deleting {
				continue
			}
			kept = append(kept, r) // submitted below
			continue
		}
		if err != nil {
			return err
		}
		r.Submitted = true
		c.mu.Lock()
		l := c.live(r.Job, key)
		if apitypes.IsTerminal(j.Status) {
			if !l.everUp && l.draining.IsZero() && !l.canceled && r.Generation == doc.Generation && j.Status != apitypes.StatusCanceled {
				set.Failures++
				lastFailure = s.replicaFailure(j)
			}
			c.forget(r.Job, key)
			c.mu.Unlock()
			s.log.Info("replica ended", "endpoint", endpoint, "deployment", name, "job", r.Job, "status", j.Status)
			continue
		}
		if l.everUp {
			set.Failures = 0
		}
		s.readReplicaLog(j, l)
		restart := l.restart
		if restart != "" && !l.canceled {
			l.canceled = true
		} else {
			restart = ""
		}
		c.mu.Unlock()
		if restart != "" {
			s.log.Warn("replica restarted", "endpoint", endpoint, "deployment", name, "job", r.Job, "why", restart)
			s.cancelReplica(ctx, r.Job)
		}
		kept = append(kept, r)
	}
	set.Replicas = kept

	// 2. Failures.
	if lastFailure != "" && !deleting && rec.State != apitypes.DeploymentFailed &&
		(rec.State == apitypes.DeploymentCreating || rec.State == apitypes.DeploymentUpdating || set.Failures >= replicaFailuresToFail) {
		rec.State, rec.Reason = apitypes.DeploymentFailed, lastFailure
		s.log.Error("deployment failed", "endpoint", endpoint, "deployment", name, "reason", firstLine(lastFailure))
	}

	// 3. How many it wants, and of which generation.
	want := 0
	if !deleting && rec.State != apitypes.DeploymentFailed {
		want = s.wantReplicas(key, doc, set, rec.Updated, now)
	}
	var cur, old []replicaRec
	oldLeft := 0 // replicas of older generations, draining ones too
	c.mu.Lock()
	readyCur := 0
	for _, r := range set.Replicas {
		l := c.live(r.Job, key)
		if r.Generation != doc.Generation {
			oldLeft++
		}
		switch {
		case r.Generation == doc.Generation && l.draining.IsZero() && !l.canceled:
			cur = append(cur, r)
			if l.ready {
				readyCur++
			}
		case r.Generation != doc.Generation && l.draining.IsZero():
			old = append(old, r)
		}
	}
	drain := func(r replicaRec) {
		if l := c.live(r.Job, key); l.draining.IsZero() {
			l.draining = now
		}
	}
	switch {
	case rec.State == apitypes.DeploymentFailed:
		// A failed generation stops; what serves keeps serving.
		for _, r := range cur {
			if !c.live(r.Job, key).ready {
				drain(r)
			}
		}
	case len(cur) > want:
		// Drain the extras: those not ready first, then the newest.
		slices.SortStableFunc(cur, func(a, b replicaRec) int {
			ra, rb := c.live(a.Job, key).ready, c.live(b.Job, key).ready
			if ra != rb {
				if ra {
					return 1
				}
				return -1
			}
			return strings.Compare(b.Job, a.Job) // newest first (names end in their number)
		})
		for _, r := range cur[:len(cur)-want] {
			drain(r)
		}
	}
	if deleting || (rec.State != apitypes.DeploymentFailed && readyCur >= want) {
		for _, r := range old {
			drain(r)
		}
	}
	c.mu.Unlock()

	for range max(0, want-len(cur)) {
		r := replicaRec{Job: fmt.Sprintf("%s-%s-%s-%d", endpoint, name, doc.ID, set.Next), Generation: doc.Generation}
		set.Next++
		set.Replicas = append(set.Replicas, r)

	}

	// 4. Draining replicas stop once nothing is in flight to them.
	s.stopDrained(ctx, key, endpoint, name, doc, set)

	// 5. State.
	switch rec.State {
	case apitypes.DeploymentCreating, apitypes.DeploymentUpdating:
		// Succeeded once the old generation's replicas are gone, not only
		// out of routing: a client told Succeeded gets the new version.
		if readyCur >= want && oldLeft == 0 {
			rec.State = apitypes.DeploymentSucceeded
			s.log.Info("deployment succeeded", "endpoint", endpoint, "deployment", name, "replicas", readyCur, "generation", doc.Generation)
		}
	}
	if deleting && len(set.Replicas) == 0 {
		if err := s.st.DeleteDeployment(ctx, endpoint, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		c.mu.Lock()
		delete(c.scale, key)
		delete(c.demand, key)
		delete(c.ended, key) // a deployment made again by this name starts with no logs
		delete(c.routedAny, key)
		c.mu.Unlock()
		s.log.Info("deployment deleted", "endpoint", endpoint, "deployment", name)
		return nil
	}

	// Persist before submitting: a replica's name is in the record before
	// its job exists, so a server stopped in between creates it later
	// rather than losing it.
	var pending []replicaRec
	for _, r := range set.Replicas {
		if !r.Submitted {
			pending = append(pending, r)
		}
	}
	if err := encodeDeployment(&rec, doc, set); err != nil {
		return err
	}
	if string(rec.Replicas)+rec.State+rec.Reason != before {
		rec.Updated = now
		if err := s.st.UpdateDeployment(ctx, rec); err != nil {
			return err
		}
	}
	if len(pending) == 0 {
		return nil
	}
	for _, r := range pending {
		if err := s.submitReplica(ctx, rec, doc, r); err != nil {
			s.log.Error("replica not started", "endpoint", endpoint, "deployment", name, "job", r.Job, "err", err)
			rec.State, rec.Reason = apitypes.DeploymentFailed, fmt.Sprintf("replica %s could not be started: %v", r.Job, err)
			set.Replicas = slices.DeleteFunc(set.Replicas, func(x replicaRec) bool { return x.Job == r.Job })
			continue
		}
		for i := range set.Replicas {
			if set.Replicas[i].Job == r.Job {
				set.Replicas[i].Submitted = true
			}
		}
	}
	if err := encodeDeployment(&rec, doc, set); err != nil {
		return err
	}
	return s.st.UpdateDeployment(ctx, rec)
}

// stopDrained cancels the jobs of draining replicas that have nothing in
// flight (or ran past the request timeout with something still in flight,
// which the gateway then answers as it answers a lost replica).
func (s *Service) stopDrained(ctx context.Context, key, endpoint, name string, doc *deploymentDoc, set *replicaSet) {
	var load DeploymentLoad
	if s.cfg.Router != nil {
		load = s.cfg.Router.Load(endpoint)[name]
	}
	grace := time.Duration(doc.Spec.RequestSettings.RequestTimeoutMS)*time.Millisecond + time.Second
	now := s.now()
	c := s.deployCtl
	var stop []string
	c.mu.Lock()
	for _, r := range set.Replicas {
		l := c.live(r.Job, key)
		if l.draining.IsZero() || l.canceled {
			continue
		}
		// Wait one pass after it left routing: the gateway's snapshot
		// without it is set at the end of the pass that drained it.
		left := now.Sub(l.draining) >= deployTick
		if !l.everUp || (left && load.PerReplica[l.url()] == 0) || now.Sub(l.draining) > grace {
			l.canceled = true
			stop = append(stop, r.Job)
		}
	}
	c.mu.Unlock()
	for _, job := range stop {
		s.cancelReplica(ctx, job)
	}
}

func (s *Service) cancelReplica(ctx context.Context, job string) {
	if _, err := s.core.CancelJob(ctx, auth.Principal{Kind: auth.KindOwner, Subject: "deployment-controller"}, job); err != nil && apperr.CodeOf(err) != apperr.CodeNotFound {
		s.log.Error("replica not cancelled", "job", job, "err", err)
	}
}

// wantReplicas is how many replicas of the current generation the
// deployment wants now (DecideScale), from its traffic, the cold starts
// that asked for a replica and since, when it was created or last
// changed; it keeps autoscale's target in set and its window in memory.
func (s *Service) wantReplicas(key string, doc *deploymentDoc, set *replicaSet, since, now time.Time) int {
	// The gateway's Load takes a snapshot of every deployment of the
	// endpoint (percentiles included): a fixed count goes without it.
	var load DeploymentLoad
	if s.cfg.Router != nil && autoscaled(doc.Spec) {
		endpoint, name, _ := strings.Cut(key, "/")
		load = s.cfg.Router.Load(endpoint)[name]
	}
	c := s.deployCtl
	c.mu.Lock()
	defer c.mu.Unlock()
	d := DecideScale(ScaleState{Deployment: doc.Spec, Target: set.Target, Window: c.scale[key], Load: load,
		Demanded: c.demand[key], Started: c.started, Changed: since}, now)
	if d.Window != nil {
		c.scale[key], set.Target = d.Window, &d.Replicas
	}
	return d.Replicas
}

// found takes where a replica's status line says it listens: its TCP
// address, and its Unix socket when that is reachable from this host.
func (l *replicaLive) found(st inferenceserver.Status) {
	l.address, l.socket, l.workers = st.Address, "", nil
	if st.OnThisHost() {
		l.socket = st.Unix
		l.workers = st.WorkersOnThisHost()
	}
}

// workerURLs are the URLs the gateway reaches the replica's workers at
// (nil: through the replica's own URL). The caller holds c.mu.
func (l *replicaLive) workerURLs() []string {
	if len(l.workers) == 0 {
		return nil
	}
	urls := make([]string, len(l.workers))
	for i, w := range l.workers {
		urls[i] = inferenceserver.UnixURL(w)
	}
	return urls
}

// url is the base URL the gateway and the probes reach the replica at:
// its Unix socket when it is on this host, else its TCP address. The
// gateway counts its requests in flight by it. The caller holds c.mu.
func (l *replicaLive) url() string {
	if l.socket != "" {
		return inferenceserver.UnixURL(l.socket)
	}
	return inferenceserver.URL(l.address)
}

// readReplicaLog reads the new part of a replica's log for the inference
// server's status line with its address. The caller holds c.mu.
func (s *Service) readReplicaLog(j store.Job, l *replicaLive) {
	if j.Attempt == 0 {
		return
	}
	if l.attempt != j.Attempt {
		*l = replicaLive{key: l.key, attempt: j.Attempt, draining: l.draining, canceled: l.canceled}
	}
	if l.address != "" {
		return
	}
	var b bytes.Buffer
	n, _ := s.core.ReadAttemptLog(j.Name, j.Attempt, 0, l.offset, 256<<10, &b)
	l.offset += n
	data := append(l.partial, b.Bytes()...)
	for {
		line, rest, ok := bytes.Cut(data, []byte("\n"))
		if !ok {
			break
		}
		data = rest
		if st, ok := inferenceserver.ParseStatus(line); ok {
			l.found(st)
			break
		}
	}
	if len(data) > 64<<10 { // a line that long is no status line
		data = nil
	}
	l.partial = slices.Clone(data)
}

// replicaFailure says why a replica that was never ready ended: its job's
// error and the end of its log, from the last traceback on.
func (s *Service) replicaFailure(j store.Job) string {
	msg := fmt.Sprintf("replica %s %s before it was ready: %s", j.Name, strings.ToLower(j.Status), cmp.Or(j.Error, j.StatusReason))
	tail := s.logTail(j.Name, j.Attempt, 16<<10)
	if i := strings.LastIndex(tail, "Traceback (most recent call last):"); i >= 0 {
		tail = tail[i:]
	} else {
		tail = lastLines(tail, 20)
	}
	if tail = strings.TrimSpace(tail); tail != "" {
		msg += "\n" + tail
	}
	return msg
}

// replicaCommand is a replica job's command: Ferry's inference server
// (the job's input ferry_inference_server) serving the scoring script on
// the node's address (MASTER_ADDR, which a pool node's assignment gives;
// 127.0.0.1 on the local target) and a port of its choosing, which its
// first status line says, and on a Unix socket (ReplicaSocket) in a
// folder of its working directory that the server makes private to the
// replica's account (0700): a gateway on the same host uses the socket
// instead, as a request there costs less CPU than over loopback TCP, CPU
// that on a shared host comes out of the replica's. A container job's
// folder is mounted at the same path, so its socket is reachable from the
// host. The server requires the replica's secret (replicaSecret, which
// the runner gives the job from its assignment) of every request, on the
// socket and the port alike, and refuses to start without one.
// AZUREML_MODEL_DIR is as modelDir lays it out.
func replicaCommand(d *spec.OnlineDeployment, hasModel bool, modelFolder string) string {
	q := serving.ShellQuote
	var b strings.Builder
	setup, dir := serving.ModelDir(hasModel, modelFolder)
	b.WriteString(setup)
	b.WriteString("export AZUREML_ENTRY_SCRIPT=" + q(d.CodeConfiguration.ScoringScript) + ` AML_APP_ROOT="$PWD"` + dir)
	if _, ok := d.EnvironmentVariables["WORKER_COUNT"]; !ok {
		b.WriteString(" WORKER_COUNT=1")
	}
	b.WriteString(`; exec python3 -u "${{inputs.ferry_inference_server}}/` + inferenceserver.Program + `" --script ` + q(d.CodeConfiguration.ScoringScript) +
		` --host "${MASTER_ADDR:-127.0.0.1}" --port 0 --unix "$PWD/` + ReplicaSocket + `" ` + inferenceserver.RequireSecretFlag)
	return b.String()
}

// ReplicaSocketDir is the folder, in a replica job's working directory,
// of its Unix sockets; the replica makes it private to its account
// (0700), so that only that account and root (the server, with the
// gateway) can reach them or put other sockets in their place.
const ReplicaSocketDir = ".ferry-replica"

// ReplicaSocket is the path of a replica's Unix socket in its job's
// working directory (its workers' are beside it, ReplicaSocket.wN).
const ReplicaSocket = ReplicaSocketDir + "/replica.sock"

// submitReplica creates a replica's job.
func (s *Service) submitReplica(ctx context.Context, rec store.Deployment, doc *deploymentDoc, r replicaRec) error {
	server, err := s.inferenceServerSnapshot()
	if err != nil {
		return err
	}
	d := doc.Spec
	j := &spec.Job{
		Type: "command", Name: r.Job,
		DisplayName:          fmt.Sprintf("%s/%s replica (generation %d)", rec.Endpoint, rec.Name, r.Generation),
		ExperimentName:       "endpoint-" + rec.Endpoint,
		Description:          "a replica of online deployment " + rec.Name + " of endpoint " + rec.Endpoint,
		Tags:                 map[string]string{"ferry.endpoint": rec.Endpoint, "ferry.deployment": rec.Name, "ferry.generation": strconv.Itoa(r.Generation)},
		Code:                 d.CodeConfiguration.Code,
		Command:              replicaCommand(d, doc.ModelSnapshot != "", doc.ModelFolder),
		Environment:          d.Environment,
		EnvironmentVariables: d.EnvironmentVariables,
		Inputs: map[string]spec.Input{
			"ferry_inference_server": {Type: "uri_folder", Path: "ferry-inference-server", Mode: "download"},
		},
	}
	inputs := map[string]string{"ferry_inference_server": server}
	if doc.ModelSnapshot != "" {
		j.Inputs["model"] = spec.Input{Type: "uri_folder", Path: "model", Mode: "download"}
		inputs["model"] = doc.ModelSnapshot
	}
	if doc.Local {
		j.Compute = "local"
	} else {
		j.Resources = &spec.Resources{InstanceType: d.InstanceType}
	}
	_, err = s.core.SubmitJob(ctx, auth.Principal{Kind: auth.KindOwner, Subject: "deployment-controller"},
		workspace.Submission{Spec: j, CodeSnapshot: doc.CodeSnapshot, InputSnapshots: inputs, EnvironmentSnapshot: doc.EnvironmentSnapshot})
	if apperr.CodeOf(err) == apperr.CodeConflict {
		return nil // made by a pass before a restart
	}
	return err
}

// routeIfChanged routes an endpoint when what the router would get
// differs from what it got last, and releases cold starts that now have
// a replica.
func (s *Service) routeIfChanged(ctx context.Context, rec store.Endpoint) error {
	if s.cfg.Router == nil {
		return nil
	}
	deps, err := s.routedDeployments(ctx, rec.Name)
	if err != nil {
		return err
	}
	sig := fmt.Sprint(rec.Updated.UnixNano(), rec.PrimaryKey, rec.SecondaryKey, deps, secretsDigest(deps))
	c := s.deployCtl
	c.mu.Lock()
	same := c.routed[rec.Name] == sig
	c.mu.Unlock()
	if same {
		return nil
	}
	if err := s.routeWith(rec, deps); err != nil {
		return err
	}
	c.mu.Lock()
	c.routed[rec.Name] = sig
	c.mu.Unlock()
	return nil
}

// routedDeployments are an endpoint's deployments with their ready
// replicas that are not draining.
func (s *Service) routedDeployments(ctx context.Context, endpoint string) (map[string]RoutedDeployment, error) {
	recs, err := s.st.ListDeployments(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	out := map[string]RoutedDeployment{}
	c := s.deployCtl
	for _, rec := range recs {
		doc, set, err := decodeDeployment(rec)
		if err != nil {
			return nil, err
		}
		r := doc.Spec.RequestSettings
		rd := RoutedDeployment{RequestTimeout: time.Duration(r.RequestTimeoutMS) * time.Millisecond,
			MaxConcurrent: r.MaxConcurrentRequestsPerInstance, MaxQueueWait: time.Duration(r.MaxQueueWaitMS) * time.Millisecond}
		if doc.Kube {
			rd.Replicas = c.kubeRouted(rec.Endpoint + "/" + rec.Name)
			if secret, ok := s.kubeReplicaSecret(rec, doc); ok && len(rd.Replicas) > 0 {
				rd.Secrets = map[string]secrets.Secret{}
				for _, u := range rd.Replicas {
					rd.Secrets[u] = secret
				}
			}
		}
		c.mu.Lock()
		for _, rep := range set.Replicas {
			if l, ok := c.reps[rep.Job]; ok && l.ready && l.draining.IsZero() && !l.canceled {
				rd.Replicas = append(rd.Replicas, l.url())
				if secret, ok := s.replicaSecret(rep.Job, l.attempt); ok {
					if rd.Secrets == nil {
						rd.Secrets = map[string]secrets.Secret{}
					}
					rd.Secrets[l.url()] = secret
				}
				if w := l.workerURLs(); w != nil {
					if rd.Workers == nil {
						rd.Workers = map[string][]string{}
					}
					rd.Workers[l.url()] = w
				}
			}
		}
		c.mu.Unlock()
		slices.Sort(rd.Replicas)
		out[rec.Name] = rd
	}
	return out, nil
}

// secretsDigest stands for the replicas' secrets in what routeIfChanged
// compares (a Secret prints as a placeholder): a replica whose secret
// changes at the same URL (a new attempt on the same address) is routed
// again. A hash, so that the comparison string holds no secret.
func secretsDigest(deps map[string]RoutedDeployment) string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		d := deps[name]
		for _, url := range slices.Sorted(maps.Keys(d.Secrets)) {
			fmt.Fprintf(h, "%s\x00%s\x00%s\x00", name, url, d.Secrets[url].Reveal())
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// isReplicaJob says whether j is a replica of an online deployment (the
// controller tags the jobs it submits so).
func isReplicaJob(j *spec.Job) bool {
	return j != nil && j.Tags["ferry.endpoint"] != "" && j.Tags["ferry.deployment"] != ""
}

// replicaSecret is the secret of attempt of replica job: what the replica
// requires of every request (inferenceserver.Replica.Secret) and the
// gateway and the probes send. It is derived from the workspace key, the
// job and the attempt, so a restarted server knows the secrets of the
// replicas still running without having stored them, and a new attempt
// (on another node, say) has a secret of its own. False without a
// workspace key (a server without one makes no endpoints).
func (s *Service) replicaSecret(job string, attempt int) (secrets.Secret, bool) {
	if s.cfg.Secrets == nil || attempt < 1 {
		return "", false
	}
	return ReplicaSecret(s.cfg.Secrets, job, attempt), true
}

// ReplicaSecret is the secret of attempt of replica job in the workspace
// whose key is key (Service.replicaSecret): for a program that holds the
// workspace key and calls replicas itself, as bench/endpoint does.
func ReplicaSecret(key *secrets.Key, job string, attempt int) secrets.Secret {
	return key.Derive("replica/" + job + "/" + strconv.Itoa(attempt))
}

// released wakes the cold starts of deployments that have a replica now.
func (c *deployCtl) release(endpoint string, deps map[string]RoutedDeployment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, d := range deps {
		key := endpoint + "/" + name
		c.routedAny[key] = len(d.Replicas) > 0
		if len(d.Replicas) == 0 {
			continue
		}
		for _, ch := range c.waiters[key] {
			close(ch)
		}
		delete(c.waiters, key)
	}
}

// inferenceServerSnapshot stores Ferry's inference server (embedded in
// the binary) as a snapshot, once per server, and returns its id: replica
// jobs take it as an input, so nodes fetch it as they fetch code, through
// their blob cache.
func (s *Service) inferenceServerSnapshot() (string, error) {
	s.isMu.Lock()
	defer s.isMu.Unlock()
	if s.isSnap != "" && s.core.HasBlob(s.isSnap) {
		return s.isSnap, nil
	}
	tmp, err := os.MkdirTemp("", "ferry-inference-server-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	dir, err := inferenceserver.Install(tmp)
	if err != nil {
		return "", err
	}
	m, files, err := snapshot.Build(dir, snapshot.BuildOptions{})
	if err != nil {
		return "", fmt.Errorf("inference server snapshot: %w", err)
	}
	id, err := s.core.StoreSnapshot(m, files, "the inference server snapshot")
	if err != nil {
		return "", err
	}
	s.isSnap = id
	return id, nil
}
