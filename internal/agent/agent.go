package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/serverurl"
)

// Config sets up an agent.
type Config struct {
	// Server is the workspace's URL (http or https).
	Server string
	// ServerFile, for an agent on the server's own host (the process
	// provider's), is the file the server records its URL in
	// (serverurl.FileName in its work dir; "" = none). The agent reads it
	// when Server cannot be reached and calls the URL it names from then
	// on, and gives it to its runners: a server restarted at another
	// address finds its nodes and their jobs again.
	ServerFile string
	// Name is the node name the provider asked for.
	Name string
	// JoinToken is the compute's join token. Secret: it is sent once, as
	// the bearer of the join call, and never logged, stored or given to a
	// runner.
	JoinToken string
	// Dir is the node's directory: the state file, runs/<job>/<attempt>
	// for each attempt, and by default the caches. Made if missing.
	Dir string
	// Exe is the ferry binary, started as `Exe runner ...` per assignment.
	Exe string
	// CacheDir is the node's blob cache, shared by its runners
	// (default Dir/cache); EnvCacheDir its built environments (default
	// Dir/env-cache); EnvCacheSize bounds those ("50g"; "" = no bound).
	CacheDir     string
	EnvCacheDir  string
	EnvCacheSize string
	// CancelGrace is passed to runners: SIGTERM to SIGKILL of a canceled
	// job. 0 = the runner's default.
	CancelGrace time.Duration
	// RunAs is the account runners start jobs as ("" = their own). The
	// node's runs/ directories are then passable (0711) by it.
	RunAs string
	// JobUIDs, with RunAs, makes each attempt run as a uid of its own
	// from this range (isolation.Acquire); "" = all as RunAs.
	JobUIDs string
	// Address is where other nodes reach this one (MASTER_ADDR of
	// distributed jobs). "" = the IP of the interface toward Server.
	Address string
	// Version is reported with the node's facts ("" = this binary's).
	Version string
	// Env is the agent's own environment, which runners inherit less the
	// agent's secrets (nil = os.Environ()). CUDA_VISIBLE_DEVICES in it
	// limits the node's GPUs to the ones it names.
	Env []string
	// PollWait is how long the server may hold a poll for assignments
	// (default 30s). MaxBackoff caps the wait between retries while the
	// server is away (default 5s).
	PollWait   time.Duration
	MaxBackoff time.Duration
	// GiveUpAfter is how long the server may be unreachable before the
	// agent gives up and exits with ErrServerGone (default a day); its
	// runners keep going and give up on their own.
	GiveUpAfter time.Duration
	// Clock is the time source of heartbeats, retries and the watch of
	// adopted runners (default: the real clock).
	Clock Clock
	// HTTPClient calls the server (default: a plain http.Client).
	HTTPClient *http.Client
	// Log hears what the agent does (default: nowhere).
	Log *slog.Logger
}

// Clock is the agent's time. Tests make it run fast.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Errors Run returns; both are wrapped with the server's answer.
var (
	// ErrJoinRefused: the server refused to admit the node (a 4xx to the
	// join call: a wrong or revoked join token, an unknown compute ...).
	ErrJoinRefused = errors.New("the server refused to admit this node")
	// ErrForgotten: the server no longer accepts the node's credential or
	// no longer knows the node (401, 403 or 404 to a heartbeat or poll).
	// The node's runners keep going and report on their own.
	ErrForgotten = errors.New("the server has forgotten this node")
	// ErrServerGone: the server has not answered for GiveUpAfter.
	ErrServerGone = errors.New("the server has not answered for too long")
)

// Times that are not worth a flag.
const (
	callTimeout  = 30 * time.Second // one join or heartbeat call
	watchEvery   = time.Second      // liveness check of adopted runners
	minPollGap   = time.Second      // between polls that brought nothing new
	doneMemory   = time.Hour        // how long an ended attempt is remembered
	defaultBeat  = 5 * time.Second  // when the server names no interval
	pollOverhead = 30 * time.Second // a poll's timeout beyond its wait
)

type agent struct {
	cfg    Config
	server *serverurl.URL // Config.Server, following Config.ServerFile
	log    *slog.Logger
	clock  Clock
	http   *http.Client
	env    []string        // the runners' base environment, secrets removed
	runAs  *isolation.User // Config.RunAs, looked up; nil = none

	hasGPUs   bool
	node      string
	nodeToken string // secret
	every     time.Duration
	heard     atomic.Int64 // when the server last answered, Unix nanoseconds of clock

	mu      sync.Mutex
	running map[key]*proc
	// done are attempts this agent ran (or refused, or was told to stop):
	// a node runs an attempt at most once, even if a poll that crossed
	// the runner's end brings it again. Entries expire after doneMemory.
	done     map[key]time.Time
	draining bool
	detached bool          // Run has returned: the state file is the next agent's
	wake     chan struct{} // the running set shrank or a drain began

	sessions sessions // exec, shell and port-forward sessions (sessions.go)

	setupScripts []nodeproto.SetupScript // from the join reply
	setup        setupState              // how they went, for heartbeats
}

// Run runs the agent until the server asks it to drain and nothing runs
// any more (nil), ctx ends (nil: SIGTERM stops the agent, never its
// runners), or the server refuses the node (ErrJoinRefused,
// ErrForgotten). A server that cannot be reached is waited for up to
// GiveUpAfter (ErrServerGone). Run holds a lock on Dir: one agent per
// directory.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	a := &agent{cfg: cfg, log: cfg.Log, clock: cfg.Clock, http: cfg.HTTPClient,
		running: map[key]*proc{}, done: map[key]time.Time{}, wake: make(chan struct{}, 1)}
	a.server = serverurl.New(cfg.Server, cfg.ServerFile)
	a.server.Moved = func(from, to string) {
		a.log.Warn("the server is at another URL now; the agent calls it there", "from", from, "to", to, "file", cfg.ServerFile)
	}
	a.server.BadFile = func(err error) {
		a.log.Warn("cannot read the server's URL from its file; the agent keeps calling the URL it has", "err", err)
	}
	for _, kv := range cfg.Env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(secretEnv, k) {
			a.env = append(a.env, kv)
		}
	}
	if cfg.RunAs != "" {
		if a.runAs, err = isolation.Lookup(cfg.RunAs); err != nil {
			return fmt.Errorf("RunAs: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDir(cfg.Dir)
	if err != nil {
		return err
	}
	defer unlock()

	a.adopt()
	a.heard.Store(a.clock.Now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		a.sessions.wg.Wait()
		a.mu.Lock()
		a.detached = true
		n := len(a.running)
		a.mu.Unlock()
		if n > 0 {
			a.log.Info("agent stopped; its runners keep going", "runners", n)
		}
	}()
	wg.Go(func() { a.watchAdopted(ctx) })

	facts := gatherFacts(ctx, cfg, a.log)
	a.hasGPUs = len(facts.GPUs) > 0
	a.log.Info("node facts", "hostname", facts.Hostname, "address", facts.Address, "cpus", facts.CPUs,
		"memory_bytes", facts.MemoryBytes, "gpus", len(facts.GPUs), "version", facts.Version)
	if err := a.join(ctx, facts); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	fatal := make(chan error, 2)
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	wg.Go(func() { a.heartbeats(ctx, fatal) })
	if len(a.setupScripts) > 0 {
		// Setup runs beside the heartbeats, which keep the lease and
		// report the result; the server gives the node no work before.
		wg.Go(func() {
			r := runSetup(ctx, a.cfg.Dir, a.setupScripts, a.env)
			a.log.Info("setup scripts ended", "ok", r.OK, "script", r.Script, "exit_code", r.ExitCode)
			a.setup.set(r) // the next heartbeat reports it
		})
	}
	wg.Go(func() { a.poll(pollCtx, fatal) })
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case <-a.wake:
			a.mu.Lock()
			draining, n := a.draining, len(a.running)
			a.mu.Unlock()
			if draining {
				stopPolling()
				if n == 0 {
					a.log.Info("drained: nothing runs any more; exiting")
					return nil
				}
			}
		}
	}
}

func (cfg Config) withDefaults() (Config, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, fmt.Errorf("server URL %q: want http(s)://host[:port]", cfg.Server)
	}
	cfg.Server = strings.TrimRight(cfg.Server, "/")
	if cfg.JoinToken == "" {
		return cfg, errors.New("no join token: set FERRY_JOIN_TOKEN to the compute's join token")
	}
	if cfg.Dir == "" {
		return cfg, errors.New("no node directory (--dir)")
	}
	if cfg.Exe == "" {
		if cfg.Exe, err = os.Executable(); err != nil {
			return cfg, fmt.Errorf("find the ferry binary for runners: %w", err)
		}
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.Dir, "cache")
	}
	if cfg.GiveUpAfter <= 0 {
		cfg.GiveUpAfter = 24 * time.Hour
	}
	if cfg.EnvCacheDir == "" {
		cfg.EnvCacheDir = filepath.Join(cfg.Dir, "env-cache")
	}
	// Runners get these as flags and may run after the agent has gone.
	for _, p := range []*string{&cfg.Dir, &cfg.CacheDir, &cfg.EnvCacheDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return cfg, err
		}
	}
	if cfg.Name == "" {
		if cfg.Name, err = os.Hostname(); err != nil {
			return cfg, fmt.Errorf("no node name and no hostname: %w", err)
		}
	}
	if cfg.Version == "" {
		cfg.Version = buildVersion()
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	cfg.PollWait = cmp.Or(cfg.PollWait, 30*time.Second)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 5*time.Second)
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Log = cfg.Log.With("node", cfg.Name)
	return cfg, nil
}

// lockDir makes sure no other agent uses dir: two would start the same
// attempts and overwrite each other's state file.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "agent.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another agent is running with directory %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// sleep waits d on the agent's clock; false when ctx ended first.
func (a *agent) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-a.clock.After(d):
		return true
	}
}

// poke wakes Run to look at the running set and the drain flag.
func (a *agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// join admits the node, retrying while the server is away.
func (a *agent) join(ctx context.Context, facts nodeproto.Facts) error {
	b := backoff{max: a.cfg.MaxBackoff}
	out := outage{what: "join"}
	for {
		var rep nodeproto.JoinReply
		err := a.call(ctx, callTimeout, "POST", "/v1/nodes/join", a.cfg.JoinToken,
			nodeproto.JoinRequest{Name: a.cfg.Name, Facts: facts}, &rep)
		switch {
		case err == nil && rep.NodeToken == "":
			return fmt.Errorf("%w: its answer to the join has no node token", ErrJoinRefused)
		case err == nil:
			out.ok(a)
			a.node, a.nodeToken = cmp.Or(rep.Node, a.cfg.Name), rep.NodeToken
			a.cfg.JoinToken = "" // no longer needed: hold the secret no longer than that
			a.every = defaultBeat
			if rep.HeartbeatSeconds > 0 {
				a.every = time.Duration(rep.HeartbeatSeconds) * time.Second
			} else if rep.LeaseSeconds > 0 {
				a.every = time.Duration(rep.LeaseSeconds) * time.Second / 3
			}
			a.setupScripts = rep.Setup
			a.log.Info("joined", "as", a.node, "heartbeat", a.every, "lease_seconds", rep.LeaseSeconds)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !transient(err):
			return fmt.Errorf("%w (check the join token in FERRY_JOIN_TOKEN and --server): %w", ErrJoinRefused, err)
		}
		if err := out.failed(a, err); err != nil {
			return err
		}
		if !a.sleep(ctx, b.next()) {
			return ctx.Err()
		}
	}
}

func (a *agent) nodePath(what string) string {
	return "/v1/nodes/" + url.PathEscape(a.node) + "/" + what
}

func (a *agent) forgottenError(call string, err error) error {
	return fmt.Errorf("%w (%s: %w); its runners keep going and report to the server on their own", ErrForgotten, call, err)
}

// heartbeats renews the node's lease and reports what runs, every
// interval the server asked for; while the server is away it retries
// sooner (with backoff), so the first heartbeat after an outage re-syncs
// the server with what runs here.
func (a *agent) heartbeats(ctx context.Context, fatal chan<- error) {
	b := backoff{max: a.cfg.MaxBackoff}
	out := outage{what: "heartbeat"}
	for {
		var rep nodeproto.HeartbeatReply
		err := a.call(ctx, callTimeout, "POST", a.nodePath("heartbeat"), a.nodeToken,
			nodeproto.Heartbeat{Running: a.runningList(), Setup: a.setup.get()}, &rep)
		wait := a.every
		switch {
		case err == nil:
			out.ok(a)
			b.reset()
			a.apply(rep)
		case ctx.Err() != nil:
			return
		case forgotten(err):
			fatal <- a.forgottenError("heartbeat", err)
			return
		default:
			if err := out.failed(a, err); err != nil {
				fatal <- err
				return
			}
			wait = min(b.next(), a.every)
		}
		if !a.sleep(ctx, wait) {
			return
		}
	}
}

// runningList is what the heartbeat reports, in a stable order.
func (a *agent) runningList() []nodeproto.Running {
	a.mu.Lock()
	defer a.mu.Unlock()
	list := make([]nodeproto.Running, 0, len(a.running))
	for _, p := range a.running {
		list = append(list, nodeproto.Running{Job: p.Job, Attempt: p.Attempt, Rank: p.Rank})
	}
	slices.SortFunc(list, func(x, y nodeproto.Running) int {
		return cmp.Or(strings.Compare(x.Job, y.Job), cmp.Compare(x.Attempt, y.Attempt))
	})
	return list
}

// apply does what a heartbeat reply asks: stop attempts, drain.
func (a *agent) apply(rep nodeproto.HeartbeatReply) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range rep.Stop {
		k := key{s.Job, s.Attempt}
		a.markDoneLocked(k) // and so never started after this
		p := a.running[k]
		if p == nil || p.stopping {
			continue
		}
		// SIGTERM is the runner's "cancel": it stops the job (SIGKILL
		// after the cancel grace), reports it and exits.
		if err := p.signal(syscall.SIGTERM); err != nil {
			a.log.Warn("cannot stop runner", "job", p.Job, "attempt", p.Attempt, "pid", p.PID, "err", err)
			continue
		}
		p.stopping = true
		a.log.Info("stopping runner at the server's request", "job", p.Job, "attempt", p.Attempt, "pid", p.PID)
	}
	if rep.Drain && !a.draining {
		a.draining = true
		a.log.Info("draining: taking no new work; exiting when nothing runs", "running", len(a.running))
		a.poke()
	}
}

// markDoneLocked remembers that attempt k must not be started (again),
// and forgets attempts remembered long enough. a.mu must be held.
func (a *agent) markDoneLocked(k key) {
	now := a.clock.Now()
	for old, t := range a.done {
		if now.Sub(t) > doneMemory {
			delete(a.done, old)
		}
	}
	a.done[k] = now
}

// poll long-polls for assignments and starts those that are new.
func (a *agent) poll(ctx context.Context, fatal chan<- error) {
	b := backoff{max: a.cfg.MaxBackoff}
	out := outage{what: "poll"}
	path := a.nodePath("assignments") + "?wait=" + strconv.Itoa(int(a.cfg.PollWait/time.Second))
	for {
		began := a.clock.Now()
		var as nodeproto.Assignments
		err := a.call(ctx, a.cfg.PollWait+pollOverhead, "GET", path, a.nodeToken, nil, &as)
		var wait time.Duration
		switch {
		case err == nil:
			out.ok(a)
			b.reset()
			started := 0
			for _, asg := range as.Assignments {
				if a.start(asg) {
					started++
				}
			}
			a.openSessions(ctx, as.Sessions)
			// A server that answers at once with what already runs must
			// not make the agent spin.
			if started == 0 && len(as.Sessions) == 0 {
				wait = minPollGap - a.clock.Now().Sub(began)
			}
		case ctx.Err() != nil:
			return
		case forgotten(err):
			fatal <- a.forgottenError("poll", err)
			return
		default:
			if err := out.failed(a, err); err != nil {
				fatal <- err
				return
			}
			wait = b.next()
		}
		if wait > 0 && !a.sleep(ctx, wait) {
			return
		}
	}
}

// start starts a runner for asg unless the attempt runs or ran here, or
// the node drains. It says whether it started one.
func (a *agent) start(asg nodeproto.Assignment) bool {
	k := key{asg.Job, asg.Attempt}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining || a.detached || a.running[k] != nil {
		return false
	}
	if _, ok := a.done[k]; ok {
		return false
	}
	p, err := a.launch(asg)
	if err != nil {
		// Not retried: the next heartbeat tells the server the attempt
		// does not run here, and the server decides what follows.
		a.markDoneLocked(k)
		a.log.Error("cannot start the runner of an assignment", "job", asg.Job, "attempt", asg.Attempt, "err", err)
		return false
	}
	a.running[k] = p
	a.saveLocked()
	a.log.Info("runner started", "job", p.Job, "attempt", p.Attempt, "rank", p.Rank, "pid", p.PID, "gpus", asg.GPUs)
	return true
}

// watchAdopted notices when adopted runners end.
func (a *agent) watchAdopted(ctx context.Context) {
	for a.sleep(ctx, watchEvery) {
		a.checkAdopted()
	}
}
