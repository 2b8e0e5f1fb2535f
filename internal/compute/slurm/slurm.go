// Package slurm is the `slurm` compute target: an existing Slurm cluster
// runs each job attempt as one batch job (docs/architecture.md, "How a job runs"). Ferry does
// not place anything itself; sbatch hands the attempt to Slurm's queue, and
// the batch script starts the ordinary `ferry runner`, once per node
// through srun, so logs, outputs, metrics and environments go through the
// runner as on every other target.
//
// Submission happens on the server's own host (it runs on a login node) or
// over SSH on a login node (address, host_key and ssh_settings of the
// compute, as for an attached machine). Either way every Slurm command is
// one shell command line on that host, so the two differ only in how that
// line is run (host.go).
//
// How the runner binary reaches the compute nodes: on the server's host it
// is the server's own executable, at the same path on every node (the site
// installs Ferry on a shared path, or the server's host is a node of the
// cluster). Over SSH the server copies its binary once into
// work_dir/bin/ferry-<first 16 hex of its SHA-256>, which every node sees
// because work_dir is shared; a new server version gets a new file, and a
// running job keeps the one it started with.
//
// Attempts handed over together (LaunchBatch, array.go) that ask Slurm for
// the same resources are the tasks of one array job instead, one sbatch
// for all of them; each task runs its attempt as that attempt's own batch
// job would, and its handle is ARRAYID_TASK.
//
// The run token never appears in a script or on a command line: the
// submit command reads it from its stdin into its environment, and sbatch
// exports that environment to the job (Slurm keeps it with the job, like
// any exported variable, readable by the job's user and Slurm's admins).
// An array's tasks' tokens travel alike, one a line, as FERRY_RUN_TOKEN_<task>,
// and each task keeps its own before its runner starts.
package slurm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Config sets up a Slurm target.
type Config struct {
	// Compute is the validated slurm compute, with its secrets (the SSH
	// key or password) already opened.
	Compute *spec.Compute
	// Exe is the ferry binary runners start from: used in place when
	// submitting on this host, copied to the login node over SSH.
	Exe string
	// Runner, when set, is run instead of Exe with the runner's command
	// line appended (tests give a script that records what it got). On
	// the login node it is used as given.
	Runner []string
	// Env is added to the environment of every Slurm command (such as
	// SLURM_CONF=... for a cluster whose configuration is not in
	// /etc/slurm). Not for secrets: over SSH it is part of the command.
	Env []string
	// Capacity is how many attempts Ferry keeps handed to Slurm at once,
	// pending or running there; 0 means DefaultCapacity.
	Capacity int
	// CancelGrace is passed to runners: SIGTERM to SIGKILL. 0 = the runner's default.
	CancelGrace time.Duration
	// DialTimeout bounds an SSH login; 0 means sshx's default.
	DialTimeout time.Duration
	Log         *slog.Logger
}

// DefaultCapacity is how many attempts a Slurm target hands to Slurm at
// once unless told otherwise: well below Slurm's default MaxJobCount
// (10,000), so Ferry's queue, with its priorities, holds the rest.
const DefaultCapacity = 1000

// Target is the Slurm compute target.
type Target struct {
	cfg  Config
	c    *spec.Compute
	host host
	log  *slog.Logger

	arrayMu  sync.Mutex
	maxArray int // Slurm's MaxArraySize, once read; 0 until then
}

var (
	_ compute.Target        = (*Target)(nil)
	_ compute.Canceller     = (*Target)(nil)
	_ compute.Checker       = (*Target)(nil)
	_ compute.Inspector     = (*Target)(nil)
	_ compute.SelfQueueing  = (*Target)(nil)
	_ compute.FinalReports  = (*Target)(nil)
	_ compute.BatchLauncher = (*Target)(nil)
	_ compute.Finder        = (*Target)(nil)
)

// New returns a Slurm target. It starts nothing and connects to nothing;
// Check does, and the first Slurm command logs in to a login node.
func New(cfg Config) (*Target, error) {
	c := cfg.Compute
	if c == nil || c.Type != "slurm" {
		return nil, errors.New("slurm: the compute must be of type slurm")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if cfg.Exe == "" && len(cfg.Runner) == 0 {
		return nil, errors.New("slurm: Config.Exe (the ferry binary) is required")
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	log := cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	t := &Target{cfg: cfg, c: c, log: log}
	if c.Address == "" {
		t.host = &localHost{env: cfg.Env}
	} else {
		t.host = newSSHHost(c, cfg.Env, cfg.DialTimeout, log)
	}
	return t, nil
}

// Close ends the target's SSH connection, if it has one.
func (t *Target) Close() error { return t.host.close() }

// Type implements compute.Target.
func (t *Target) Type() string { return "slurm" }

// Capacity implements compute.Target.
func (t *Target) Capacity() int { return t.cfg.Capacity }

// QueuesItself implements compute.SelfQueueing: Slurm has its own queue.
func (t *Target) QueuesItself() bool { return true }

// Admit implements compute.Target: everything the batch script can ask
// Slurm for, with the runner's own environments; not containers (Slurm
// nodes are not assumed to run Docker), sizes or services.
func (t *Target) Admit(j *spec.Job, env *environment.Spec) error {
	refuse := func(field, why string) error {
		return fmt.Errorf("%s: %s (%w)", field, why, compute.ErrNotSupported)
	}
	if r := j.Resources; r != nil {
		if r.InstanceType != "" {
			return refuse("resources.instance_type", fmt.Sprintf("a Slurm compute has no sizes: its partition (%s) decides the machines; leave it out, and ask for GPUs with resources.properties.gpus", t.c.Partition))
		}
		if r.DockerArgs != "" || r.ShmSize != "" {
			return refuse("resources", "docker_args and shm_size apply to image environments, which a Slurm compute does not run")
		}
	}
	if env != nil && env.NeedsDocker() {
		return refuse("environment", "a Slurm compute runs python, conda_file and user_managed environments, not images (its nodes are not assumed to run Docker)")
	}
	if len(j.Services) > 0 {
		return refuse("services", "interactive services need a compute instance or cluster")
	}
	if q := j.QueueSettings; q != nil {
		if q.JobTier != "" && t.c.JobTierQOS[q.JobTier] == "" {
			return refuse("queue_settings.job_tier", fmt.Sprintf("compute %s maps no QOS to job tier %s; leave it out, or add it to the compute's job_tier_qos", t.c.Name, q.JobTier))
		}
		if _, ok := t.c.PriorityNice[q.Priority]; q.Priority != "" && !ok {
			return refuse("queue_settings.priority", fmt.Sprintf("compute %s maps no nice value to priority %s; leave it out, or add it to the compute's priority_nice", t.c.Name, q.Priority))
		}
	}
	return nil
}

// Launch implements compute.Target: one sbatch of the attempt's batch
// script, written under work_dir/runs/JOB/ATTEMPT. The handle is Slurm's
// job id.
func (t *Target) Launch(ctx context.Context, l compute.Launch) (compute.Handle, error) {
	if err := checkLaunch(l); err != nil {
		return "", err
	}
	runner, err := t.runnerCommand(ctx)
	if err != nil {
		return "", err
	}
	a := attempt{launch: l, dir: t.attemptDir(l.Job, l.Attempt)}
	b := t.batch(runner, path.Join(a.dir, "job.sh"), a)
	script, err := b.script()
	if err != nil {
		return "", err
	}
	// umask 077: the attempt's folder and script are the job user's
	// alone. The token is the first line of stdin, the script the rest;
	// read takes exactly one line from a pipe, so cat gets the script.
	cmd := "umask 077 && mkdir -p " + shellQuote(a.dir) +
		" && IFS= read -r FERRY_RUN_TOKEN && export FERRY_RUN_TOKEN && cat > " + shellQuote(b.path) +
		" && id=$(sbatch --parsable " + shellQuote(b.path) + ") && " + recordHandles(a.dir)
	id, err := t.sbatch(ctx, cmd, []byte(l.RunToken+"\n"+script))
	if err != nil {
		return "", fmt.Errorf("slurm: sbatch of %s attempt %d: %w", l.Job, l.Attempt, err)
	}
	t.log.Debug("slurm job submitted", "job", l.Job, "attempt", l.Attempt, "slurm_job", id)
	return compute.Handle(id), nil
}

// checkLaunch refuses a launch that cannot be written into a script or
// a submit command.
func checkLaunch(l compute.Launch) error {
	if l.Spec == nil {
		return errors.New("slurm: the launch carries no job spec")
	}
	if !jobNameRe().MatchString(l.Job) {
		return fmt.Errorf("slurm: job name %q cannot name a Slurm job", l.Job)
	}
	if strings.ContainsAny(l.RunToken, "\n\r\x00") {
		// It travels as a line of stdin; never print it.
		return fmt.Errorf("slurm: the run token of %s attempt %d holds a line break", l.Job, l.Attempt)
	}
	return nil
}

// batch is the sbatch of attempts, its script written at scriptPath.
func (t *Target) batch(runner []string, scriptPath string, as ...attempt) batch {
	return batch{compute: t.c, attempts: as, path: scriptPath, runner: runner,
		cache: path.Join(t.c.WorkDir, "cache"), envCache: path.Join(t.c.WorkDir, "envs"), cancelGrace: t.cfg.CancelGrace}
}

// sbatch runs a submit command that ends in sbatch --parsable and
// returns the job id it printed.
func (t *Target) sbatch(ctx context.Context, cmd string, stdin []byte) (string, error) {
	out, err := t.host.run(ctx, cmd, stdin)
	if err != nil {
		return "", err
	}
	// --parsable prints "id" or "id;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if !jobIDRe().MatchString(id) {
		return "", fmt.Errorf("sbatch printed %q, not a job id", shorten(string(out)))
	}
	return id, nil
}

// attemptDir is where an attempt's script, Slurm output and runner
// folders live.
func (t *Target) attemptDir(job string, attempt int) string {
	return path.Join(t.c.WorkDir, "runs", job, strconv.Itoa(attempt))
}

// runnerCommand is the program and leading arguments that start a runner
// on a compute node.
func (t *Target) runnerCommand(ctx context.Context) ([]string, error) {
	if len(t.cfg.Runner) > 0 {
		return t.cfg.Runner, nil
	}
	exe, err := t.host.binary(ctx, t.cfg.Exe, path.Join(t.c.WorkDir, "bin"))
	if err != nil {
		return nil, err
	}
	return []string{exe}, nil
}

var (
	// jobNameRe is spec's job name rule; it keeps the name safe in a
	// path and an #SBATCH line.
	jobNameRe = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$`)
	// jobIDRe is a Slurm job id, as sbatch prints it.
	jobIDRe = lazyRegexp(`^[0-9]{1,12}$`)
	// handleRe is a handle as Ferry makes them: a job id, or an array
	// job's id and a task's index (1234_0), which Slurm's commands take
	// alike; no heterogeneous jobs. It keeps a handle safe on a command
	// line.
	handleRe = lazyRegexp(`^[0-9]{1,12}(_[0-9]{1,7})?$`)
	// envNameRe is spec's variable name rule, checked again before a
	// name is written into a script.
	envNameRe = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Cancel implements compute.Canceller with scancel, which also ends a job
// still pending; scancel 1234_0 ends that task of an array alone. A task
// still pending in its array's record would vanish from Slurm when
// cancelled, as if it had never been: held first, it is split off into a
// record of its own, which then stays CANCELLED for MinJobAge like any
// job's (a hold of a task already running changes nothing). A job Slurm
// has ended or forgotten is not an error.
func (t *Target) Cancel(ctx context.Context, h compute.Handle) error {
	id := string(h)
	if !handleRe().MatchString(id) {
		return fmt.Errorf("slurm: %q is not a Slurm job id", h)
	}
	cmd := "scancel " + id
	if strings.Contains(id, "_") {
		cmd = "scontrol hold " + id + " >/dev/null 2>&1; " + cmd
	}
	_, err := t.host.run(ctx, cmd, nil)
	if err != nil && !alreadyGone(err) {
		return fmt.Errorf("slurm: scancel %s: %w", h, err)
	}
	return nil
}

// alreadyGone says whether a Slurm command failed only because the job
// has ended or is unknown.
func alreadyGone(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Invalid job id") || strings.Contains(msg, "already completing or completed")
}

func shorten(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// finalReportName is runner.FinalReportName; the target does not import
// the runner for one name.
const finalReportName = "final-report.json"

// FinalReport implements compute.FinalReports when submitting on this
// host, where work_dir is the server's to read: the report that the
// runner of node 0 (the only one of a one-node job) kept in its folder
// when it gave up on a silent server. Over SSH it has none to offer.
func (t *Target) FinalReport(job string, attempt int) ([]byte, bool) {
	if _, local := t.host.(*localHost); !local || !jobNameRe().MatchString(job) {
		return nil, false
	}
	f, err := os.Open(path.Join(t.attemptDir(job, attempt), "node-0", finalReportName))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20)) // a report is small; bound what is read
	return data, err == nil
}
