package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
)

// StateFile is the agent's record of its runners inside its directory. It
// holds pids, process start times and attempts; never a token.
const StateFile = "agent-state.json"

// key names an attempt: a node runs at most one runner per attempt.
type key struct {
	job     string
	attempt int
}

// proc is one runner the agent started (or adopted after a restart).
type proc struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	Rank    int    `json:"rank"`
	PID     int    `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat, the process's start in
	// clock ticks after boot: with the pid, it names one process for the
	// life of the machine, where a pid alone may be recycled.
	StartTime uint64 `json:"start_time"`

	os       *os.Process // our child; nil for an adopted runner
	stopping bool        // SIGTERM sent
}

func (p *proc) key() key { return key{p.Job, p.Attempt} }

// signal sends sig to the runner. For an adopted runner, the process is
// opened first (a pidfd on Linux) and its start time checked after, so the
// signal cannot reach a process that took over a recycled pid.
func (p *proc) signal(sig syscall.Signal) error {
	if p.os != nil {
		return p.os.Signal(sig)
	}
	op, err := os.FindProcess(p.PID)
	if err != nil {
		return err
	}
	defer op.Release()
	if !alive(p.PID, p.StartTime) {
		return os.ErrProcessDone
	}
	return op.Signal(sig)
}

// state is what StateFile holds.
type state struct {
	Runners []*proc `json:"runners"`
}

// saveLocked writes the running set to StateFile. It is written whole to a
// temporary file and renamed, so a reader (the next agent) never sees half
// of it. It is not synced: it is for an agent restart, and after a machine
// restart no runner of it is alive anyway. a.mu must be held.
func (a *agent) saveLocked() {
	st := state{Runners: slices.SortedFunc(maps.Values(a.running), func(x, y *proc) int {
		return cmp.Or(strings.Compare(x.Job, y.Job), cmp.Compare(x.Attempt, y.Attempt))
	})}
	if st.Runners == nil {
		st.Runners = []*proc{}
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err == nil {
		path := filepath.Join(a.cfg.Dir, StateFile)
		tmp := path + ".tmp"
		if err = os.WriteFile(tmp, append(data, '\n'), 0o600); err == nil {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		a.log.Error("cannot record the runners; a restarted agent will not know them", "err", err)
	}
}

// adopt takes over the runners a previous agent recorded that are still
// alive, so heartbeats report them and a Stop reaches them. Runners that
// ended meanwhile are not run again.
func (a *agent) adopt() {
	data, err := os.ReadFile(filepath.Join(a.cfg.Dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var st state
	if err == nil {
		err = json.Unmarshal(data, &st)
	}
	if err != nil {
		// The runners report to the server on their own; only the
		// heartbeats will miss them.
		a.log.Error("cannot read the runners of a previous agent; ignoring them", "file", StateFile, "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range st.Runners {
		if p == nil {
			continue
		}
		if p.PID <= 0 || !alive(p.PID, p.StartTime) {
			a.log.Info("runner ended while the agent was away", "job", p.Job, "attempt", p.Attempt, "pid", p.PID)
			a.done[p.key()] = a.clock.Now()
			continue
		}
		a.log.Info("adopted a running runner", "job", p.Job, "attempt", p.Attempt, "pid", p.PID)
		a.running[p.key()] = p
	}
	a.saveLocked()
}

// procStat reads the state (R, S, Z ...) and start time of a process from
// /proc/PID/stat. The command name, field 2, is in parentheses and may
// hold spaces and parentheses itself, so fields are counted from the last
// ')'.
func procStat(pid int) (state byte, start uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], start, err
}

// alive says whether the process pid that started at start still runs. A
// zombie has ended: its parent just has not collected it yet.
func alive(pid int, start uint64) bool {
	st, s, err := procStat(pid)
	return err == nil && s == start && st != 'Z' && st != 'X'
}

// launch starts `EXE runner` for an assignment, as the local target does:
// in its own session, so that it outlives the agent; with the run token in
// its environment, not its arguments, where other users could read it.
// a.mu must be held.
func (a *agent) launch(as nodeproto.Assignment) (*proc, error) {
	if !safeName(as.Job) {
		return nil, fmt.Errorf("job name %q cannot be a directory name", as.Job)
	}
	if as.Attempt < 0 {
		return nil, fmt.Errorf("attempt %d is negative", as.Attempt)
	}
	if as.RunToken == "" {
		return nil, errors.New("the assignment has no run token")
	}
	dir := filepath.Join(a.cfg.Dir, "runs", as.Job, strconv.Itoa(as.Attempt))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if a.cfg.RunAs != "" {
		// Passable, not listable, by the job's account, whatever mode an
		// earlier agent made them with.
		for _, d := range []string{a.cfg.Dir, filepath.Join(a.cfg.Dir, "runs"), filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o711); err != nil {
				return nil, err
			}
		}
	}
	logf, err := os.OpenFile(filepath.Join(dir, "runner.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	api, apiFile := as.APIURL, ""
	if api == "" {
		// The server did not say; the URL we reach it at works for us,
		// and the file we follow it by for our runners.
		api, apiFile = a.server.Get(), a.cfg.ServerFile
	}
	args := invocation.Invocation{API: api, APIFile: apiFile, Job: as.Job, Attempt: as.Attempt, Dir: dir,
		Cache: a.cfg.CacheDir, EnvCache: a.cfg.EnvCacheDir, EnvCacheSize: a.cfg.EnvCacheSize,
		CancelGrace: a.cfg.CancelGrace, RunAs: a.cfg.RunAs, JobUIDs: a.cfg.JobUIDs}.Args()
	cmd := exec.Command(a.cfg.Exe, args...)
	cmd.Env = a.runnerEnv(as)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start runner: %w", err)
	}
	p := &proc{Job: as.Job, Attempt: as.Attempt, Rank: as.Rank, PID: cmd.Process.Pid, os: cmd.Process}
	// Not yet waited for, the child is at worst a zombie, whose stat is
	// still there to read.
	if _, p.StartTime, err = procStat(p.PID); err != nil {
		a.log.Warn("cannot read the runner's start time; a restarted agent will not adopt it", "pid", p.PID, "err", err)
	}
	go a.reap(cmd, p)
	return p, nil
}

// reap waits for a runner the agent started and forgets it when it ends.
func (a *agent) reap(cmd *exec.Cmd, p *proc) {
	err := cmd.Wait()
	how := "exited 0"
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		how = ee.ProcessState.String()
	case err != nil:
		how = err.Error()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.endedLocked(p, how)
}

// endedLocked forgets a runner that has ended. After the agent has
// stopped, it leaves the state file alone: it is the next agent's now.
// a.mu must be held.
func (a *agent) endedLocked(p *proc, how string) {
	if a.detached || a.running[p.key()] != p {
		return
	}
	delete(a.running, p.key())
	a.markDoneLocked(p.key())
	a.saveLocked()
	a.log.Info("runner ended", "job", p.Job, "attempt", p.Attempt, "pid", p.PID, "how", how)
	a.poke()
}

// checkAdopted forgets adopted runners that have ended. They are not the
// agent's children, so no wait reports their end; their pids are watched.
func (a *agent) checkAdopted() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.running {
		if p.os == nil && !alive(p.PID, p.StartTime) {
			a.endedLocked(p, "ended (adopted runner)")
		}
	}
}

// safeName says whether a job name can be one path element under runs/:
// the name comes from the server, and still must not lead anywhere else.
func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`+"\x00")
}

// secretEnv are variables of the agent's environment that runners must
// not inherit: the join token is the agent's alone, and a run token is set
// per runner.
var secretEnv = []string{"FERRY_JOIN_TOKEN", "FERRY_RUN_TOKEN"}

// runnerEnv is a runner's environment: the agent's own, less its secrets,
// with the assignment's variables, its GPUs and its run token. The runner
// passes all but FERRY_* variables on to the job, which is how Env
// (MASTER_ADDR, WORLD_SIZE ...) and CUDA_VISIBLE_DEVICES reach it.
func (a *agent) runnerEnv(as nodeproto.Assignment) []string {
	set := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(as.Env)) {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(as.Env[k], "\x00"):
			a.log.Warn("assignment variable is not a valid name; left out", "job", as.Job, "attempt", as.Attempt, "var", k)
		case strings.HasPrefix(k, "FERRY_NODE_"):
			// The node's place in a multi-node attempt (rank, count,
			// addresses): the runner reads them to start its ranks and to
			// report as its node rank.
			set[k] = as.Env[k]
		case strings.HasPrefix(k, "FERRY_") || k == "CUDA_VISIBLE_DEVICES":
			// Other FERRY_ variables configure the runner (and would not
			// reach the job); GPUs are given by the assignment's GPUs alone.
			a.log.Warn("assignment variable is reserved; left out", "job", as.Job, "attempt", as.Attempt, "var", k)
		default:
			set[k] = as.Env[k]
		}
	}
	if len(as.GPUs) > 0 || a.hasGPUs {
		// An attempt that was given no GPUs on a GPU node gets an empty
		// list, which hides every GPU: otherwise CUDA would let it use
		// all of them, GPUs the server gave to other attempts.
		ids := make([]string, len(as.GPUs))
		for i, g := range as.GPUs {
			ids[i] = strconv.Itoa(g)
		}
		set["CUDA_VISIBLE_DEVICES"] = strings.Join(ids, ",")
		// The indices are nvidia-smi's, which numbers GPUs by PCI bus;
		// CUDA numbers them fastest first unless told otherwise, and on
		// a host with mixed GPUs the two orders differ.
		if _, ok := set["CUDA_DEVICE_ORDER"]; !ok {
			if _, ok := lookupEnv(a.env, "CUDA_DEVICE_ORDER"); !ok {
				set["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
			}
		}
	}
	set["FERRY_RUN_TOKEN"] = as.RunToken
	env := make([]string, 0, len(a.env)+len(set))
	for _, kv := range a.env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok && !slices.Contains(secretEnv, k) {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		env = append(env, k+"="+set[k])
	}
	return env
}
