package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/assets"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/envcatalog"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// ProviderFactory returns the node provider of a pool compute: the one its
// provider: block names, or the server's default.
type ProviderFactory func(c *spec.Compute) (provider.Provider, error)

// ProviderCheck reads a pool compute's provider: block as its provider
// would, without making anything, and says what is wrong with it, naming
// the field (provider.imgae: unknown key; did you mean image?).
type ProviderCheck func(c *spec.Compute) error

// TargetFactory makes the compute.Target for a stored compute record.
type TargetFactory func(c *spec.Compute) (compute.Target, error)

// Config is how a Service is set up.
type Config struct {
	Store   store.Store
	Blobs   *blob.Store
	LogDir  string        // where job logs are kept
	APIURL  string        // the URL runners use to reach this workspace
	Targets TargetFactory // makes targets from compute records
	// TargetTypes lists the compute types Targets can make, for messages.
	TargetTypes []string
	// LeaseTimeout is how long a runner may stay silent before its job is
	// failed as lost. Zero means 30 s.
	LeaseTimeout time.Duration
	// CancelGrace is the runners' SIGTERM to SIGKILL grace (default
	// 10 s): an attempt with an engine handle whose runner has not ended
	// it a little after the grace is canceled through its engine.
	CancelGrace time.Duration
	// EngineInspect is how often targets that can inspect their engine
	// are asked what became of the workspace's handles (default 3 s).
	EngineInspect time.Duration
	// MaxSnapshotSize bounds one snapshot's total size. Zero means 1 GiB.
	MaxSnapshotSize int64
	// OutputQuota bounds the bytes of one job attempt's outputs, so that
	// a job cannot fill the workspace's disk. Zero means DefaultOutputQuota;
	// negative means no quota.
	OutputQuota int64
	// Sizes is the size catalog; nil means the built-in one.
	Sizes *sizes.Catalog
	// Environments is the catalog of curated environments that references
	// to Azure's built-in environments resolve through, after the
	// registered ones; nil means the built-in one.
	Environments *envcatalog.Catalog
	// PoolTypes are the compute types whose computes are pools of agent
	// nodes that the pool loop runs, by type name, each with what sets it
	// apart (compute.Pool); the workspace asks them instead of comparing
	// type names. A type in neither PoolTypes nor Targets cannot be used.
	PoolTypes map[string]*compute.Pool
	// Providers gives pool computes (clusters) their machines; nil means
	// pool computes cannot be made.
	Providers ProviderFactory
	// CheckProvider checks a pool compute's provider block when the
	// compute is created and again when it is loaded; nil checks nothing.
	CheckProvider ProviderCheck
	// NodeHeartbeat is how often agents heartbeat (default 2 s); a node
	// silent for NodeLease (default 30 s) is Lost. JoinTimeout bounds how
	// long a launched node may take to join (default 10 min).
	NodeHeartbeat, NodeLease, JoinTimeout time.Duration
	// PoolTick is how often the pool loop runs without being woken (default 1 s).
	PoolTick time.Duration
	// PreemptPoll is how often the machines of low-priority clusters are
	// listed to find those their provider takes back (default 10 s).
	// PreemptGrace is how long the runners on a preempted node have to
	// stop their jobs and upload the outputs before the attempts are
	// queued again without them (default 30 s, a cloud's eviction notice).
	PreemptPoll, PreemptGrace time.Duration
	// ServerlessIdle is how long the nodes of serverless jobs' implicit
	// clusters stay idle before they go (default 120 s, Azure's default);
	// ServerlessMax bounds each implicit cluster (default 10).
	ServerlessIdle time.Duration
	ServerlessMax  int
	// Secrets seals the SSH secrets of attached machines and fleets at
	// rest; nil means such computes cannot be made.
	Secrets *secrets.Key
	// BlobEndpoints maps Azure storage accounts to the base URLs that
	// stand in for their blob services (tests, a mirror): inputs in such
	// an account are fetched from there ($FERRY_BLOB_ENDPOINTS).
	BlobEndpoints map[string]string
	// DefaultDatastoreDir is the folder of the built-in workspaceblobstore
	// datastore; "" means there is none until one is created.
	DefaultDatastoreDir string
	Now                 func() time.Time // clock; nil means time.Now
	Log                 *slog.Logger
}

// Service is the workspace. It is safe for concurrent use.
type Service struct {
	cfg     Config
	st      store.Store
	blobs   *blob.Store
	logs    *logStore
	log     *slog.Logger
	now     func() time.Time
	started time.Time
	// unusable logs the computes that cannot be used, once per change.
	unusable *unusableLog
	// instance names this server among those that used the store: its
	// hand-off marks carry it (handoff.go).
	instance string
	handOffs sync.WaitGroup // hand-off calls under way

	kick chan struct{} // wakes the dispatcher and lease check
	// queueScanned is when the dispatcher last looked at the whole queue
	// for jobs of gone computes (runs.go); only its goroutine uses it.
	queueScanned time.Time
	// retaken holds the computes whose interrupted hand-offs the
	// dispatcher has taken back (engine.go); only its goroutine uses it.
	retaken   map[string]bool
	kickPools chan struct{} // wakes the pool loop
	// slotComputes are the computes whose jobs the dispatcher starts
	// (not the pool loop), as its last pass saw them: a submit to one of
	// them, and the end of an attempt on one, wake the dispatcher alone
	// (onSlotCompute).
	slotComputes atomic.Pointer[map[string]bool]
	// freeingWakes counts the wakes of the dispatcher that may free a
	// slot (every wake but a submit's), and fullComputes are the computes
	// whose slots were all taken when a pass began, with that count as it
	// was then: a submit to one of them, with no such wake since, wakes
	// nothing (wakeForSubmit).
	freeingWakes atomic.Uint64
	fullComputes atomic.Pointer[fullComputes]

	mu         sync.Mutex
	targets    map[string]compute.Target
	waiters    map[string]chan struct{}   // per job: closed on any change
	heartbeats map[string]time.Time       // per job: last word from its runner
	unreached  map[string]unreachedRunner // per job: a runner started that has not called yet (unreached.go)
	// diskFull holds, per job, why the server could not store what its
	// runner sent (a full disk): shown as the job's status reason until a
	// write succeeds again. Kept in memory, as a full disk may refuse the
	// store's writes too.
	diskFull map[string]string

	// The engine side of attempts (engine.go), guarded by mu too.
	handing        map[string]int       // per compute: hand-off calls under way (handoff.go)
	cancelAsked    map[string]time.Time // per job: when the cancel of its running attempt was asked
	engineCanceled map[string]int       // per job: the attempt already canceled through its engine

	pools *poolLoop // the pool loop (poolloop.go) and its memory

	// The workloads registered before Run (jobcore.go): the job types
	// they drive, the record types they show, their loops, and those of
	// their loops that hear of every job's change.
	jobTypes    map[string]JobType
	recordTypes map[string]RecordType
	controllers []Controller
	watchers    []JobWatcher

	regs   *registrations // outputs owed a data asset registration (outputassets.go)
	assets *assets.Assets // the registries (internal/assets), which jobs refer to

	nodes *Nodes // the node side: agents, instances, sessions, quotas (nodes.go)

	scopes runScopes // what each job's run token may read (blobscope.go)
}

// New makes a Service and makes sure the workspace has its `local` target.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.LeaseTimeout == 0 {
		cfg.LeaseTimeout = 30 * time.Second
	}
	if cfg.CancelGrace == 0 {
		cfg.CancelGrace = 10 * time.Second
	}
	if cfg.EngineInspect == 0 {
		cfg.EngineInspect = 3 * time.Second
	}
	if cfg.MaxSnapshotSize == 0 {
		cfg.MaxSnapshotSize = 1 << 30
	}
	if cfg.OutputQuota == 0 {
		cfg.OutputQuota = DefaultOutputQuota
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sizes == nil {
		cfg.Sizes = sizes.Builtin()
	}
	if cfg.Environments == nil {
		cfg.Environments = envcatalog.Builtin()
	}
	if cfg.NodeHeartbeat == 0 {
		cfg.NodeHeartbeat = 2 * time.Second
	}
	if cfg.NodeLease == 0 {
		cfg.NodeLease = 30 * time.Second
	}
	if cfg.ServerlessIdle == 0 {
		cfg.ServerlessIdle = 120 * time.Second
	}
	if cfg.ServerlessMax == 0 {
		cfg.ServerlessMax = 10
	}
	if cfg.JoinTimeout == 0 {
		cfg.JoinTimeout = 10 * time.Minute
	}
	if cfg.PreemptPoll == 0 {
		cfg.PreemptPoll = 10 * time.Second
	}
	if cfg.PreemptGrace == 0 {
		cfg.PreemptGrace = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	logs, err := newLogStore(cfg.LogDir)
	if err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	s := &Service{
		cfg: cfg, st: cfg.Store, blobs: cfg.Blobs, logs: logs, log: cfg.Log, now: cfg.Now,
		kick: make(chan struct{}, 1), kickPools: make(chan struct{}, 1),
		targets:    map[string]compute.Target{},
		waiters:    map[string]chan struct{}{},
		heartbeats: map[string]time.Time{},
		unreached:  map[string]unreachedRunner{},
		diskFull:   map[string]string{},
		retaken:    map[string]bool{}, handing: map[string]int{}, cancelAsked: map[string]time.Time{}, engineCanceled: map[string]int{},
		unusable: newUnusableLog(cfg.Log),
	}
	s.started = s.now()
	s.instance = newInstanceID()
	s.pools = newPoolLoop(cfg, s, s.started)
	s.nodes = newNodes(s)
	s.jobTypes = map[string]JobType{}
	s.recordTypes = map[string]RecordType{}
	s.regs = newRegistrations()
	s.assets = newAssets(cfg, s)
	if _, err := s.st.GetCompute(ctx, "local"); errors.Is(err, store.ErrNotFound) {
		local := &spec.Compute{Name: "local", Type: "local"}
		if _, err := s.CreateCompute(ctx, local); err != nil && apperr.CodeOf(err) != apperr.CodeConflict {
			return nil, fmt.Errorf("create local compute: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	return s, nil
}

// ListSizes returns the size catalog, ordered by name.
func (s *Service) ListSizes() []sizes.Size { return s.cfg.Sizes.List() }

// APIURL is the URL runners are told to use.
func (s *Service) APIURL() string { return s.cfg.APIURL }

// DefaultOutputQuota is the per-job output quota of a workspace that sets
// none: 10 GiB.
const DefaultOutputQuota = 10 << 30

// outputLimits are the limits a runner applies to its attempt's outputs.
func (s *Service) outputLimits() apitypes.OutputLimits {
	return apitypes.OutputLimits{JobBytes: max(s.cfg.OutputQuota, 0), SnapshotBytes: s.cfg.MaxSnapshotSize}
}

// MaxSnapshotSize is the largest total size of one snapshot.
func (s *Service) MaxSnapshotSize() int64 { return s.cfg.MaxSnapshotSize }

// changed wakes everyone waiting on job.
func (s *Service) changed(job string) { s.notify(job, 0) }

// notify wakes those waiting on job, and the JobWatchers; for a chunk of
// the log of attempt logged (0 for any other change), those of them that
// are LogWatchers hear of it as such.
func (s *Service) notify(job string, logged int) {
	s.mu.Lock()
	if ch, ok := s.waiters[job]; ok {
		close(ch)
		delete(s.waiters, job)
	}
	s.mu.Unlock()
	for _, w := range s.watchers {
		if lw, ok := w.(LogWatcher); ok && logged > 0 {
			lw.JobLogged(job, logged)
			continue
		}
		w.JobChanged(job)
	}
}

// wakeDispatcher asks for a dispatch pass: a job was queued or a slot freed.
func (s *Service) wakeDispatcher() {
	s.freeingWakes.Add(1)
	for _, k := range []chan struct{}{s.kick, s.kickPools} {
		select {
		case k <- struct{}{}:
		default:
		}
	}
}

// wakeSlotDispatcher asks for a dispatch pass, not a pool pass: a job was
// queued on, or a slot freed of, a compute the dispatcher starts jobs on.
func (s *Service) wakeSlotDispatcher() {
	s.freeingWakes.Add(1)
	s.kickDispatcher()
}

func (s *Service) kickDispatcher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// fullComputes are the computes whose slots were all taken when a
// dispatch pass began, and the count of freeing wakes read before it
// counted them.
type fullComputes struct {
	wakes uint64
	names map[string]bool
}

// wakeForSubmit wakes what a job just submitted needs. On a compute whose
// jobs the dispatcher starts and whose slots were all taken at its last
// pass, with no wake since that may have freed one, the job can only wait
// for the next end, which wakes the dispatcher itself: a pass now would
// find no free slot (under a burst of submits those passes were a tenth
// of the server's CPU, bench/dispatch). The dispatcher's pass every
// second still runs.
func (s *Service) wakeForSubmit(j store.Job) {
	switch {
	case !s.onSlotCompute(j):
		s.wakeDispatcher()
	case !s.isFull(j.Compute):
		s.kickDispatcher() // the pool loop places none of this compute's jobs
	}
}

// isFull says whether compute's slots were all taken at the last
// dispatch pass, with no wake since that may have freed one.
func (s *Service) isFull(compute string) bool {
	f := s.fullComputes.Load()
	return f != nil && f.names[compute] && f.wakes == s.freeingWakes.Load()
}

// onSlotCompute says whether j runs on a compute whose jobs the
// dispatcher starts, on no pool node, as the dispatcher's last pass saw
// its compute: its submit or its end changes nothing the pool loop places
// (bench/dispatch).
func (s *Service) onSlotCompute(j store.Job) bool {
	m := s.slotComputes.Load()
	return m != nil && (*m)[j.Compute] && len(j.Placement) == 0
}

// Changes returns a channel closed at the next change of job's status,
// logs or metrics.
func (s *Service) Changes(job string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.waiters[job]
	if !ok {
		ch = make(chan struct{})
		s.waiters[job] = ch
	}
	return ch
}

// ---- compute targets ----

// CreateCompute adds a compute target.
func (s *Service) CreateCompute(ctx context.Context, c *spec.Compute) (*apitypes.Compute, error) {
	if err := c.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	c.ApplyDefaults()
	if pt := s.poolType(c.Type); pt != nil {
		if s.cfg.Providers == nil {
			return nil, apperr.Invalid("type: this server has no node provider, so it cannot make clusters")
		}
		if usesSSH(pt, c) {
			if err := s.attach(ctx, pt, c); err != nil {
				return nil, err
			}
		}
		if err := s.validatePool(ctx, c); err != nil {
			return nil, err
		}
		if err := checkSetupContent(c); err != nil {
			return nil, err
		}
	} else if err := s.checkTarget(ctx, c); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	now := s.now()
	state := "Succeeded"
	if s.isInstance(c.Type) {
		state = InstanceCreating
	}
	rec := store.Compute{Name: c.Name, Type: c.Type, Spec: raw, State: state, Created: now, Modified: now}
	if err := s.st.CreateCompute(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("compute %q already exists; delete it first or pick another name", c.Name)
		}
		return nil, err
	}
	return s.GetCompute(ctx, c.Name)
}

// checkTarget makes the target of a compute about to be stored and, when
// it can check its engine (compute.Checker), has it do so, so that a
// compute that cannot work is refused before anything is kept. Secrets
// in the compute (an SSH key for a login node) are sealed first: what is
// stored holds them sealed, and the target opens its own copy.
func (s *Service) checkTarget(ctx context.Context, c *spec.Compute) error {
	if st := c.SSHSettings; st != nil {
		if st.SSHPrivateKeyFile != "" && st.SSHPrivateKey == "" {
			return apperr.Invalid("ssh_settings.ssh_private_key_file: the server does not read files named by a request; send the key's content as ssh_settings.ssh_private_key (the ferry CLI reads the file for you)")
		}
		if s.cfg.Secrets == nil {
			return apperr.Invalid("ssh_settings: this server has no workspace key, so it cannot keep SSH secrets; start it with a data dir it can write")
		}
		if err := SealCompute(s.cfg.Secrets, c); err != nil {
			return err
		}
	}
	if c.Kubeconfig != "" && c.KubeconfigContent == "" {
		return apperr.Invalid("kubeconfig: the server does not read files named by a request; send the file's content as kubeconfig_content (the ferry CLI reads the file for you)")
	}
	if rc := c.RegistryCredentials; rc != nil && rc.Password != "" && s.cfg.Secrets == nil {
		return apperr.Invalid("registry_credentials: this server has no workspace key, so it cannot keep a registry password; start it with a data dir it can write")
	}
	if c.KubeconfigContent != "" || (c.RegistryCredentials != nil && c.RegistryCredentials.Password != "") {
		if s.cfg.Secrets == nil {
			return apperr.Invalid("kubeconfig: this server has no workspace key, so it cannot keep a kubeconfig; start it with a data dir it can write")
		}
		if err := SealCompute(s.cfg.Secrets, c); err != nil {
			return err
		}
	}
	t, err := s.cfg.Targets(c)
	if err != nil {
		return err
	}
	if cl, ok := t.(io.Closer); ok {
		defer cl.Close()
	}
	ch, ok := t.(compute.Checker)
	if !ok {
		return nil
	}
	if err := ch.CheckCompute(ctx, c); err != nil {
		// A Checker's error names the field and holds no secret.
		return &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return nil
}

// GetCompute returns one target with its current load.
func (s *Service) GetCompute(ctx context.Context, name string) (*apitypes.Compute, error) {
	rec, err := s.st.GetCompute(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.unknownCompute(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	return s.computeView(ctx, rec)
}

func (s *Service) computeView(ctx context.Context, rec store.Compute) (*apitypes.Compute, error) {
	var c spec.Compute
	if err := json.Unmarshal(rec.Spec, &c); err != nil {
		return nil, fmt.Errorf("compute %s: stored spec: %w", rec.Name, err)
	}
	redactCompute(&c)
	v := &apitypes.Compute{Name: rec.Name, Type: rec.Type, State: rec.State, Created: rec.Created, Spec: &c}
	if pt := s.poolType(rec.Type); pt != nil {
		if err := s.nodes.poolView(ctx, pt, v); err != nil {
			return nil, err
		}
	} else if t, err := s.target(ctx, rec.Name); err == nil {
		v.Capacity = t.Capacity()
	}
	// Counted, not read: a read of the compute's jobs by status, ordered
	// by seq, was planned on jobs_compute and walked every job the
	// compute ever had (0.2 s a call at 100,000 jobs, twice per compute
	// on every compute list); the counts are served by jobs_status.
	active, err := s.st.CountJobs(ctx, activeStatuses)
	if err != nil {
		return nil, err
	}
	queued, err := s.st.CountJobs(ctx, []string{apitypes.StatusQueued})
	if err != nil {
		return nil, err
	}
	v.Active, v.Queued = active[rec.Name], queued[rec.Name]
	return v, nil
}

// ListComputes returns every target.
func (s *Service) ListComputes(ctx context.Context) ([]*apitypes.Compute, error) {
	recs, err := s.st.ListComputes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*apitypes.Compute, 0, len(recs))
	for _, r := range recs {
		v, err := s.computeView(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// DeleteCompute removes a target that has no unfinished jobs.
func (s *Service) DeleteCompute(ctx context.Context, name string) error {
	if name == "local" {
		return apperr.Conflict("compute \"local\" is built in and cannot be deleted")
	}
	rec, err := s.st.GetCompute(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return s.unknownCompute(ctx, name)
	} else if err != nil {
		return err
	}
	busy, err := s.st.ListJobs(ctx, store.JobFilter{Compute: name, Statuses: append([]string{apitypes.StatusQueued}, activeStatuses...)})
	if err != nil {
		return err
	}
	if len(busy) > 0 {
		return apperr.Conflict("compute %q has %s (for example %s); cancel them or wait before deleting it", name, count(len(busy), "unfinished job"), busy[0].Name)
	}
	if s.poolType(rec.Type) != nil {
		// The pool loop terminates the compute's machines (stops the agent
		// of an attached machine and removes what Ferry put there) and then
		// forgets the compute.
		if _, err := s.st.UpdateCompute(ctx, name, func(c *store.Compute) error {
			c.State, c.Modified = StateDeleting, s.now()
			return nil
		}); err != nil {
			return err
		}
		s.event(ctx, name, "deleting", "deleting: its machines are being given back")
		s.wakeDispatcher()
		return nil
	}
	if err := s.st.DeleteCompute(ctx, name); err != nil {
		return err
	}
	s.mu.Lock()
	t := s.targets[name]
	delete(s.targets, name)
	s.mu.Unlock()
	// A target that holds a connection or watches its engine (a Slurm
	// login node, a Kubernetes cluster's informers) lets go of it now.
	if cl, ok := t.(io.Closer); ok {
		if err := cl.Close(); err != nil {
			s.log.Warn("close the deleted compute's target", "compute", name, "err", err)
		}
	}
	return nil
}

func (s *Service) unknownCompute(ctx context.Context, name string) error {
	recs, err := s.st.ListComputes(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
	}
	return apperr.NotFound("compute %q does not exist; the workspace has: %s (create one with `ferry compute create -f FILE`)", name, strings.Join(names, ", "))
}

func (s *Service) target(ctx context.Context, name string) (compute.Target, error) {
	s.mu.Lock()
	t, ok := s.targets[name]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	rec, err := s.st.GetCompute(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.unknownCompute(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	c, err := storedComputeSpec(rec)
	if err != nil {
		s.failCompute(ctx, name, err.Error())
		return nil, unusableError{fmt.Errorf("compute %s: %w", name, err)}
	}
	t, err = s.cfg.Targets(c)
	if err != nil {
		s.unusable.unusable(name, err.Error())
		return nil, unusableError{err}
	}
	s.unusable.usable(name)
	s.mu.Lock()
	s.targets[name] = t
	s.mu.Unlock()
	return t, nil
}

// unusableError is target's error for a compute whose stored spec or
// target cannot be made. target has logged it, once per change, so its
// callers, which meet it on every pass, do not log it again.
type unusableError struct{ err error }

func (e unusableError) Error() string { return e.err.Error() }
func (e unusableError) Unwrap() error { return e.err }

// isUnusable says whether err is target's error for an unusable compute.
func isUnusable(err error) bool {
	var u unusableError
	return errors.As(err, &u)
}

// jobType is the type of the job v shows: its file's (a RecordType's
// record has none of a command job's).
func jobType(v *apitypes.Job) string {
	if v.Spec == nil {
		return ""
	}
	return v.Spec.Type
}

// ---- jobs ----

// SubmitJob validates and stores a job, which then waits in Queued for a
// free slot on its target.
func (s *Service) SubmitJob(ctx context.Context, who auth.Principal, sub Submission) (*apitypes.Job, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot submit jobs")
	}
	j := sub.Spec
	if j == nil {
		return nil, apperr.Invalid("spec: the job spec is missing")
	}
	if err := j.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if t, ok := s.jobTypes[j.Type]; ok {
		return t.Submit(ctx, who, sub)
	}
	rec, err := s.prepareJob(ctx, j, sub)
	if err != nil {
		return nil, err
	}
	name := j.Name
	if name == "" {
		name = newJobName()
	}
	now := s.now()
	rec.Name, rec.Status, rec.CreatedBy, rec.Created = name, apitypes.StatusQueued, who.Subject, now
	reason := "waiting for a free slot on compute " + rec.Compute
	created, err := s.createJobRecord(ctx, sub, rec, store.Event{Job: name, Time: now, To: apitypes.StatusQueued, Reason: reason})
	if errors.Is(err, ErrDryRun) {
		return s.jobViewWith(rec, nil)
	}
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("name: a job named %q already exists; job names are unique in a workspace, pick another or leave name out", name)
		}
		return nil, err
	}
	s.changed(name)
	s.wakeForSubmit(created)
	// The job as submitted: a new job has no metrics to read, and reading
	// it back (a store read and a metrics query) was a tenth of a small
	// job's store work (bench/dispatch).
	return s.jobViewWith(created, nil)
}

// jobCompute is the compute a job runs on: the one it names, else the
// serverless cluster of its instance type, else local.
func (s *Service) jobCompute(ctx context.Context, j *spec.Job) (string, error) {
	computeName := j.ComputeName()
	if computeName == "" && j.Resources != nil && j.Resources.InstanceType != "" {
		name, err := s.serverless(ctx, j)
		if err != nil {
			return "", err
		}
		computeName = name
	}
	if computeName == "" {
		computeName = "local"
	}
	return computeName, nil
}

// prepareJob checks a valid command job against the workspace (its
// compute, environment, data inputs and uploaded snapshots) and returns
// the record to store, less its name, status, creator and time.
func (s *Service) prepareJob(ctx context.Context, j *spec.Job, sub Submission) (store.Job, error) {
	var none store.Job
	computeName, err := s.jobCompute(ctx, j)
	if err != nil {
		return none, err
	}
	env, err := s.assets.ResolveEnvironment(ctx, j.Environment, sub.EnvironmentSnapshot)
	if err != nil {
		return none, err
	}
	inputs, err := s.assets.ResolveDataInputs(ctx, j, sub.InputSnapshots)
	if err != nil {
		return none, err
	}
	sub.InputSnapshots = inputs
	remote, err := s.assets.ResolveRemoteInputs(ctx, j)
	if err != nil {
		return none, err
	}
	if err := s.admit(ctx, computeName, j, env); err != nil {
		return none, err
	}
	if j.Code != "" && sub.CodeSnapshot == "" {
		return none, apperr.Invalid("code: the job names code %q but no code snapshot was uploaded with it", j.Code)
	}
	if sub.CodeSnapshot != "" {
		if err := s.requireSnapshot(sub.CodeSnapshot, "code"); err != nil {
			return none, err
		}
	}
	for name, in := range j.Inputs {
		if in.IsLiteral() {
			continue
		}
		if _, ok := remote[name]; ok {
			if _, up := sub.InputSnapshots[name]; up {
				return none, apperr.Invalid("input_snapshots.%s: input %s is fetched from %s on the node; upload nothing for it", name, name, in.Path)
			}
			continue
		}
		id, ok := sub.InputSnapshots[name]
		if !ok {
			return none, apperr.Invalid("inputs.%s.path: %q is a local path whose files were not uploaded (input_snapshots); `ferry job create` uploads them", name, in.Path)
		}
		if err := s.requireSnapshot(id, "inputs."+name); err != nil {
			return none, err
		}
	}
	for name := range sub.InputSnapshots {
		if in, ok := j.Inputs[name]; !ok || in.IsLiteral() {
			return none, apperr.Invalid("input_snapshots.%s: the job has no data input by that name", name)
		}
	}
	specJSON, err := json.Marshal(j)
	if err != nil {
		return none, err
	}
	inputsJSON, err := storedInputs(sub.InputSnapshots, remote)
	if err != nil {
		return none, err
	}
	envJSON, err := json.Marshal(env)
	if err != nil {
		return none, err
	}
	return store.Job{
		DisplayName: j.DisplayName, ExperimentName: j.ExperimentName,
		Compute: computeName, Priority: priorityOf(j),
		Spec: specJSON, CodeSnapshot: sub.CodeSnapshot, Inputs: inputsJSON, Environment: envJSON,
	}, nil
}

func priorityOf(j *spec.Job) int {
	if j.QueueSettings == nil {
		return 0
	}
	switch j.QueueSettings.Priority {
	case "high":
		return 1
	case "low":
		return -1
	}
	return 0
}

func (s *Service) requireSnapshot(id, field string) error {
	if !blob.ValidDigest(id) {
		return apperr.Invalid("%s: snapshot id %q is not a SHA-256", field, id)
	}
	if !s.blobs.Has(id) {
		return apperr.Invalid("%s: snapshot %s was not uploaded", field, id)
	}
	return nil
}

var (
	adjectives = []string{"amber", "brave", "calm", "eager", "frosty", "gentle", "happy", "icy", "jolly", "keen", "lucid", "mellow", "nimble", "olive", "plucky", "quiet", "rapid", "sunny", "tidy", "vivid", "witty", "zesty"}
	nouns      = []string{"anchor", "buoy", "canal", "delta", "estuary", "fjord", "harbor", "island", "jetty", "keel", "lagoon", "marina", "oar", "pier", "quay", "river", "sail", "tide", "wharf"}
)

// newJobName makes a name like Azure's: adjective_noun_random.
func newJobName() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return adjectives[rand.IntN(len(adjectives))] + "_" + nouns[rand.IntN(len(nouns))] + "_" + string(b)
}

// GetJob returns one job; with history, its status changes too.
func (s *Service) GetJob(ctx context.Context, name string, history bool) (*apitypes.Job, error) {
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("job %q does not exist (see `ferry job list`)", name)
	}
	if err != nil {
		return nil, err
	}
	v, err := s.jobView(ctx, rec)
	if err != nil {
		return nil, err
	}
	if history {
		evs, err := s.st.ListEvents(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			v.History = append(v.History, apitypes.Event{Time: e.Time, From: e.From, To: e.To, Reason: e.Reason})
		}
		if v.Preemptions, err = s.preemptionsOf(ctx, name); err != nil {
			return nil, err
		}
		rv, err := s.GetRunValues(ctx, name)
		if err != nil {
			return nil, err
		}
		v.Params, v.RunTags = rv.Params, rv.Tags
	}
	if err := s.decorate(ctx, rec, v); err != nil {
		return nil, err
	}
	return v, nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (s *Service) jobView(ctx context.Context, rec store.Job) (*apitypes.Job, error) {
	latest, err := s.st.LatestMetrics(ctx, rec.Name)
	if err != nil {
		return nil, err
	}
	return s.jobViewWith(rec, latest)
}

// jobViewWith is the view of a stored job whose latest metrics are known.
func (s *Service) jobViewWith(rec store.Job, latest map[string]store.Metric) (*apitypes.Job, error) {
	return s.viewOf(rec, latest, true)
}

// viewOf is jobViewWith, with the job's spec left out unless withSpec (a
// list shows none); the spec is read all the same, so that one that
// cannot be is named.
func (s *Service) viewOf(rec store.Job, latest map[string]store.Metric, withSpec bool) (*apitypes.Job, error) {
	v := &apitypes.Job{
		Name: rec.Name, DisplayName: rec.DisplayName, ExperimentName: rec.ExperimentName,
		Status: rec.Status, StatusReason: rec.StatusReason, Compute: rec.Compute,
		ExitCode: rec.ExitCode, Error: rec.Error, CancelRequestedBy: rec.CancelBy,
		Attempt: rec.Attempt, Handle: shownHandle(rec.Handle), CreatedBy: rec.CreatedBy,
		Created: timePtr(rec.Created), Started: timePtr(rec.Started), Ended: timePtr(rec.Ended),
		CodeSnapshot: rec.CodeSnapshot, Metrics: map[string]float64{},
	}
	// A part that cannot be read is left out and named, so one damaged
	// record can still be shown, listed and canceled.
	unreadable := func(part string, err error) {
		v.Unreadable = append(v.Unreadable, part+": "+err.Error())
	}
	specView := v
	if !withSpec {
		specView = &apitypes.Job{} // read into a view of its own, and dropped
	}
	var j spec.Job
	if typ, rt := s.recordType(rec); rt != nil {
		if err := rt.ViewSpec(rec, specView); err != nil {
			unreadable(typ+" spec", err)
		}
	} else if err := json.Unmarshal(rec.Spec, &j); err != nil {
		unreadable("spec", err)
	} else {
		specView.Spec = &j
	}
	if len(rec.Inputs) > 0 {
		if err := readStoredInputs(rec.Inputs, v); err != nil {
			unreadable("inputs", err)
		}
	}
	if env, err := storedEnvironment(rec); err != nil {
		unreadable("environment", err)
	} else {
		v.Environment = env
	}
	if len(rec.Outputs) > 0 {
		v.Outputs = &apitypes.Outputs{}
		if err := json.Unmarshal(rec.Outputs, v.Outputs); err != nil {
			v.Outputs = nil
			unreadable("outputs", err)
		}
	}
	if why := s.diskFullReason(rec.Name); why != "" && !apitypes.IsTerminal(v.Status) {
		v.StatusReason = why
	}
	for k, m := range latest {
		v.Metrics[k] = m.Value
	}
	return v, nil
}

// ListJobs returns jobs, newest first, with their latest metrics read in
// one go rather than a query per job.
func (s *Service) ListJobs(ctx context.Context, f store.JobFilter) ([]*apitypes.Job, error) {
	f.Newest = true
	recs, err := s.st.ListJobs(ctx, f)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(recs))
	for i, r := range recs {
		names[i] = r.Name
	}
	latest, err := s.st.LatestMetricsOf(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make([]*apitypes.Job, 0, len(recs))
	for _, r := range recs {
		v, err := s.viewOf(r, latest[r.Name], false)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// CancelJob asks for a job to stop. A queued job is canceled at once (one
// waiting in its engine's queue through the engine first); a running one
// is stopped by its runner (SIGTERM, then SIGKILL), or through its engine
// when the runner has not ended it after the grace (engine.go).
func (s *Service) CancelJob(ctx context.Context, who auth.Principal, name string) (*apitypes.Job, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot cancel jobs")
	}
	if err := s.cancelInEngine(ctx, name); err != nil {
		return nil, err
	}
	var inEngine, asked bool
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		inEngine, asked = false, false
		if apitypes.IsTerminal(j.Status) {
			return nil, apperr.Conflict("job %s is already %s; only queued or running jobs can be canceled", name, j.Status)
		}
		if j.Status == apitypes.StatusCancelRequested {
			return nil, nil
		}
		from := j.Status
		j.CancelBy = who.Subject
		if j.Status == apitypes.StatusQueued {
			now := s.now()
			inEngine = j.Handle != ""
			j.Status, j.StatusReason, j.Ended = apitypes.StatusCanceled, "canceled by "+who.Subject+" before it started", now
			return &store.Event{Job: name, Time: now, From: from, To: j.Status, Reason: j.StatusReason}, nil
		}
		asked = true
		j.Status, j.StatusReason = apitypes.StatusCancelRequested, "cancel requested by "+who.Subject
		return &store.Event{Job: name, Time: s.now(), From: from, To: j.Status, Reason: j.StatusReason}, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("job %q does not exist (see `ferry job list`)", name)
	}
	if err != nil {
		return nil, err
	}
	if inEngine {
		s.canceledInQueue(ctx, name)
	}
	if asked {
		s.cancelAskedNow(name)
	}
	s.changed(name)
	return s.GetJob(ctx, name, false)
}

// ---- logs and metrics ----

// ReadLog copies up to max bytes of the job's current attempt's log from
// offset to w. It returns the bytes copied and the job's status when the
// read began, so a streamer knows when it has everything: a job that has
// ended with outputs still to register is Finalizing for this, until the
// log's registration line is in.
func (s *Service) ReadLog(ctx context.Context, name string, rank int, offset, max int64, w io.Writer) (int64, string, error) {
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, "", apperr.NotFound("job %q does not exist (see `ferry job list`)", name)
	}
	if err != nil {
		return 0, "", err
	}
	if rec.Attempt == 0 {
		return 0, rec.Status, nil
	}
	n, err := s.logs.ReadAt(name, rec.Attempt, rank, offset, max, w)
	status := rec.Status
	if apitypes.IsTerminal(status) && pendingOutputs(rec.Outputs) != nil {
		// Its outputs are being registered as data assets, which the
		// log says once done: a reader following the log waits for
		// that line as it would for the job's own last lines.
		status = apitypes.StatusFinalizing
	}
	return n, status, err
}

// AppendLog stores a chunk of an attempt's log that starts at offset and
// returns the stored size. Resent bytes are skipped.
func (s *Service) AppendLog(ctx context.Context, who auth.Principal, name string, attempt, rank int, offset int64, data []byte) (int64, error) {
	if _, err := s.fence(ctx, who, name, attempt); err != nil {
		return 0, err
	}
	size, err := s.logs.Append(name, attempt, rank, offset, data)
	if errors.Is(err, errLogGap) {
		return size, apperr.Conflict("log offset %d is past the stored end %d; resend from %d", offset, size, size)
	}
	if err != nil {
		err = apperr.NoSpace(err, fmt.Sprintf("the log of job %s", name))
		if apperr.CodeOf(err) == apperr.CodeNoSpace {
			s.setDiskFull(name, "server disk full: log delivery paused; the job's node keeps its log and sends it when there is room again")
		}
		return 0, err
	}
	s.setDiskFull(name, "")
	s.heard(name)
	s.notify(name, attempt)
	return size, nil
}

// LogSize returns how much of an attempt's log is stored.
func (s *Service) LogSize(ctx context.Context, who auth.Principal, name string, attempt, rank int) (int64, error) {
	if _, err := s.fence(ctx, who, name, attempt); err != nil {
		return 0, err
	}
	return s.logs.Size(name, attempt, rank), nil
}

// AddMetrics records metric values for a job.
func (s *Service) AddMetrics(ctx context.Context, who auth.Principal, name string, ms []apitypes.Metric) error {
	_, err := s.addMetrics(ctx, who, name, 0, 0, ms)
	return err
}

// AddNumberedMetrics records metric values that the runner of node rank of
// the caller's attempt numbered first, first+1, ...; values already recorded
// under their numbers are skipped, so a batch sent again after a lost
// answer or a server restart is recorded once. It returns the highest
// number recorded. Only a run token numbers metrics.
func (s *Service) AddNumberedMetrics(ctx context.Context, who auth.Principal, name string, rank int, first int64, ms []apitypes.Metric) (int64, error) {
	if who.Kind != auth.KindRun {
		return 0, apperr.Invalid("seq: only a job's run token numbers its metrics; leave seq out")
	}
	if first < 1 {
		return 0, apperr.Invalid("seq: the number of the first metric must be at least 1 (got %d)", first)
	}
	return s.addMetrics(ctx, who, name, rank, first, ms)
}

// addMetrics records ms, numbered from first in the sequence of the runner
// of node rank of the caller's attempt when first is not 0.
func (s *Service) addMetrics(ctx context.Context, who auth.Principal, name string, rank int, first int64, ms []apitypes.Metric) (int64, error) {
	if !who.MayWriteJob(name) {
		return 0, apperr.Forbidden("this token may not write metrics of job %s", name)
	}
	if len(ms) == 0 {
		return 0, apperr.Invalid("metrics: at least one metric is needed")
	}
	if len(ms) > apitypes.MaxMetricsPerRequest {
		return 0, apperr.Invalid("metrics: at most %d values per request (got %d)", apitypes.MaxMetricsPerRequest, len(ms))
	}
	now := s.now()
	recs := make([]store.Metric, len(ms))
	for i, m := range ms {
		if err := apitypes.CheckMetric(m); err != nil {
			return 0, apperr.Invalid("metrics[%d].%v", i, err)
		}
		if m.Time.IsZero() {
			m.Time = now
		}
		recs[i] = store.Metric{Name: m.Name, Value: m.Value, Step: m.Step, Time: m.Time}
	}
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, apperr.NotFound("job %q does not exist", name)
	}
	if err != nil {
		return 0, err
	}
	if apitypes.IsTerminal(rec.Status) {
		return 0, apperr.Conflict("job %s is %s; metrics can only be logged while it runs", name, rec.Status)
	}
	var high int64
	if first == 0 {
		err = s.st.AddMetrics(ctx, name, recs)
	} else {
		high, err = s.st.AddNumberedMetrics(ctx, name, who.Attempt, rank, first, recs)
	}
	if err != nil {
		return 0, err
	}
	s.changed(name)
	return high, nil
}

// ListMetrics returns a job's metric series (all metrics if metric is "").
func (s *Service) ListMetrics(ctx context.Context, name, metric string) ([]apitypes.Metric, error) {
	if _, err := s.GetJob(ctx, name, false); err != nil {
		return nil, err
	}
	recs, err := s.st.ListMetrics(ctx, name, metric)
	if err != nil {
		return nil, err
	}
	out := make([]apitypes.Metric, len(recs))
	for i, m := range recs {
		out[i] = apitypes.Metric{Name: m.Name, Value: m.Value, Step: m.Step, Time: m.Time}
	}
	return out, nil
}

// setDiskFull records why job's runner cannot deliver (a full disk), or
// clears it when why is "". A change wakes those following the job.
func (s *Service) setDiskFull(job, why string) {
	s.mu.Lock()
	old, had := s.diskFull[job]
	if why == "" {
		delete(s.diskFull, job)
	} else {
		s.diskFull[job] = why
	}
	s.mu.Unlock()
	if (why == "" && had) || (why != "" && why != old) {
		s.changed(job)
	}
}

// diskFullReason says why job's runner cannot deliver now, or "".
func (s *Service) diskFullReason(job string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.diskFull[job]
}
