// Package process is the `process` node provider: each machine is a
// `ferry agent` process on the server's own host, with a directory of its
// own and its share of the host's GPUs. It makes a single multi-GPU box a
// cluster, and it is how clusters are developed and tested without a cloud.
//
// Machines outlive the server: an agent is started in a session of its
// own, and what the provider knows about it is written to
// Dir/<pool>/<name>/machine.json, so a provider made after a server
// restart lists and terminates the same machines. The provider needs
// Linux's /proc to tell whether an agent still runs.
package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/timerslack"
)

// Config sets up a process provider.
type Config struct {
	Exe string // the ferry binary agents are started from
	// Dir holds one directory per machine, Dir/<pool>/<name>/, passed to
	// its agent as --dir. Providers over the same Dir share its machines,
	// also across processes.
	Dir string
	// GPUs are the host's GPU indices (the caller finds them). Machines get
	// disjoint shares of them in CUDA_VISIBLE_DEVICES.
	GPUs []int
	// Grace is how long Terminate waits between SIGTERM and SIGKILL;
	// 0 means 10s.
	Grace time.Duration
	// RunAs is the account that agents start jobs as (their --run-as;
	// "" = the agents' own user). Dir and the machines' directories are
	// then passable (0711, not listable) by it, so its jobs reach their
	// working directories.
	RunAs string
	// JobUIDs is the agents' --job-uids ("" = none).
	JobUIDs string
	// ServerFile is the file the server records its URL in on this host
	// (serverurl.FileName in its work dir; "" = none), given to agents as
	// --server-file: they follow a server restarted at another address.
	ServerFile string
}

// Provider is the process node provider. Its methods are safe for
// concurrent use.
type Provider struct {
	cfg  Config
	boot string
	mu   sync.Mutex // with Dir/.lock, serialises launches and the removal of records
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Getter   = (*Provider)(nil)
)

const (
	recordFile = "machine.json"
	logFile    = "agent.log"
	address    = "127.0.0.1"
	// killWait bounds the wait for processes to go after SIGKILL; only a
	// process stuck in the kernel takes longer.
	killWait  = 5 * time.Second
	pollEvery = 50 * time.Millisecond
)

// New checks cfg, makes cfg.Dir and returns a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Exe == "" {
		return nil, errors.New("process provider: Exe (the ferry binary) is empty")
	}
	if cfg.Dir == "" {
		return nil, errors.New("process provider: Dir is empty")
	}
	seen := map[int]bool{}
	for _, g := range cfg.GPUs {
		if g < 0 || seen[g] {
			return nil, fmt.Errorf("process provider: GPUs %v: indices must be distinct and not negative", cfg.GPUs)
		}
		seen[g] = true
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 10 * time.Second
	}
	if strings.ContainsRune(cfg.Exe, '/') {
		// Agents start in their own directories, where a relative path
		// would name another file.
		exe, err := filepath.Abs(cfg.Exe)
		if err != nil {
			return nil, fmt.Errorf("process provider: Exe: %w", err)
		}
		cfg.Exe = exe
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("process provider: Dir: %w", err)
	}
	if err := mkdirMode(dir, cfg.dirMode()); err != nil {
		return nil, fmt.Errorf("process provider: %w", err)
	}
	// Working directories read from /proc are resolved paths; Dir must be
	// one too for Terminate to recognise the processes under it.
	if cfg.Dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, fmt.Errorf("process provider: %w", err)
	}
	if _, err := readProc(os.Getpid()); err != nil {
		return nil, fmt.Errorf("process provider: needs Linux's /proc to follow its agents: %w", err)
	}
	boot, err := bootID()
	if err != nil {
		return nil, fmt.Errorf("process provider: %w", err)
	}
	cfg.GPUs = slices.Clone(cfg.GPUs)
	return &Provider{cfg: cfg, boot: boot}, nil
}

// Type implements provider.Provider.
func (p *Provider) Type() string { return "process" }

// record is machine.json: what identifies a machine's agent after a
// restart. It never holds the agent's environment or arguments, where the
// join token and other secrets travel.
type record struct {
	ID        string    `json:"id"`
	Pool      string    `json:"pool"`
	Name      string    `json:"name"`
	Size      string    `json:"size,omitempty"`
	PID       int       `json:"pid"`
	BootID    string    `json:"boot_id"`
	StartTime uint64    `json:"start_time"` // /proc/<pid>/stat field 22: with the pid and boot, one process
	GPUs      []int     `json:"gpus"`
	Started   time.Time `json:"started"`
}

// nameRE bounds the length apart: a counted repetition ({0,127}) compiles
// into a program of hundreds of states, in the init of every start of the
// binary (a job's runner and its shim included).
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// checkName keeps pool and node names usable as single path elements.
func checkName(what, s string) error {
	if len(s) > 128 || !nameRE.MatchString(s) {
		return fmt.Errorf("process provider: %s %q: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", what, s)
	}
	return nil
}

// parseID splits an ID made by Launch into its pool and name.
func parseID(id string) (pool, name string, err error) {
	pool, name, ok := strings.Cut(id, "/")
	if !ok || checkName("pool", pool) != nil || checkName("name", name) != nil {
		return "", "", fmt.Errorf("process provider: %q is not a machine ID of this provider (POOL/NAME)", id)
	}
	return pool, name, nil
}

func (p *Provider) machineDir(pool, name string) string {
	return filepath.Join(p.cfg.Dir, pool, name)
}

// lock serialises, across goroutines and processes sharing Dir, the steps
// that read and write records: GPU shares are decided from them.
func (p *Provider) lock() (unlock func(), err error) {
	p.mu.Lock()
	f, err := os.OpenFile(filepath.Join(p.cfg.Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("process provider: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		p.mu.Unlock()
		return nil, fmt.Errorf("process provider: lock %s: %w", f.Name(), err)
	}
	return func() {
		f.Close() // releases the flock
		p.mu.Unlock()
	}, nil
}

// Launch implements provider.Provider. It starts `Exe AgentArgs... --dir
// DIR` in a session of its own, in DIR, with its output in DIR/agent.log
// and its GPU share in CUDA_VISIBLE_DEVICES. The machine's ID is
// POOL/NAME; a record of that name must not exist yet.
func (p *Provider) Launch(ctx context.Context, r provider.LaunchRequest) (provider.Machine, error) {
	if err := ctx.Err(); err != nil {
		return provider.Machine{}, err
	}
	if err := checkName("pool", r.Pool); err != nil {
		return provider.Machine{}, err
	}
	if err := checkName("name", r.Name); err != nil {
		return provider.Machine{}, err
	}
	if r.GPUs < 0 {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s/%s: GPUs must not be negative (got %d)", r.Pool, r.Name, r.GPUs)
	}
	for i, kv := range r.AgentEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			// Not the entry itself: it may be a secret.
			return provider.Machine{}, fmt.Errorf("process provider: machine %s/%s: agent environment entry %d is not KEY=VALUE", r.Pool, r.Name, i)
		}
	}
	unlock, err := p.lock()
	if err != nil {
		return provider.Machine{}, err
	}
	defer unlock()

	id := r.Pool + "/" + r.Name
	dir := p.machineDir(r.Pool, r.Name)
	if _, err := os.Lstat(filepath.Join(dir, recordFile)); err == nil {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s already exists; terminate it first or choose another name", id)
	}
	gpus, err := p.allocate(id, r.GPUs)
	if err != nil {
		return provider.Machine{}, err
	}
	// A directory without a record is what a launch or terminate cut short
	// left behind; nothing of a machine runs from it any more.
	if err := os.RemoveAll(dir); err != nil {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s: clear leftover directory: %w", id, err)
	}
	if err := mkdirMode(filepath.Dir(dir), p.cfg.dirMode()); err != nil {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s: %w", id, err)
	}
	if err := mkdirMode(dir, p.cfg.dirMode()); err != nil {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s: %w", id, err)
	}
	m, err := p.start(id, dir, r, gpus)
	if err != nil {
		os.RemoveAll(dir)
		return provider.Machine{}, err
	}
	return m, nil
}

// allocate picks n of the host's GPUs that no live machine holds, lowest
// first. Called with the lock held.
func (p *Provider) allocate(id string, n int) ([]int, error) {
	if n == 0 {
		return nil, nil
	}
	if len(p.cfg.GPUs) == 0 {
		return nil, fmt.Errorf("process provider: machine %s wants %d GPUs, but this host has none configured for the provider", id, n)
	}
	held := map[int]string{}
	ents, err := p.scan("")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if e.rec != nil && p.alive(e.rec) {
			for _, g := range e.rec.GPUs {
				held[g] = e.rec.ID
			}
		}
	}
	var free []int
	for _, g := range p.cfg.GPUs {
		if _, ok := held[g]; !ok {
			free = append(free, g)
		}
	}
	if len(free) < n {
		return nil, fmt.Errorf("process provider: machine %s wants %d GPUs, but only %d of the host's %d are free (%d held by running machines); terminate one or ask for fewer",
			id, n, len(free), len(p.cfg.GPUs), len(held))
	}
	return free[:n], nil
}

// start starts the agent and writes its record. Called with the lock held.
func (p *Provider) start(id, dir string, r provider.LaunchRequest, gpus []int) (provider.Machine, error) {
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s: %w", id, err)
	}
	defer logf.Close()
	args := append(slices.Clone(r.AgentArgs), "--dir", dir)
	if p.cfg.RunAs != "" {
		args = append(args, "--run-as", p.cfg.RunAs)
	}
	if p.cfg.JobUIDs != "" {
		args = append(args, "--job-uids", p.cfg.JobUIDs)
	}
	if p.cfg.ServerFile != "" {
		args = append(args, "--server-file", p.cfg.ServerFile)
	}
	cmd := exec.Command(p.cfg.Exe, args...)
	cmd.Dir = dir
	// The join token travels in the environment, never on the command line
	// where other users of the host could read it. Later entries win, so
	// the request's variables and the GPU share override the few of the
	// server's that an agent gets.
	cmd.Env = append(AgentEnv(os.Environ()), r.AgentEnv...)
	if len(p.cfg.GPUs) > 0 {
		// Set even when the share is empty: CUDA_VISIBLE_DEVICES="" hides
		// every GPU, which is right for a CPU machine on a GPU host. On a
		// host without GPUs there is nothing to hide, and the variable is
		// left as the server has it.
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+joinInts(gpus))
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// A session of its own: a server stopped by Ctrl-C or SIGTERM to its
	// group leaves machines running, as a cloud's machines would.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s: start agent: %w", id, err)
	}
	pid := cmd.Process.Pid
	rec := &record{ID: id, Pool: r.Pool, Name: r.Name, Size: r.Size, PID: pid, BootID: p.boot,
		GPUs: gpus, Started: time.Now().UTC()}
	// Not yet waited for, the agent is at worst a zombie, whose stat is
	// still there to read.
	info, err := readProc(pid)
	if err == nil {
		rec.StartTime = info.Start
		err = writeRecord(dir, rec)
	}
	if err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return provider.Machine{}, fmt.Errorf("process provider: machine %s: record the agent: %w", id, err)
	}
	go func() { _ = cmd.Wait() }() // reap it while we live; init does after
	return p.machine(rec), nil
}

func writeRecord(dir string, rec *record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+recordFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
}

func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, recordFile), err)
	}
	if rec.PID <= 0 {
		return nil, fmt.Errorf("%s: no pid", filepath.Join(dir, recordFile))
	}
	return &rec, nil
}

// alive says whether the record's agent still runs: its pid is alive and
// is the same process, not a later one that got the pid.
func (p *Provider) alive(rec *record) bool {
	if rec.BootID != p.boot {
		return false
	}
	info, err := readProc(rec.PID)
	return err == nil && !info.dead() && info.Start == rec.StartTime
}

// machine is what a record says, in the provider package's terms. A
// machine whose agent has ended is "stopped" and keeps its record (and
// GPUs free for others) until Terminate.
func (p *Provider) machine(rec *record) provider.Machine {
	dir := p.machineDir(rec.Pool, rec.Name)
	m := provider.Machine{ID: rec.ID, Pool: rec.Pool, State: provider.StateStopped, Labels: map[string]string{
		"dir":     dir,
		"log":     filepath.Join(dir, logFile),
		"pid":     strconv.Itoa(rec.PID),
		"gpus":    joinInts(rec.GPUs),
		"started": rec.Started.Format(time.RFC3339),
	}}
	if rec.Size != "" {
		m.Labels["size"] = rec.Size
	}
	if p.alive(rec) {
		m.State, m.Address = provider.StateRunning, address
		if preempted(dir) {
			m.State = provider.StatePreempted
		}
	}
	return m
}

// entry is one machine directory: its record, or why it cannot be read.
type entry struct {
	pool, name string
	rec        *record
	err        error
}

// scan reads the records of pool, or of every pool when pool is "".
// Directories without a record (a launch in progress, or one cut short)
// are left out.
func (p *Provider) scan(pool string) ([]entry, error) {
	pools := []string{pool}
	if pool == "" {
		ents, err := os.ReadDir(p.cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("process provider: %w", err)
		}
		pools = pools[:0]
		for _, e := range ents {
			if e.IsDir() && checkName("pool", e.Name()) == nil {
				pools = append(pools, e.Name())
			}
		}
	}
	var out []entry
	for _, pl := range pools {
		ents, err := os.ReadDir(filepath.Join(p.cfg.Dir, pl))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("process provider: %w", err)
		}
		for _, e := range ents {
			if !e.IsDir() || checkName("name", e.Name()) != nil {
				continue
			}
			rec, err := readRecord(p.machineDir(pl, e.Name()))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			out = append(out, entry{pool: pl, name: e.Name(), rec: rec, err: err})
		}
	}
	return out, nil
}

// List implements provider.Provider, sorted by ID. A machine whose record
// cannot be read is listed as failed, so that it can be terminated.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Machine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pool != "" {
		if err := checkName("pool", pool); err != nil {
			return nil, err
		}
	}
	ents, err := p.scan(pool)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Machine, 0, len(ents))
	for _, e := range ents {
		if e.err != nil {
			out = append(out, provider.Machine{ID: e.pool + "/" + e.name, Pool: e.pool, State: provider.StateFailed,
				Error: "unreadable record: " + e.err.Error()})
			continue
		}
		out = append(out, p.machine(e.rec))
	}
	slices.SortFunc(out, func(a, b provider.Machine) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Get implements provider.Getter.
func (p *Provider) Get(ctx context.Context, id string) (provider.Machine, error) {
	if err := ctx.Err(); err != nil {
		return provider.Machine{}, err
	}
	pool, name, err := parseID(id)
	if err != nil {
		return provider.Machine{}, err
	}
	rec, err := readRecord(p.machineDir(pool, name))
	if errors.Is(err, fs.ErrNotExist) {
		return provider.Machine{}, fmt.Errorf("process provider: machine %s: %w", id, provider.ErrNotFound)
	}
	if err != nil {
		return provider.Machine{ID: id, Pool: pool, State: provider.StateFailed, Error: "unreadable record: " + err.Error()}, nil
	}
	return p.machine(rec), nil
}

// Terminate implements provider.Provider. It stops everything that runs on
// the machine: the agent's process group, and every process whose working
// directory lies in the machine's directory (the runners and jobs that the
// agent starts in sessions of their own, which a signal to the agent's
// group does not reach). Each gets SIGTERM, and SIGKILL after the grace.
// Then the machine's whole directory goes, agent.log, caches and run
// directories included, as a cloud machine's disk goes with it.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	pool, name, err := parseID(id)
	if err != nil {
		return err
	}
	dir := p.machineDir(pool, name)
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	rec, rerr := readRecord(dir)
	unlock()
	if errors.Is(rerr, fs.ErrNotExist) {
		// Gone already, or a launch cut short; no agent to stop. A machine
		// launched from here on with this name is a new one.
		return p.remove(pool, dir)
	}
	if rerr != nil {
		rec = nil // unreadable: find its processes by their directory only
	}
	// Not under the lock: the grace may be long, and the record, kept until
	// the processes are gone, stops a launch of the same name meanwhile.
	if err := p.stop(ctx, rec, dir); err != nil {
		return fmt.Errorf("process provider: terminate %s: %w", id, err)
	}
	return p.remove(pool, dir)
}

// remove deletes a machine's directory, record first, so that a removal
// cut short leaves a directory that Launch clears and nothing lists.
func (p *Provider) remove(pool, dir string) error {
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(filepath.Join(dir, recordFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("process provider: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("process provider: %w", err)
	}
	_ = os.Remove(filepath.Join(p.cfg.Dir, pool)) // only when empty: the pool's last machine
	return nil
}

// stop signals the machine's processes with SIGTERM, then with SIGKILL
// those left after the grace, and waits until none is left.
func (p *Provider) stop(ctx context.Context, rec *record, dir string) error {
	left, err := p.signal(rec, dir, syscall.SIGTERM)
	if err != nil || len(left) == 0 {
		return err
	}
	if left, err = p.waitGone(ctx, rec, dir, p.cfg.Grace); err != nil || len(left) == 0 {
		return err
	}
	if _, err := p.signal(rec, dir, syscall.SIGKILL); err != nil {
		return err
	}
	left, err = p.waitGone(ctx, rec, dir, killWait)
	if err == nil && len(left) > 0 {
		err = fmt.Errorf("processes %v still run after SIGKILL", left)
	}
	return err
}

// signal sends sig to the agent's group and to each process of the
// machine, and returns those it found.
func (p *Provider) signal(rec *record, dir string, sig syscall.Signal) ([]int, error) {
	procs, group, err := p.processes(rec, dir)
	if err != nil {
		return nil, err
	}
	if group {
		_ = syscall.Kill(-rec.PID, sig) // members that appeared since the scan too
	}
	for _, pid := range procs {
		_ = syscall.Kill(pid, sig)
	}
	return procs, nil
}

// waitGone waits until the machine has no process left, for at most d.
func (p *Provider) waitGone(ctx context.Context, rec *record, dir string, d time.Duration) ([]int, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		left, _, err := p.processes(rec, dir)
		if err != nil || len(left) == 0 {
			return left, err
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-deadline.C:
			return left, nil
		case <-tick.C:
		}
	}
}

// processes finds the live processes of a machine: those in the agent's
// process group, and those whose working directory is in dir. group says
// whether the agent's group may be signalled as a whole. The kernel does
// not hand out a pid while a group of that number has members, so the
// group is the agent's unless its pid now names another process.
func (p *Provider) processes(rec *record, dir string) (procs []int, group bool, err error) {
	if rec != nil && rec.BootID == p.boot {
		info, err := readProc(rec.PID)
		group = err != nil || info.Start == rec.StartTime
	}
	all, err := pids()
	if err != nil {
		return nil, false, err
	}
	self := os.Getpid()
	for _, pid := range all {
		if pid == self {
			continue
		}
		info, err := readProc(pid)
		if err != nil || info.dead() {
			continue
		}
		if group && info.PGID == rec.PID {
			procs = append(procs, pid)
			continue
		}
		if cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err == nil &&
			(cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			procs = append(procs, pid)
		}
	}
	return procs, group && len(procs) > 0, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// dirMode is the mode of Dir and of the directories under it on the way
// to the agents' runs: private, or passable by the jobs' account.
func (c Config) dirMode() os.FileMode {
	if c.RunAs != "" {
		return 0o711
	}
	return 0o700
}

// mkdirMode makes dir with mode, and gives it that mode when it exists.
func mkdirMode(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

// agentVars are the variables of the server's environment an agent gets,
// and agentPrefixes the families of them: what a machine's software
// needs to find programs, speak the locale, reach the network through
// its proxy, find the Docker engine and install packages from the
// operator's mirror. Nothing else of the server's environment (tokens,
// cloud keys) reaches an agent, its runners or its jobs.
var (
	agentVars = []string{
		"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
		"http_proxy", "https_proxy", "no_proxy", "all_proxy",
		"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
		"DOCKER_HOST", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_API_VERSION", "DOCKER_CONFIG",
		"CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
		timerslack.UserVar, // the agent's runners start jobs with it
	}
	agentPrefixes = []string{"LC_", "PIP_", "CONDA_"}
)

// AgentEnv is the environment an agent starts with, from the server's:
// the variables of agentVars and agentPrefixes, in their order in server.
func AgentEnv(server []string) []string {
	var env []string
	for _, kv := range server {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if slices.Contains(agentVars, k) || slices.ContainsFunc(agentPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			env = append(env, kv)
		}
	}
	return env
}
