// Package local is the `local` compute target: job attempts run on the
// server's own machine, each under a `ferry runner` process that is started
// in its own session, so that stopping or killing the server does not stop
// the jobs (docs/architecture.md, "How a job runs").
package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/timerslack"
)

// Config sets up a local target.
type Config struct {
	Exe      string // the ferry binary that runners are started from
	RunsDir  string // attempts get RunsDir/<job>/<attempt>; outside the data dir
	CacheDir string // the machine's blob cache, shared by its runners
	Capacity int    // attempts at once; 0 means the number of CPUs
	// CancelGrace is passed to runners: SIGTERM to SIGKILL. 0 = runner's default.
	CancelGrace string
	// EnvCacheDir holds the machine's built environments; EnvCacheSize
	// bounds it (a size such as 50g; "" = no bound).
	EnvCacheDir  string
	EnvCacheSize string
	// Docker says whether this machine has a reachable Docker engine; nil
	// means it has none. Image environments need one.
	Docker func(ctx context.Context) error
	// RunAs is the account the runners start jobs as ("" = the runner's
	// own). The way to each attempt's directory is then passable by it.
	RunAs string
	// JobUIDs, with RunAs, makes each attempt run as a uid of its own
	// from this range (isolation.Acquire); "" = all as RunAs.
	JobUIDs string
	// GPUs is how many GPUs this machine has (what nvidia-smi lists); a
	// job that asks for more is refused at submit.
	GPUs int
	// Executor runs attempts in the long-lived local executor
	// (executor.go) instead of one `ferry runner` process each.
	Executor bool
	// APIFile is the file the server records its URL in (serverurl's),
	// given to runners as --api-file: they outlive the server and follow
	// it when it comes back at another address. "" = none.
	APIFile string
}

// Target is the local compute target.
type Target struct {
	cfg    Config
	execMu sync.Mutex // one start of the executor at a time
	// execDirReady: the executor's folder was made (or checked) since
	// the executor last failed to answer.
	execDirReady bool
	// execConn is the connection to the executor that the last launch
	// left open (executor.go), under execMu.
	execConn *executorConn

	dirsMu    sync.Mutex
	runsReady bool // the runs dir has its mode (dirs.go)
}

var (
	_ compute.Target       = (*Target)(nil)
	_ compute.FinalReports = (*Target)(nil)
)

// New returns a local target.
func New(cfg Config) *Target {
	if cfg.Capacity <= 0 {
		cfg.Capacity = runtime.NumCPU()
	}
	return &Target{cfg: cfg}
}

// Type implements compute.Target.
func (t *Target) Type() string { return "local" }

// Capacity implements compute.Target.
func (t *Target) Capacity() int { return t.cfg.Capacity }

// Admit implements compute.Target: one process on this machine, with the
// machine's own software, a virtualenv or conda env built here, or a
// container of this machine's Docker engine.
func (t *Target) Admit(j *spec.Job, env *environment.Spec) error {
	refuse := func(field, why string) error {
		return fmt.Errorf("%s: %s (%w)", field, why, compute.ErrNotSupported)
	}
	if r := j.Resources; r != nil {
		if r.InstanceCount > 1 {
			return refuse("resources.instance_count", fmt.Sprintf("the local target is one machine, so it runs 1 instance, not %d; use a cluster", r.InstanceCount))
		}
		if r.InstanceType != "" {
			return refuse("resources.instance_type", "the local target has no sizes; leave it out or use a cluster")
		}
		if r.DockerArgs != "" || r.ShmSize != "" {
			if env == nil || !env.NeedsDocker() {
				return refuse("resources", "docker_args and shm_size apply to image environments (image or build)")
			}
			if _, err := environment.ParseContainerOptions(r.ShmSize, r.DockerArgs); err != nil {
				return fmt.Errorf("%v (%w)", err, compute.ErrNotSupported)
			}
		}
	}
	if n, field := j.Resources.GPUs(); n > t.cfg.GPUs {
		has := "none"
		if t.cfg.GPUs > 0 {
			has = "only " + strconv.Itoa(t.cfg.GPUs)
		}
		return refuse(field, fmt.Sprintf("the job asks for %d GPU(s), but the local target's machine has %s (as nvidia-smi lists them); submit it to a cluster or compute instance of a GPU size (see `ferry size list`), or leave %s out", n, has, field))
	}
	if j.Distribution != nil {
		return refuse("distribution", "distributed training needs a cluster target")
	}
	if len(j.Services) > 0 {
		return refuse("services", "interactive services need a compute instance or cluster")
	}
	if j.QueueSettings != nil && j.QueueSettings.JobTier != "" {
		return refuse("queue_settings.job_tier", "job tiers apply to serverless jobs")
	}
	if env != nil && env.NeedsDocker() {
		if t.cfg.Docker == nil {
			return refuse("environment", "image environments need a Docker engine, and this machine has none configured; use python, conda_file or user_managed")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.cfg.Docker(ctx); err != nil {
			return refuse("environment", fmt.Sprintf("image environments need a Docker engine, and this machine's cannot be reached (%v); start it, or use python, conda_file or user_managed", err))
		}
	}
	return nil
}

// Launch implements compute.Target. The run token travels in the
// environment, not the command line, where other users could read it.
// The local target has no engine between it and the runner, so the
// attempt has no handle.
func (t *Target) Launch(_ context.Context, l compute.Launch) (compute.Handle, error) {
	return "", t.launch(l)
}

func (t *Target) launch(l compute.Launch) error {
	dir := filepath.Join(t.cfg.RunsDir, l.Job, strconv.Itoa(l.Attempt))
	if err := t.readyRunsDir(); err != nil {
		return err
	}
	inv := invocation.Invocation{API: l.APIURL, APIFile: t.cfg.APIFile, Job: l.Job, Attempt: l.Attempt, Dir: dir, Cache: t.cfg.CacheDir,
		EnvCache: t.cfg.EnvCacheDir, EnvCacheSize: t.cfg.EnvCacheSize, RunAs: t.cfg.RunAs, JobUIDs: t.cfg.JobUIDs}
	if t.cfg.CancelGrace != "" {
		var err error
		if inv.CancelGrace, err = time.ParseDuration(t.cfg.CancelGrace); err != nil {
			return fmt.Errorf("the cancel grace %q: %w", t.cfg.CancelGrace, err)
		}
	}
	if t.cfg.Executor {
		// The executor makes the attempt's folder (MakeAttemptDir) in the
		// attempt's goroutine, and opens its runner.log itself: making the
		// folders here put two inodes, on this VM's file system the
		// largest part of a launch, on the dispatcher's serial path.
		return t.launchInExecutor(inv, l.RunToken, l.Assignment)
	}
	if err := MakeAttemptDir(dir, t.cfg.RunAs); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "runner.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(t.cfg.Exe, inv.Args()...)
	cmd.Env = runnerEnv(os.Environ(), l.RunToken)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start runner: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap it while we live; init does after
	return nil
}

// CarriesAssignment implements compute.AssignmentCarrier: the local
// executor takes the assignment with the attempt (a `ferry runner`
// process fetches it).
func (t *Target) CarriesAssignment() bool { return t.cfg.Executor }

// finalReportName is runner.FinalReportName; the target does not import
// the runner for one name.
const finalReportName = "final-report.json"

// FinalReport implements compute.FinalReports: the report a runner that
// gave up kept in its attempt's folder.
func (t *Target) FinalReport(job string, attempt int) ([]byte, bool) {
	if job == "" || job == "." || job == ".." || strings.ContainsAny(job, `/\`) {
		return nil, false
	}
	f, err := os.Open(filepath.Join(t.cfg.RunsDir, job, strconv.Itoa(attempt), finalReportName))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20)) // a report is small; bound what is read
	return data, err == nil
}

// runsDirMode is the mode of the directories on the way to an attempt's:
// private to the runner's user, or passable (not listable) by the account
// jobs run as when that is another.
func runsDirMode(runAs string) os.FileMode {
	if runAs != "" {
		return 0o711
	}
	return 0o700
}

// runnerEnv is a runner's environment: the server's, as a job on the
// server's own machine expects it (withoutFerryVars), with the attempt's
// run token.
func runnerEnv(server []string, runToken string) []string {
	return append(withoutFerryVars(server), "FERRY_RUN_TOKEN="+runToken)
}

// withoutFerryVars is the server's environment less its FERRY_ variables
// (a FERRY_TOKEN of the server's shell, say): what runners, and the
// executor that runs attempts for them, start with. The timer slack of
// user code (timerslack.UserVar) is kept: they start the jobs with it.
func withoutFerryVars(server []string) []string {
	env := make([]string, 0, len(server)+1)
	for _, kv := range server {
		if !strings.HasPrefix(kv, "FERRY_") || strings.HasPrefix(kv, timerslack.UserVar+"=") {
			env = append(env, kv)
		}
	}
	return env
}
