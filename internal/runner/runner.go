// Package runner runs one attempt of a job on the machine it is on: it
// materialises the snapshot and inputs, runs the command in its own process
// group (one group per process of a distributed job: distributed.go),
// ships the combined stdout/stderr to the workspace as it is written,
// uploads the outputs and reports the end (docs/architecture.md, "How a job runs").
//
// The runner is built to outlive its server: the job writes its output
// straight into a spool file, and the runner ships that file from the
// offset the server last acknowledged, so a server that is killed and
// restarted loses no byte and gets none twice. Every report is retried until
// the server answers.
package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferry-ml/ferry/internal/beneath"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/environment/docker"
	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Config is what one runner needs.
type Config struct {
	Client   *client.Client // authenticated with the run token
	Job      string
	Attempt  int
	Dir      string // this attempt's own directory; made if missing
	CacheDir string // the node's blob cache, shared by runners on the node
	// EnvCacheDir holds the node's built environments, shared by its
	// runners; EnvCacheMax bounds it in bytes (0 = no bound).
	EnvCacheDir string
	EnvCacheMax int64
	APIURL      string // given to the job as FERRY_API_URL
	// APIFile is the file the server records its URL in on this host
	// (invocation.APIFile; "" = none): the job's calls, passed on by the
	// metrics endpoint, follow it as the client does.
	APIFile  string
	RunToken string // given to the job as FERRY_RUN_TOKEN; secret
	// RunAs is the account the job's processes run as; nil = the runner's
	// own. The runner stays itself (it keeps the run token's report
	// channel, the caches and the spool) and gives the account the job's
	// directories.
	RunAs *isolation.User
	// JobUIDs, when not nil, makes the attempt run as a uid of its own
	// from the range, held for its life (isolation.Acquire), in place of
	// RunAs's; RunAs gives it its name.
	JobUIDs *isolation.UIDRange
	// CancelGrace is how long a canceled job has between SIGTERM and SIGKILL.
	CancelGrace time.Duration
	// HeartbeatEvery is how often the runner renews its lease.
	HeartbeatEvery time.Duration
	// Cancel, when closed, stops the job as if the server had canceled it
	// (the runner closes it on SIGTERM); the runner then ends once the
	// job has had CancelGrace and the runner a few seconds to report
	// (lifetime.go).
	Cancel <-chan struct{}
	// GiveUpAfter is how long the server may be silent before the runner
	// stops the job, keeps its final report on disk and ends
	// (lifetime.go); 0 means DefaultGiveUpAfter.
	GiveUpAfter time.Duration
	// Direct, when set, starts the job's host processes without a shim,
	// for a runner inside the local executor (direct.go).
	Direct *Direct
	// Assignment, when set, is the attempt's assignment as the server
	// handed it over with the launch (the local executor): it is not
	// fetched.
	Assignment *apitypes.Assignment
	// HoldRunning is how long the Running report waits, for a server that
	// takes it with the final report (Assignment.FinalRunning): a command
	// that ends by then has its Running step carried by the final report,
	// one call and one commit fewer for a small job (bench/dispatch).
	// 0 means DefaultHoldRunning; negative, no wait.
	HoldRunning time.Duration
	Log         *slog.Logger
}

// DefaultHoldRunning is Config.HoldRunning's default: short beside what
// anyone watching a job could tell apart, long beside a small job's
// command.
const DefaultHoldRunning = 10 * time.Millisecond

// File names inside an attempt's directory.
const (
	WorkDirName = "wd"      // the job's working directory
	LogName     = "std.log" // the job's combined stdout and stderr
	// HomeName is the HOME of a job that runs as another account whose
	// home directory does not exist.
	HomeName = "home"
)

type runner struct {
	cfg   Config
	c     *client.Client
	log   *slog.Logger
	cache *blob.Store
	wd    string
	spool string
	// after is time.After unless a test says otherwise: ship's waits.
	after func(time.Duration) <-chan time.Time

	jobAPI    string         // the job's FERRY_API_URL: the metrics endpoint (metrics.go)
	docker    *docker.Engine // the node's engine, for image environments
	canceled  atomic.Bool    // the server or the node asked the job to stop
	preempted atomic.Bool    // the server asked because the node is preempted (resume.go)

	mlRun      *mlflowRun // the job's run for MLflow's API (mlflow.go); nil = none
	mlflowShim string     // the folder holding the mlflow stand-in; "" = none

	warm <-chan *warmShim // started early, for the first host process (process.go); nil once taken

	reports chan apitypes.Report // sent in order by one goroutine
	sent    chan struct{}        // closed when reports are all sent
	lastErr error                // of the last report sent, once sent is closed

	foldRunning bool      // the server takes the Running step with the final report
	heldRunning time.Time // when the command started, while its Running report is held; zero once sent

	// replicaSecret is the assignment's ReplicaSecret (a replica of an
	// online deployment): the job gets it as inferenceserver.SecretEnv
	// and nothing else sees it.
	replicaSecret string
}

// Run runs the attempt to its end and reports it. It returns an error only
// when it could not tell the server how the attempt ended; the report is
// then in FinalReportName in the attempt's folder.
func Run(ctx context.Context, cfg Config) error {
	if cfg.CancelGrace == 0 {
		cfg.CancelGrace = 10 * time.Second
	}
	if cfg.HeartbeatEvery == 0 {
		cfg.HeartbeatEvery = 2 * time.Second
	}
	if cfg.GiveUpAfter <= 0 {
		cfg.GiveUpAfter = DefaultGiveUpAfter
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &runner{cfg: cfg, c: cfg.Client, log: cfg.Log.With("job", cfg.Job, "attempt", cfg.Attempt),
		wd: filepath.Join(cfg.Dir, WorkDirName), spool: filepath.Join(cfg.Dir, LogName),
		reports: make(chan apitypes.Report, 8), sent: make(chan struct{})}
	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	h := &heardClock{}
	h.heard()
	// Until the server first answers, each call that does not reach it is
	// logged (the pod's or process's log is then all there is to go by:
	// an advertised URL that leads nowhere shows there at once).
	var reached atomic.Bool
	cfg.Client.Heard = func() { reached.Store(true); h.heard() }
	cfg.Client.Unreached = func(err error) {
		if !reached.Load() {
			r.log.Warn("the server has not been reached yet; the runner keeps trying", "url", cfg.Client.BaseURL(), "err", err)
		}
	}
	go r.lifetime(ctx, end, h)
	go r.sendReports(ctx)

	var final apitypes.Report
	if release, err := r.leaseUID(); err != nil {
		final = failed("no uid could be held for the attempt", err)
	} else {
		final = gaveUp(r.run(ctx), context.Cause(ctx))
		release()
	}
	r.reports <- final
	close(r.reports)
	<-r.sent // sendReports ends when ctx does
	if r.lastErr == nil {
		return nil
	}
	err := fmt.Errorf("final status %s not delivered: %w", final.Status, r.lastErr)
	if kerr := r.keepFinalReport(final); kerr != nil {
		return errors.Join(err, fmt.Errorf("keeping the final report in %s: %w", FinalReportName, kerr))
	}
	return fmt.Errorf("%w; it is kept in %s", err, filepath.Join(r.cfg.Dir, FinalReportName))
}

// sendReports delivers reports in order, each retried until the server
// takes it or refuses it.
func (r *runner) sendReports(ctx context.Context) {
	defer close(r.sent)
	for rep := range r.reports {
		err := client.Retry(ctx, 5*time.Second, func() error {
			return r.c.ReportStatus(ctx, r.cfg.Job, r.cfg.Attempt, rep)
		})
		if s := client.StatusOf(err); s >= 400 && s < 500 {
			// Refused, not undelivered: keeping it would not change that.
			r.log.Error("report refused", "status", rep.Status, "err", err)
			err = nil
		} else if err != nil {
			r.log.Error("report not delivered", "status", rep.Status, "err", err)
		}
		r.lastErr = err
	}
}

func failed(reason string, err error) apitypes.Report {
	return apitypes.Report{Status: apitypes.StatusFailed, Reason: reason, Error: err.Error()}
}

// leaseUID makes the attempt run as a uid of its own when the runner is
// told to (Config.JobUIDs), and returns what gives it back once the
// attempt has ended: its processes killed, its folder closed to all but
// the runner (isolation.Lease.Release).
func (r *runner) leaseUID() (release func(), err error) {
	if r.cfg.JobUIDs == nil || r.cfg.RunAs == nil {
		return func() {}, nil
	}
	lease, err := isolation.Acquire(*r.cfg.JobUIDs, r.cfg.Dir)
	if err != nil {
		return nil, err
	}
	r.cfg.RunAs = lease.User(r.cfg.RunAs.Name)
	r.log.Debug("the attempt runs as a uid of its own", "uid", lease.UID)
	return func() {
		if err := lease.Release(r.cfg.Dir); err != nil {
			r.log.Warn("giving the attempt's uid back", "uid", lease.UID, "err", err)
		}
	}, nil
}

// run does the attempt and returns its final report.
func (r *runner) run(ctx context.Context) apitypes.Report {
	// The shim starts now, beside the assignment's fetch and the job's
	// preparation, not before them; one that cannot be started is started
	// cold later.
	warm := make(chan *warmShim, 1)
	if r.cfg.Direct != nil {
		warm <- nil // the executor starts the job itself
	} else {
		go func() {
			w, err := startWarmShim()
			if err != nil {
				w = nil
			}
			warm <- w
		}()
	}
	r.warm = warm
	defer func() {
		if r.warm != nil { // not taken by startHost
			if w := <-r.warm; w != nil {
				w.close()
			}
		}
	}()
	// The assignment is fetched while the attempt's directories and log
	// spool are made, which do not need it: the round trip was a tenth of
	// a small job's time from Preparing to Running (bench/dispatch). A
	// failed fetch is still reported first, as when it came first.
	type fetched struct {
		a   *apitypes.Assignment
		err error
	}
	assigned := make(chan fetched, 1)
	if r.cfg.Assignment != nil {
		assigned <- fetched{a: r.cfg.Assignment}
	} else {
		go func() {
			var f fetched
			f.err = client.Retry(ctx, 5*time.Second, func() error {
				var err error
				f.a, err = r.c.Assignment(ctx, r.cfg.Job, r.cfg.Attempt)
				return err
			})
			assigned <- f
		}()
	}
	spool, setup := r.setUp()
	if spool != nil {
		defer spool.Close()
	}
	// The job's metrics endpoint does not need the assignment either.
	var finishMetrics func(context.Context) error
	if setup == nil {
		finishMetrics = r.startMetrics(ctx)
	}
	f := <-assigned
	if f.err != nil || setup != nil {
		if finishMetrics != nil {
			// Stopped at once: the job never ran, so it logged nothing.
			stopped, stop := context.WithCancel(ctx)
			stop()
			_ = finishMetrics(stopped)
		}
		if f.err != nil {
			return failed("runner could not get its assignment", f.err)
		}
		return *setup
	}
	a := f.a
	r.foldRunning = a.FinalRunning

	// The log ships from the start, so an environment build shows while
	// the job is Preparing; the lease is renewed from the start, so a
	// cancel stops a build too.
	shipCtx, stopShipping := context.WithCancel(context.WithoutCancel(ctx))
	shipped := make(chan error, 1)
	go func() { shipped <- r.ship(ctx, shipCtx) }()
	jobCtx, cancelJob := context.WithCancel(ctx)
	defer cancelJob()
	go r.watch(jobCtx, cancelJob)

	res, p := r.prepareAndExecute(ctx, jobCtx, a, spool)
	// The job has ended: the final report waits until what it logged is
	// delivered, so its metrics are all there when it shows as ended.
	defer func() {
		if err := finishMetrics(ctx); err != nil {
			r.log.Error("metrics not all delivered; they stay in the attempt's folder", "file", MetricsQueueName, "err", err)
		}
	}()

	var outErr error
	var out *apitypes.Outputs // for the final report, to a server that takes them there
	var finalizing string     // the Finalizing step, when the final report carries it
	if p != nil {
		const why = "uploading outputs"
		if a.FinalOutputs && r.nothingToUpload(p) {
			// Running, Finalizing and the end would be three reports
			// in a row: the final report carries the step instead, and
			// the server records both (bench/dispatch).
			finalizing = why
		} else {
			r.sendHeldRunning() // Running comes before Finalizing
			r.reports <- apitypes.Report{Status: apitypes.StatusFinalizing, Reason: why}
		}
		var o apitypes.Outputs
		o, outErr = r.uploadOutputs(ctx, a, p, spool)
		if a.FinalOutputs {
			out = &o
		}
	}
	final := func(rep apitypes.Report) apitypes.Report {
		rep.Outputs, rep.Finalizing = out, finalizing
		if !r.heldRunning.IsZero() {
			// The command ended before its Running report was sent.
			rep.Running, rep.RunningForUS = runningReport.Reason, time.Since(r.heldRunning).Microseconds()
		}
		return rep
	}
	stopShipping()
	if err := <-shipped; err != nil {
		return final(failed("shipping the log failed", err))
	}
	if r.preempted.Load() {
		return final(preemptedReport(res, outErr))
	}
	if outErr != nil && res.Status == apitypes.StatusCompleted {
		return final(failed("uploading outputs failed", outErr))
	}
	return final(res)
}

// nothingToUpload says whether an attempt has no outputs to upload: no
// named outputs (each is uploaded, even empty) and nothing in ./outputs.
func (r *runner) nothingToUpload(p *paths) bool {
	return len(p.outDirs) == 0 && r.emptyFolder(filepath.Join(WorkDirName, "outputs"))
}

// emptyFolder says whether the folder rel beneath the attempt's folder
// is there and empty; it follows no symlink on the way (internal/beneath).
func (r *runner) emptyFolder(rel string) bool {
	d, err := beneath.OpenUnder(r.cfg.Dir, rel)
	if err != nil {
		return false // the upload says what is wrong
	}
	defer d.Close()
	empty, err := d.IsEmpty()
	return err == nil && empty
}

// setUp makes the attempt's directories, opens the node's blob cache and
// the log spool, and gives the job's account the attempt's directory. On
// failure it returns the final report that says so, and the spool when it
// was opened.
func (r *runner) setUp() (*os.File, *apitypes.Report) {
	fail := func(reason string, err error) (*os.File, *apitypes.Report) {
		rep := failed(reason, err)
		return nil, &rep
	}
	for _, d := range []string{r.cfg.Dir, r.wd, r.cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail("preparing the working directory failed", err)
		}
	}
	var err error
	if r.cache, err = blob.Open(r.cfg.CacheDir); err != nil {
		return fail("opening the node's blob cache failed", err)
	}
	spool, err := os.OpenFile(r.spool, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail("opening the log spool failed", err)
	}
	if err := r.shareAttemptDir(); err != nil {
		rep := failed("preparing the working directory failed", err)
		return spool, &rep
	}
	return spool, nil
}

// watch renews the attempt's lease until jobCtx ends, and cancels the job
// when the server asks for it or the runner is told to stop.
func (r *runner) watch(jobCtx context.Context, cancelJob context.CancelFunc) {
	beat := time.NewTicker(r.cfg.HeartbeatEvery)
	defer beat.Stop()
	for {
		select {
		case <-jobCtx.Done():
			return
		case <-r.cfg.Cancel:
			r.canceled.Store(true)
			cancelJob()
			return
		case <-beat.C:
			hb, err := r.c.Heartbeat(jobCtx, r.cfg.Job, r.cfg.Attempt)
			if err != nil {
				r.log.Warn("heartbeat", "err", err)
				continue
			}
			if hb.Cancel || hb.Preempt {
				r.preempted.Store(hb.Preempt && !hb.Cancel)
				r.canceled.Store(true)
				cancelJob()
				return
			}
		}
	}
}

// prepareAndExecute materialises the job, makes its environment and runs
// it. It returns the job's paths once they exist, so outputs are uploaded
// even when the command failed.
func (r *runner) prepareAndExecute(ctx, jobCtx context.Context, a *apitypes.Assignment, spool *os.File) (apitypes.Report, *paths) {
	if e := a.Environment; e != nil && inEnvironmentImage(e, os.Getenv(invocation.EnvImageIsEnvironment)) {
		// The runner already runs in the environment's image (a
		// Kubernetes pod of it): the job runs right here, as in a
		// user_managed environment.
		cp := *a
		cp.Environment = &environment.Spec{Kind: environment.KindUserManaged, Name: e.Name, Version: e.Version}
		a = &cp
	}
	r.replicaSecret = a.ReplicaSecret
	p, err := r.prepare(ctx, jobCtx, a, spool)
	if err != nil {
		if r.canceled.Load() {
			return apitypes.Report{Status: apitypes.StatusCanceled, Reason: "canceled on request while the inputs were fetched"}, nil
		}
		fmt.Fprintf(spool, "ferry: preparing the job failed: %v\n", err)
		return failed("preparing the job failed", err), nil
	}
	rt, err := r.prepareEnvironment(jobCtx, a.Environment, spool)
	if err != nil {
		if r.canceled.Load() {
			return apitypes.Report{Status: apitypes.StatusCanceled, Reason: "canceled on request while the environment was prepared"}, p
		}
		// Said once, whether or not err's own text begins with it.
		msg := strings.TrimPrefix(err.Error(), environment.ErrBuild.Error()+": ")
		fmt.Fprintf(spool, "ferry: environment build failed: %s\n", msg)
		return failed("environment build failed", err), p
	}
	defer rt.Release()
	return r.execute(jobCtx, a.Spec, p, rt, spool), p
}

// inEnvironmentImage says whether a runner whose target set
// invocation.EnvImageIsEnvironment to v runs in e's image already: v is
// the image of an image environment, or the tag of one built for it
// (environment.ImageTag of its hash; a Kubernetes compute's registry).
func inEnvironmentImage(e *environment.Spec, v string) bool {
	switch {
	case v == "" || !e.NeedsDocker():
		return false
	case e.Kind == environment.KindImage && e.CondaFile == "" && e.Image == v:
		return true
	}
	return v == environment.ImageTag(e.Hash())
}

// prepareEnvironment makes or reuses the job's environment on this node.
func (r *runner) prepareEnvironment(ctx context.Context, s *environment.Spec, spool *os.File) (*environment.Runtime, error) {
	if s == nil {
		s = &environment.Spec{Kind: environment.KindUserManaged}
	}
	c := &environment.Cache{Dir: r.cfg.EnvCacheDir, MaxBytes: r.cfg.EnvCacheMax}
	if s.NeedsDocker() {
		d, err := docker.Connect(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: this node cannot run image environments: %v", environment.ErrBuild, err)
		}
		r.docker = d
		c.Images = d
	}
	return c.Prepare(ctx, s, func(dest string) error { return r.extract(ctx, s.Context, dest) }, spool)
}

// paths are where a job's inputs and outputs are on this machine.
type paths struct {
	inputs  map[string]string // input name -> path given to the command
	outputs map[string]string // output name -> path given to the command
	outDirs map[string]string // output name -> directory uploaded after the run
}

// inputFileName is the name of a uri_file input's file in dir: the base
// of its local path, or, for a registered data asset (azureml:NAME:VERSION),
// whose path says nothing of its file, the one file its snapshot holds.
func inputFileName(dir, path string) (string, error) {
	if !spec.IsDataRef(path) {
		return filepath.Base(path), nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	if len(entries) != 1 || entries[0].IsDir() {
		return "", fmt.Errorf("%s is a uri_file data asset but holds %d entries, not one file", path, len(entries))
	}
	return entries[0].Name(), nil
}

// prepare materialises the code snapshot and the inputs, and makes the
// output directories.
// Remote inputs are fetched under jobCtx, so a cancel stops a long
// download as it stops an environment build.
func (r *runner) prepare(ctx, jobCtx context.Context, a *apitypes.Assignment, logw io.Writer) (*paths, error) {
	if a.CodeSnapshot != "" {
		if err := r.extract(ctx, a.CodeSnapshot, r.wd); err != nil {
			return nil, fmt.Errorf("code snapshot: %w", err)
		}
	}
	p := &paths{inputs: map[string]string{}, outputs: map[string]string{}, outDirs: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(a.Spec.Inputs)) {
		in := a.Spec.Inputs[name]
		if in.IsLiteral() {
			p.inputs[name] = *in.Value
			continue
		}
		dir := filepath.Join(r.cfg.Dir, "inputs", name)
		if ri, ok := a.RemoteInputs[name]; ok {
			inContainer := a.Environment != nil && a.Environment.NeedsDocker()
			v, err := r.remoteInput(jobCtx, name, in, ri, dir, inContainer, logw)
			if err != nil {
				return nil, fmt.Errorf("input %s: %w", name, err)
			}
			p.inputs[name] = v
			continue
		}
		if err := r.extract(ctx, a.InputSnapshots[name], dir); err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
		p.inputs[name] = dir
		if in.Type == "uri_file" {
			file, err := inputFileName(dir, in.Path)
			if err != nil {
				return nil, fmt.Errorf("input %s: %w", name, err)
			}
			p.inputs[name] = filepath.Join(dir, file)
		}
	}
	for name, out := range a.Spec.Outputs {
		dir := filepath.Join(r.cfg.Dir, "named-outputs", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		p.outDirs[name] = dir
		p.outputs[name] = dir
		if out.Type == "uri_file" {
			base := name
			if out.Path != "" {
				base = filepath.Base(out.Path)
			}
			p.outputs[name] = filepath.Join(dir, base)
		}
	}
	if err := os.MkdirAll(filepath.Join(r.wd, "outputs"), 0o755); err != nil {
		return nil, err
	}
	if err := r.restoreOutputs(ctx, a, filepath.Join(r.wd, "outputs")); err != nil {
		return nil, err
	}
	if err := r.giveToJob(); err != nil {
		return nil, err
	}
	return p, nil
}

// extract writes a snapshot into dest, fetching only the blobs the node's
// cache lacks.
func (r *runner) extract(ctx context.Context, id, dest string) error {
	m, err := r.fetchManifest(ctx, id)
	if err != nil {
		return err
	}
	return snapshot.Extract(m, dest, func(d string) (io.ReadCloser, error) {
		if !r.cache.Has(d) {
			body, err := r.c.GetBlob(ctx, d)
			if err != nil {
				return nil, err
			}
			_, _, err = r.cache.Put(body, d)
			body.Close()
			if err != nil {
				return nil, err
			}
		}
		return r.cache.Open(d)
	})
}

func (r *runner) fetchManifest(ctx context.Context, id string) (*snapshot.Manifest, error) {
	var m *snapshot.Manifest
	err := client.Retry(ctx, 5*time.Second, func() error {
		var err error
		m, err = r.c.GetSnapshot(ctx, id)
		return err
	})
	return m, err
}

var exprRef = regexp.MustCompile(`\$\{\{\s*(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// Command returns the job's command with ${{inputs.x}} and ${{outputs.y}}
// replaced by their values and paths.
func Command(cmd string, inputs, outputs map[string]string) string {
	return exprRef.ReplaceAllStringFunc(cmd, func(m string) string {
		sub := exprRef.FindStringSubmatch(m)
		if sub[1] == "inputs" {
			return inputs[sub[2]]
		}
		return outputs[sub[2]]
	})
}

// shell is bash where there is one, as on Azure ML, else sh.
func shell() string {
	if p, err := exec.LookPath("bash"); err == nil {
		return p
	}
	return "/bin/sh"
}

// env is the job's environment on the host: the runner's own (less its
// FERRY_ secrets), the account's HOME, USER and LOGNAME when it runs as
// another, and the job's variables.
func (r *runner) env(j *spec.Job) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") {
			env = append(env, kv)
		}
	}
	if u := r.cfg.RunAs; u != nil {
		env = withVars(env, []string{"HOME=" + r.jobHome(), "USER=" + u.Name, "LOGNAME=" + u.Name})
	}
	env = append(env, r.jobVars(j)...)
	return withVars(env, r.mlflowVars(j, os.Getenv("PYTHONPATH")))
}

// jobVars are the job's own variables: the spec's and the documented
// FERRY_ ones. A container gets only these.
func (r *runner) jobVars(j *spec.Job) []string {
	var env []string
	if _, ok := j.EnvironmentVariables["PYTHONUNBUFFERED"]; !ok {
		env = append(env, "PYTHONUNBUFFERED=1") // so print() shows up live
	}
	for _, k := range slices.Sorted(maps.Keys(j.EnvironmentVariables)) {
		env = append(env, k+"="+j.EnvironmentVariables[k])
	}
	env = append(env,
		"FERRY_JOB_ID="+r.cfg.Job,
		"FERRY_ATTEMPT="+strconv.Itoa(r.cfg.Attempt),
		"FERRY_OUTPUTS_DIR="+filepath.Join(r.wd, "outputs"),
		"FERRY_API_URL="+cmp.Or(r.jobAPI, r.cfg.APIURL),
		"FERRY_RUN_TOKEN="+r.cfg.RunToken,
	)
	if r.replicaSecret != "" {
		// After the spec's variables: a deployment's
		// environment_variables cannot set another.
		env = append(env, inferenceserver.SecretEnv+"="+r.replicaSecret)
	}
	return env
}

// execute runs the command to its end, honouring cancel and timeout, and
// returns the report that describes how it ended.
func (r *runner) execute(jobCtx context.Context, j *spec.Job, p *paths, rt *environment.Runtime, spool *os.File) apitypes.Report {
	command := Command(j.Command, p.inputs, p.outputs)
	procs, err := r.planJob(j)
	if err != nil {
		fmt.Fprintf(spool, "ferry: the job's processes could not be laid out: %v\n", err)
		return failed("the distribution does not fit this job", err)
	}
	proc, err := r.start(jobCtx, j, rt, command, procs, spool)
	if err != nil {
		fmt.Fprintf(spool, "ferry: the command could not be started: %v\n", err)
		return failed("the command could not be started", err)
	}
	defer proc.cleanup()
	var hold <-chan time.Time // the Running report is sent when it fires
	if r.foldRunning && r.cfg.HoldRunning >= 0 {
		r.heldRunning = time.Now()
		t := time.NewTimer(cmp.Or(r.cfg.HoldRunning, DefaultHoldRunning))
		defer t.Stop()
		hold = t.C
	} else {
		r.reports <- runningReport
	}

	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := proc.wait()
		done <- result{code, err}
	}()

	var timeout <-chan time.Time
	if j.Limits != nil && j.Limits.Timeout > 0 {
		t := time.NewTimer(time.Duration(j.Limits.Timeout) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	var why string // set when we stop the job ourselves
	var kill <-chan time.Time
	canceled := jobCtx.Done()
	stop := func(reason string) {
		if why != "" {
			return
		}
		why = reason
		proc.stop(false)
		kill = time.After(r.cfg.CancelGrace)
	}
	var res result
loop:
	for {
		select {
		case res = <-done:
			break loop
		case <-hold:
			r.sendHeldRunning()
		case <-timeout:
			stop("timeout")
		case <-canceled:
			canceled = nil
			stop("canceled")
		case <-kill:
			proc.stop(true)
		}
	}
	if res.err != nil {
		return failed("the command's end could not be seen", res.err)
	}
	code := res.code
	switch {
	case why == "canceled":
		return apitypes.Report{Status: apitypes.StatusCanceled, Reason: "canceled on request", ExitCode: &code}
	case why == "timeout":
		msg := fmt.Sprintf("the job ran past limits.timeout of %ds and was stopped", j.Limits.Timeout)
		return apitypes.Report{Status: apitypes.StatusFailed, Reason: "timeout", ExitCode: &code, Error: msg}
	case code == 0:
		return apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &code}
	}
	if fe, ok := proc.(failureExplainer); ok && fe.failure() != nil {
		f := fe.failure()
		return apitypes.Report{Status: apitypes.StatusFailed, Reason: fmt.Sprintf("rank %d exited with code %d", f.Rank, f.Code), ExitCode: &code,
			Error: f.String() + "; the job's log has its output"}
	}
	return apitypes.Report{Status: apitypes.StatusFailed, Reason: fmt.Sprintf("exit code %d", code), ExitCode: &code,
		Error: fmt.Sprintf("the command exited with code %d; the job's log has its output", code)}
}

// runningReport is the report of a started command.
var runningReport = apitypes.Report{Status: apitypes.StatusRunning, Reason: "command started"}

// sendHeldRunning sends the Running report if it is held.
func (r *runner) sendHeldRunning() {
	if !r.heldRunning.IsZero() {
		r.heldRunning = time.Time{}
		r.reports <- runningReport
	}
}

// startInContainer starts the command in a container of image, as rp when
// it is one process of a distributed job.
func (r *runner) startInContainer(ctx context.Context, j *spec.Job, image, command string, rp *rankProcess) (process, error) {
	var shm, dargs string
	if j.Resources != nil {
		shm, dargs = j.Resources.ShmSize, j.Resources.DockerArgs
	}
	opts, err := environment.ParseContainerOptions(shm, dargs)
	if err != nil {
		return nil, err
	}
	env := withVars(r.jobVars(j), r.mlflowVars(j, ""))
	labels := map[string]string{"ferry.job": r.cfg.Job, "ferry.attempt": strconv.Itoa(r.cfg.Attempt)}
	if rp != nil {
		env = withVars(env, rp.Vars)
		labels["ferry.rank"] = strconv.Itoa(rp.Rank)
	}
	_, statErr := os.Stat("/dev/nvidia0")
	user := strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())
	if u := r.cfg.RunAs; u != nil {
		user = fmt.Sprintf("%d:%d", u.UID, u.GID)
	}
	return startContainer(ctx, r.docker.API, containerJob{
		Image: image, Command: command, Dir: r.cfg.Dir, ReadOnly: r.mlflowShimMounts(), WorkDir: r.wd, Spool: r.spool,
		Env: env, Labels: labels, User: user,
		Opts: opts, GPUs: os.Getenv("CUDA_VISIBLE_DEVICES"), HasGPUs: statErr == nil,
	})
}

// ship sends the spool file to the server from the offset it acknowledged,
// until stop is done and everything written has been acknowledged.
func (r *runner) ship(ctx, stop context.Context) error {
	f, err := os.Open(r.spool)
	if err != nil {
		return err
	}
	defer f.Close()
	var acked int64 // an attempt's log starts empty; a 409 tells us otherwise
	// The buffer grows to 4 MiB when the log comes faster than it ships;
	// most jobs' logs are small, and zeroing 4 MiB per attempt was a tenth
	// of the local executor's CPU on short jobs (bench/dispatch).
	buf := make([]byte, 64<<10)
	wait := 50 * time.Millisecond
	after := r.after
	if after == nil {
		after = time.After
	}
	for {
		stopping := stop.Err() != nil // read before the file, so the final read sees all
		n, err := f.ReadAt(buf, acked)
		if err != nil && err != io.EOF {
			return err
		}
		if n > 0 {
			size, err := r.c.AppendLog(ctx, r.cfg.Job, r.cfg.Attempt, acked, buf[:n])
			switch {
			case err == nil:
				acked, wait = size, 50*time.Millisecond
				if n == len(buf) {
					// Behind: the rest goes at once, in a larger chunk.
					if len(buf) < 4<<20 {
						buf = make([]byte, 2*len(buf))
					}
					continue
				}
				if stopping {
					continue
				}
				// Caught up: what is written meanwhile goes in one chunk
				// after wait, as it would had the file been at its end. A
				// serving replica logs every request; sending each line
				// the moment the last send ended made a log call per few
				// requests, about a sixth of ferry server's CPU per scoring
				// request (bench/endpoint).
				n = 0
			case client.StatusOf(err) == 409:
				if size, err2 := r.c.LogSize(ctx, r.cfg.Job, r.cfg.Attempt); err2 == nil {
					acked = size
					continue
				}
			case client.StatusOf(err) >= 400 && client.StatusOf(err) < 500:
				return err
			}
			if err != nil {
				r.log.Warn("log shipping", "err", err)
				wait = min(wait*2, 5*time.Second)
			}
		} else if stopping {
			return nil
		}
		var stopped <-chan struct{}
		if n == 0 {
			stopped = stop.Done() // wake at once to do the final read
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stopped:
		case <-after(wait):
		}
	}
}

// uploadOutputs uploads ./outputs of the working directory and every named
// output, and returns them; it records them with the server too unless
// the server takes them with the final report (FinalOutputs). What cannot be uploaded safely
// (a symlink out, a special file, a bad name) or is over a limit is left
// out: each such entry gets a line in the job's log and is listed with the
// outputs, and everything else is kept. It returns an error only when the
// upload itself failed.
func (r *runner) uploadOutputs(ctx context.Context, a *apitypes.Assignment, p *paths, logw io.Writer) (apitypes.Outputs, error) {
	var out apitypes.Outputs
	var errs []error
	dirs := []outputDir{{name: "outputs", dir: filepath.Join(r.wd, "outputs")}}
	for _, name := range slices.Sorted(maps.Keys(p.outDirs)) {
		dirs = append(dirs, outputDir{name: name, dir: p.outDirs[name], named: true})
	}
	quota := a.OutputLimits.JobBytes
	var used int64
	for _, d := range dirs {
		opt := snapshot.OutputOptions{
			MaxFileSize: a.OutputLimits.SnapshotBytes, FileLimitName: "the limit of one output snapshot",
			SizeLimitName: "the job's output quota",
		}
		if quota > 0 {
			opt.MaxSize = quota - used
			if used > 0 {
				opt.SizeLimitName = "what the job's other outputs left of its output quota,"
			}
			if opt.MaxSize <= 0 {
				opt.MaxSize = -1
			}
		}
		plan, err := r.planOutputs(d.dir, opt)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.label(), err))
			continue
		}
		used += plan.TotalSize()
		// The files are read as they are sent, so what cannot be read is
		// known only once the upload is done.
		skipped, skippedMore := plan.skipped()
		upload := plan.Len() > 0 || d.named // an empty ./outputs gives no snapshot
		var id string
		if upload {
			var sent snapshot.OutputSent
			if id, sent, err = r.upload(ctx, plan); err == nil {
				skipped, skippedMore = sent.Skipped, sent.SkippedMore
			}
		}
		plan.Close()
		for _, sk := range skipped {
			fmt.Fprintf(logw, "ferry: skipped %s/%s: %s\n", d.label(), sk.Path, sk.Reason)
			if len(out.Skipped) < apitypes.MaxSkippedOutputs {
				out.Skipped = append(out.Skipped, apitypes.SkippedOutput{Output: d.name, Path: sk.Path, Reason: sk.Reason})
			} else {
				out.SkippedMore++
			}
		}
		if skippedMore > 0 {
			fmt.Fprintf(logw, "ferry: skipped %d more entries of %s (not listed)\n", skippedMore, d.label())
			out.SkippedMore += skippedMore
		}
		if !upload {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.label(), err))
			continue
		}
		if !d.named {
			out.Artifacts = id
			continue
		}
		if out.Named == nil {
			out.Named = map[string]string{}
		}
		out.Named[d.name] = id
	}
	if n := len(out.Skipped) + out.SkippedMore; n > 0 {
		fmt.Fprintf(logw, "ferry: %d output entries were skipped and the rest uploaded; `ferry job show` lists them\n", n)
	}
	if a.FinalOutputs {
		return out, errors.Join(errs...)
	}
	if err := client.Retry(ctx, 5*time.Second, func() error {
		return r.c.SetOutputs(ctx, r.cfg.Job, r.cfg.Attempt, out)
	}); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// outputSource is an output folder planned for the upload.
type outputSource interface {
	snapshot.OutputSource
	TotalSize() int64
	skipped() ([]snapshot.Skipped, int)
	Close()
}

// planOutputs plans the upload of the output folder dir, beneath the
// attempt's folder. The runner may have more rights than the job (root,
// where jobs run as another account), and processes of the job's account
// may change the folder as it is read: everything beneath the attempt's
// folder, which the job cannot change, is resolved without following a
// symlink (snapshot.PlanOutputsUnder), and where the job runs as another
// account the walk and the reads are made by a process of that account
// (readOutputsAs).
func (r *runner) planOutputs(dir string, opt snapshot.OutputOptions) (outputSource, error) {
	rel, err := filepath.Rel(r.cfg.Dir, dir)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%s is not in the attempt's folder %s", dir, r.cfg.Dir)
	}
	if cred := r.credential(); cred != nil && cred.Uid != uint32(os.Geteuid()) {
		if !r.emptyFolder(rel) {
			return readOutputsAs(cred, r.cfg.Dir, rel, dir, opt)
		}
		// An empty folder (most small jobs' ./outputs, an unused named
		// output) has nothing to read: it is planned here rather than
		// by a reader started for it (an exec of this binary, 15 ms of
		// CPU a job in bench/dispatch), with room for nothing, so that
		// a file put there meanwhile is not read by the runner either.
		opt.MaxSize = -1
	}
	p, err := snapshot.PlanOutputsUnder(r.cfg.Dir, rel, opt)
	if err != nil {
		return nil, err
	}
	return inProcessPlan{p}, nil
}

// inProcessPlan is an output plan read by the runner itself.
type inProcessPlan struct{ *snapshot.OutputPlan }

func (p inProcessPlan) skipped() ([]snapshot.Skipped, int) { return p.Skipped, p.SkippedMore }
func (p inProcessPlan) Close()                             {}

// outputDir is one directory of outputs the runner uploads.
type outputDir struct {
	name  string // "outputs", or the named output's name
	dir   string
	named bool
}

// label is how the log names the directory.
func (d outputDir) label() string {
	if d.named {
		return "output " + d.name
	}
	return "outputs"
}

// upload reads and sends a planned output directory as one snapshot
// stream (an older server gets it the batched way), retrying through
// server restarts.
func (r *runner) upload(ctx context.Context, plan snapshot.OutputSource) (string, snapshot.OutputSent, error) {
	var id string
	var sent snapshot.OutputSent
	err := client.Retry(ctx, 5*time.Second, func() error {
		var err error
		id, sent, err = r.c.UploadOutputs(ctx, plan, nil)
		if client.StatusOf(err) == http.StatusInsufficientStorage {
			r.log.Warn("the server's disk is full; the outputs stay on this node and are uploaded when it has room", "err", err)
		}
		return err
	})
	return id, sent, err
}
