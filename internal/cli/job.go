package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
)

const defaultMaxSnapshot = 1 << 30

// snapshotLimit is the largest upload a command makes: its
// --max-snapshot-size (flag), else $FERRY_MAX_SNAPSHOT_SIZE, else
// defaultMaxSnapshot.
func (a *app) snapshotLimit(flag string) (int64, error) {
	if s := firstNonEmpty(flag, a.getenv("FERRY_MAX_SNAPSHOT_SIZE")); s != "" {
		return parseSize(s)
	}
	return defaultMaxSnapshot, nil
}

func (a *app) jobCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "job", Short: "Submit and follow jobs (Azure ML v2 command job files)"}
	cmd.AddCommand(a.jobCreateCmd(), a.jobShowCmd(), a.jobListCmd(), a.jobStreamCmd(), a.jobCancelCmd(), a.jobDownloadCmd())
	return cmd
}

// createOpts are the flags of a `create -f FILE` (of a job, a schedule,
// an asset; each has those it has).
type createOpts struct {
	file, name, version, maxSnap string
	sets                         []string
	stream                       bool
}

// overrides are the --set overrides with --name and --version added.
func (o createOpts) overrides() []string {
	sets := o.sets
	if o.name != "" {
		sets = append(sets, "name="+o.name)
	}
	if o.version != "" {
		sets = append(sets, "version="+o.version)
	}
	return sets
}

func (a *app) jobCreateCmd() *cobra.Command {
	var o createOpts
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Submit a job; prints its name (the whole job with -o json)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			j, err := a.createJob(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			if o.stream {
				return a.streamToEnd(cmd.Context(), c, j.Name)
			}
			if a.output == "table" {
				fmt.Fprintln(a.stdout, j.Name)
				return nil
			}
			return a.print(j, nil)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "job YAML file (required)")
	f.StringArrayVar(&o.sets, "set", nil, "override a field: --set path=value (repeatable), e.g. --set limits.timeout=60")
	f.StringVar(&o.name, "name", "", "job name (default: the file's name, else a generated one)")
	f.BoolVar(&o.stream, "stream", false, "stream the logs; exit 0 only if the job Completed")
	f.StringVar(&o.maxSnap, "max-snapshot-size", "", "largest code snapshot to upload, e.g. 2GiB (default 1GiB or $FERRY_MAX_SNAPSHOT_SIZE)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// createJob parses the job file, uploads its code and local inputs, and
// submits it.
func (a *app) createJob(ctx context.Context, c *client.Client, o createOpts) (*apitypes.Job, error) {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return nil, err
	}
	if spec.IsPipelineFile(data) {
		return a.createPipeline(ctx, c, o, data)
	}
	req, err := a.jobRequest(ctx, c, specFile{name: o.file, data: data, sets: o.overrides()}, o.maxSnap)
	if err != nil {
		return nil, err
	}
	return c.SubmitJob(ctx, req)
}

// jobRequest parses a job file, checks the references it makes against
// the workspace, and uploads its code and local inputs: the request that
// submits it (`job create`) or that a schedule fires (`schedule create`).
func (a *app) jobRequest(ctx context.Context, c *client.Client, src specFile, maxSnap string) (apitypes.JobRequest, error) {
	j, err := spec.ParseJobWithSet(src.data, src.sets)
	if err != nil {
		return apitypes.JobRequest{}, src.parseError(err)
	}
	if len(j.Services) > 0 {
		fmt.Fprintf(a.stderr, "%s: accepted, but not used by Ferry: services (Ferry starts no interactive services; the job runs without them, and `ferry compute ssh` reaches a compute instance)\n", src.name)
	}
	limit, err := a.snapshotLimit(maxSnap)
	if err != nil {
		return apitypes.JobRequest{}, err
	}
	// A sweep's code and environment are its trial's: written in the job
	// file, or in the component file its trial names.
	trialSrc, prefix := src, "trial."
	var includes []string // the trial component's additional_includes
	if j.IsComponentTrial() {
		cs, incs, err := a.componentTrial(ctx, c, src, j)
		if err != nil {
			return apitypes.JobRequest{}, err
		}
		includes = incs
		if cs != nil {
			trialSrc, prefix = *cs, ""
		}
	}
	if err := checkLocalPaths(src, trialSrc, prefix, j); err != nil {
		return apitypes.JobRequest{}, err
	}
	if err := checkReferences(ctx, c, src, jobReferences(j)); err != nil {
		return apitypes.JobRequest{}, err
	}
	if err := checkDataInputs(ctx, c, src, j); err != nil {
		return apitypes.JobRequest{}, err
	}
	code, envp, codeSrc := &j.Code, &j.Environment, src
	if j.Type == "sweep" && j.Trial != nil {
		code, envp, codeSrc = &j.Trial.Code, &j.Trial.Environment, trialSrc
	} else {
		prefix = ""
	}
	env, envSrc, envField, err := inlineEnvironmentFile(codeSrc, *envp)
	if err != nil {
		return apitypes.JobRequest{}, err
	}
	*envp = env
	if envField != "" {
		envField = prefix + envField
	}
	req := apitypes.JobRequest{InputSnapshots: map[string]string{}}
	switch {
	case len(includes) > 0:
		id, err := a.uploadCodeWithIncludes(ctx, c, codeSrc, &spec.Component{Code: *code, AdditionalIncludes: includes}, prefix, limit)
		if err != nil {
			return apitypes.JobRequest{}, err
		}
		req.CodeSnapshot = id
	case *code != "":
		id, err := a.upload(ctx, c, pathField{file: codeSrc, field: prefix + "code", value: *code}, "", limit, true)
		if err != nil {
			return apitypes.JobRequest{}, err
		}
		req.CodeSnapshot = id
	}
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[name]
		if in.IsLiteral() || spec.IsDataRef(in.Path) {
			continue // a registered data asset: the workspace has its files
		}
		if isRemote(in.Path) {
			continue // fetched on the node: a URL, a blob container, a datastore
		}
		f := pathField{file: src, field: "inputs." + name + ".path", value: in.Path}
		id, err := a.upload(ctx, c, f, in.Type, limit, false)
		if err != nil {
			return apitypes.JobRequest{}, err
		}
		req.InputSnapshots[name] = id
	}
	if id, err := a.uploadEnvironmentFiles(ctx, c, envField, envSrc, *envp, limit); err != nil {
		return apitypes.JobRequest{}, err
	} else {
		req.EnvironmentSnapshot = id
	}
	raw, err := jsonOf(j)
	if err != nil {
		return apitypes.JobRequest{}, err
	}
	req.Spec = raw
	return req, nil
}

// componentTrial reads the component a sweep's trial names and makes
// the trial from it: a component file is read here, and the specFile it
// returns is where the trial's code and environment paths are relative
// to, with the component's additional_includes, which join the trial's
// code; a registered component (azureml:NAME:VERSION) is only looked up,
// before anything is uploaded, and left for the workspace to bind (it
// returns nil).
func (a *app) componentTrial(ctx context.Context, c *client.Client, src specFile, j *spec.Job) (*specFile, []string, error) {
	f := pathField{file: src, field: "trial", value: j.Trial.Ref}
	if strings.HasPrefix(f.value, "azureml:") {
		_, err := a.registeredComponent(ctx, c, f)
		return nil, nil, err
	}
	data, err := os.ReadFile(f.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, f.notFound()
	} else if err != nil {
		return nil, nil, f.errorf("%v", err)
	}
	comp, err := spec.ParseComponent(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s (the trial's component in %s): %w", f.path(), src.name, err)
	}
	noteIgnored(a.stderr, f.path(), comp.Ignored)
	if err := j.UseComponentTrial(comp); err != nil {
		return nil, nil, src.parseError(err)
	}
	if err := j.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s with the trial of %s: %w", src.name, f.path(), err)
	}
	return &specFile{name: f.path(), data: data}, comp.AdditionalIncludes, nil
}

// checkDataInputs looks up the data assets that j's inputs name
// (azureml:NAME:VERSION, azureml:NAME@latest) and checks their types, and
// the datastores they name (azureml://datastores/NAME/paths/PATH),
// before anything is uploaded: a job that names a missing asset is
// refused without sending its code first. The workspace checks again at
// submission, which is what counts; this is for the user's time.
func checkDataInputs(ctx context.Context, c *client.Client, src specFile, j *spec.Job) error {
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[name]
		if in.IsLiteral() {
			continue
		}
		f := pathField{file: src, field: "inputs." + name + ".path", value: in.Path}
		if u, err := spec.ParseDataURI(in.Path); err == nil && u.Kind == spec.URIDatastore {
			if _, err := c.GetDatastore(ctx, u.Store); err != nil {
				return f.errorf("%v", err)
			}
			continue
		}
		if !spec.IsDataRef(in.Path) {
			continue
		}
		if spec.IsModelType(in.Type) {
			if err := checkModelInput(ctx, c, in.Path); err != nil {
				return f.errorf("%v", err)
			}
			continue
		}
		dname, version, err := spec.ParseDataRef(in.Path)
		if err != nil {
			return f.errorf("%v", err)
		}
		d, err := c.GetData(ctx, dname, version)
		if err != nil {
			return f.errorf("%v", err)
		}
		if !spec.DataTypeFits(in.Type, d.Type) {
			f.field = "inputs." + name + ".type"
			return f.errorf("%s is %s, but the input's type is %s; write type: %s", d.ID, d.Type, in.Type, d.Type)
		}
	}
	return nil
}

// checkModelInput looks up the registered model that an input of a model
// type (mlflow_model, custom_model, triton_model) names.
func checkModelInput(ctx context.Context, c *client.Client, ref string) error {
	name, version, err := spec.ParseModelRef(ref)
	if err != nil {
		return err
	}
	_, err = c.GetModel(ctx, name, version)
	return err
}

var remoteScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

func isRemote(p string) bool {
	return remoteScheme.MatchString(p) && !strings.HasPrefix(p, "file:")
}

func resolve(base, p string) string {
	p = strings.TrimPrefix(p, "file:")
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

// upload snapshots the local file or folder that f names and sends what
// the workspace lacks. kind is the input type (uri_file, uri_folder) or ""
// for code.
func (a *app) upload(ctx context.Context, c *client.Client, f pathField, kind string, limit int64, ignoreFiles bool) (string, error) {
	path, field := f.path(), f.field
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", f.notFound()
	}
	if err != nil {
		return "", f.errorf("%v", err)
	}
	switch {
	case kind == "uri_file" && st.IsDir():
		return "", f.errorf("%s is a folder, but its type is uri_file; use type: uri_folder", path)
	case kind == "uri_folder" && !st.IsDir():
		return "", f.errorf("%s is a file, but its type is uri_folder; use type: uri_file", path)
	case kind == "mltable" && !st.IsDir():
		return "", f.errorf("%s is a file, but an mltable is a folder holding an MLTable file; give the folder", path)
	}
	opt := snapshot.BuildOptions{MaxSize: limit, UseIgnoreFiles: ignoreFiles, Cache: a.statCache()}
	var tree *snapshot.Tree
	if st.IsDir() {
		tree, err = snapshot.Walk(path, opt)
	} else {
		tree, err = snapshot.WalkFile(path, opt)
	}
	if err != nil {
		return "", err
	}
	return a.sendTree(ctx, c, field, tree)
}

// sendTree uploads what the workspace lacks of a tree listed for field
// and returns the snapshot's ID, saying how much was sent.
func (a *app) sendTree(ctx context.Context, c *client.Client, field string, tree *snapshot.Tree) (string, error) {
	var progress func(int64)
	clear := func() {}
	if a.terminal(a.stderr) && tree.TotalSize() > 0 {
		line := newProgressLine(a.stderr, "uploading "+field, tree.TotalSize(), time.Now)
		progress, clear = line.Add, line.Clear
	}
	id, stats, err := c.UploadTree(ctx, tree, progress)
	clear() // what is printed next starts a line of its own
	if err != nil {
		return "", err
	}
	switch {
	case stats.Uploaded == stats.Files:
		fmt.Fprintf(a.stderr, "%s: uploaded %s (%s)\n", field, plural(stats.Files, "file"), humanBytes(stats.Bytes))
	case stats.Uploaded == 0 && stats.Files == 1:
		fmt.Fprintf(a.stderr, "%s: its file was already in the workspace; nothing to upload\n", field)
	case stats.Uploaded == 0:
		fmt.Fprintf(a.stderr, "%s: all %d files were already in the workspace; nothing to upload\n", field, stats.Files)
	default:
		fmt.Fprintf(a.stderr, "%s: uploaded %d of %d files (%s); the rest were already in the workspace\n",
			field, stats.Uploaded, stats.Files, humanBytes(stats.Bytes))
	}
	return id, nil
}

// statCache is where uploads remember the digests of the files they
// hashed, per user: $FERRY_HOME/upload-cache (not cache/, which is the
// local workspace's blob cache when FERRY_HOME is its data directory).
// Without a home, nothing is cached.
func (a *app) statCache() *snapshot.StatCache {
	home, err := a.home()
	if err != nil {
		return nil
	}
	return snapshot.NewStatCache(filepath.Join(home, "upload-cache"), nil)
}

// streamToEnd follows a job's log until it ends, then prints its outcome.
// Ctrl-C stops streaming, not the job.
func (a *app) streamToEnd(ctx context.Context, c *client.Client, name string) error {
	return a.follow(ctx, c, name, true)
}

// follow streams a job's log to its end; submitted says whether the job
// was just submitted, for the first line.
func (a *app) follow(ctx context.Context, c *client.Client, name string, submitted bool) error {
	if submitted {
		fmt.Fprintf(a.stderr, "job %s submitted; streaming its log (Ctrl-C stops streaming, not the job)\n", name)
	} else {
		fmt.Fprintf(a.stderr, "streaming the log of job %s (Ctrl-C stops streaming, not the job)\n", name)
	}
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if j, err := c.GetJob(sctx, name); err == nil && j.Sweep != nil {
		return a.followSweep(sctx, c, name)
	} else if err == nil && j.Pipeline != nil {
		return a.followPipeline(sctx, c, name)
	}
	wctx, stopWatching := context.WithCancel(sctx)
	defer stopWatching()
	go a.watchQueue(wctx, c, name)
	var offset int64
	wait := 200 * time.Millisecond
	for {
		n, err := c.StreamLogs(sctx, name, offset, true, a.stdout)
		if n > offset {
			wait = 200 * time.Millisecond
		}
		offset = n
		if sctx.Err() != nil {
			fmt.Fprintf(a.stderr, "\nstopped streaming; job %s goes on (`%s job stream %s` to follow it again)\n", name, a.self, name)
			return &exitError{code: 130}
		}
		if s := client.StatusOf(err); s >= 400 && s < 500 {
			return err
		}
		if err == nil {
			j, err := c.GetJob(sctx, name)
			if err == nil && apitypes.IsTerminal(j.Status) {
				return a.finalSummary(j)
			}
		}
		// The server went away or ended the stream early: resume from offset.
		select {
		case <-sctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// watchQueue says on stderr why a job waits, and each time the reason
// changes, until it leaves the queue: a job stream that shows nothing
// while the job waits for a node or a quota looks stuck.
func (a *app) watchQueue(ctx context.Context, c *client.Client, name string) {
	last := ""
	for {
		j, err := c.GetJob(ctx, name)
		if err == nil {
			// A target that queues itself (Slurm) passes an attempt through
			// Preparing while it hands it to the engine's queue, where the
			// job is Queued again with the engine's reason: keep watching.
			if j.Status != apitypes.StatusQueued && j.Status != apitypes.StatusPreparing {
				if last != "" {
					fmt.Fprintf(a.stderr, "job %s: %s\n", name, j.Status)
				}
				return
			}
			if why := strings.TrimPrefix(j.StatusReason, "queued: "); j.Status == apitypes.StatusQueued && why != last && why != "" && why != "submitted" {
				fmt.Fprintf(a.stderr, "job %s: queued: %s\n", name, why)
				last = why
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// finalSummary prints how a job ended and returns its exit status.
func (a *app) finalSummary(j *apitypes.Job) error {
	fmt.Fprintf(a.stderr, "\njob %s: %s", j.Name, j.Status)
	if j.StatusReason != "" {
		fmt.Fprintf(a.stderr, " (%s)", j.StatusReason)
	}
	fmt.Fprintln(a.stderr)
	if j.Error != "" && j.Status != apitypes.StatusCompleted {
		fmt.Fprintf(a.stderr, "error: %s\n", j.Error)
	}
	for _, k := range slices.Sorted(maps.Keys(j.Metrics)) {
		fmt.Fprintf(a.stderr, "metric %s = %g\n", k, j.Metrics[k])
	}
	if j.Status == apitypes.StatusCompleted {
		return nil
	}
	code := 1
	if j.ExitCode != nil && *j.ExitCode > 0 && *j.ExitCode < 256 {
		code = *j.ExitCode
	}
	return &exitError{code: code}
}

func (a *app) jobStreamCmd() *cobra.Command {
	var rank int
	cmd := &cobra.Command{
		Use:   "stream NAME",
		Short: "Print a job's log from the start and follow it until the job ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if rank < 0 {
				return fmt.Errorf("--rank: %d is not a node rank", rank)
			}
			c.Rank = rank
			if _, err := c.GetJob(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.follow(cmd.Context(), c, args[0], false)
		},
	}
	cmd.Flags().IntVar(&rank, "rank", 0, "node rank whose log to follow, for jobs on several nodes (0 is the first)")
	return cmd
}

func (a *app) jobShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a job: status, why, timings, metrics, history",
		Args:  cobra.ExactArgs(1),
		RunE:  nameRun(a, (*client.Client).GetJob, showJob),
	}
}

func showJob(w *tabwriter.Writer, j *apitypes.Job) {
	fmt.Fprintf(w, "name:\t%s\n", j.Name)
	if j.DisplayName != "" {
		fmt.Fprintf(w, "display name:\t%s\n", j.DisplayName)
	}
	if j.ExperimentName != "" {
		fmt.Fprintf(w, "experiment:\t%s\n", j.ExperimentName)
	}
	fmt.Fprintf(w, "status:\t%s\n", j.Status)
	if j.StatusReason != "" {
		fmt.Fprintf(w, "reason:\t%s\n", j.StatusReason)
	}
	if j.ExitCode != nil {
		fmt.Fprintf(w, "exit code:\t%d\n", *j.ExitCode)
	}
	if j.Error != "" {
		fmt.Fprintf(w, "error:\t%s\n", j.Error)
	}
	if j.CancelRequestedBy != "" {
		fmt.Fprintf(w, "canceled by:\t%s\n", j.CancelRequestedBy)
	}
	if j.Pipeline != nil {
		fmt.Fprintf(w, "compute:\t- (a pipeline: each step runs on its own)\n")
	} else if j.Sweep == nil { // a sweep has no compute or attempt of its own: its trials have
		fmt.Fprintf(w, "compute:\t%s\n", j.Compute)
		fmt.Fprintf(w, "attempt:\t%d\n", j.Attempt)
	}
	if j.Handle != "" {
		fmt.Fprintf(w, "engine handle:\t%s\n", j.Handle)
	}
	fmt.Fprintf(w, "created:\t%s\n", fmtTime(j.Created))
	fmt.Fprintf(w, "started:\t%s\n", fmtTime(j.Started))
	fmt.Fprintf(w, "ended:\t%s\n", fmtTime(j.Ended))
	fmt.Fprintf(w, "duration:\t%s\n", fmtDuration(j.Started, j.Ended))
	if j.Spec != nil && j.Sweep == nil {
		fmt.Fprintf(w, "command:\t%s\n", strings.TrimSpace(j.Spec.Command))
	}
	for _, k := range slices.Sorted(maps.Keys(j.RemoteInputs)) {
		ri := j.RemoteInputs[k]
		if ri.From == ri.Where() {
			fmt.Fprintf(w, "input %s:\t%s (fetched on the node)\n", k, ri.From)
		} else {
			fmt.Fprintf(w, "input %s:\t%s = %s (fetched on the node)\n", k, ri.From, ri.Where())
		}
	}
	if j.Sweep != nil {
		showSweep(w, j)
	}
	if j.Pipeline != nil {
		showPipeline(w, j)
	}
	for _, k := range slices.Sorted(maps.Keys(j.Metrics)) {
		fmt.Fprintf(w, "metric %s:\t%g\n", k, j.Metrics[k])
	}
	for _, k := range slices.Sorted(maps.Keys(j.Params)) {
		fmt.Fprintf(w, "param %s:\t%s\n", k, j.Params[k])
	}
	for _, k := range slices.Sorted(maps.Keys(j.RunTags)) {
		fmt.Fprintf(w, "tag %s:\t%s\n", k, j.RunTags[k])
	}
	if len(j.Preemptions) > 0 {
		fmt.Fprintf(w, "preemptions:\t%d (not failures: each attempt was queued again)\n", len(j.Preemptions))
		for _, p := range j.Preemptions {
			where := "node " + p.Node + ": "
			if p.Node == "" {
				where = "" // its engine took it back; the reason says which
			}
			fmt.Fprintf(w, "  attempt %d\t%s\t%s%s\n", p.Attempt, p.Time.Local().Format("15:04:05.000"), where, p.Reason)
		}
	}
	if o := j.Outputs; o != nil && (len(o.Skipped) > 0 || o.SkippedMore > 0) {
		fmt.Fprintf(w, "skipped outputs:\t%d (not uploaded; the rest were)\n", len(o.Skipped)+o.SkippedMore)
		for _, sk := range o.Skipped {
			fmt.Fprintf(w, "  %s/%s\t%s\n", sk.Output, sk.Path, sk.Reason)
		}
		if o.SkippedMore > 0 {
			fmt.Fprintf(w, "  …\t%d more, not listed\n", o.SkippedMore)
		}
	}
	if len(j.History) > 0 {
		fmt.Fprintf(w, "history:\t\n")
		for _, e := range j.History {
			fmt.Fprintf(w, "  %s\t%s\t%s\n", e.Time.Local().Format("15:04:05.000"), e.To, e.Reason)
		}
	}
}

func (a *app) jobListCmd() *cobra.Command {
	var status, computeName string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if status != "" {
				q.Set("status", status)
			}
			if computeName != "" {
				q.Set("compute", computeName)
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			return connectPrint(cmd.Context(), a, func(c *client.Client) ([]*apitypes.Job, error) { return c.ListJobs(cmd.Context(), q) }, jobTable)
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only jobs in these statuses (comma-separated)")
	cmd.Flags().StringVar(&computeName, "compute", "", "only jobs on this compute target")
	cmd.Flags().IntVar(&limit, "max-results", 50, "at most this many jobs (0 = all)")
	return cmd
}

// jobTable lists jobs as `az ml job list` does (name, display name,
// experiment, status, compute), with why each job that is not Running or
// Completed is where it is: a Queued job's wait (a node starting, a quota),
// a Failed or Canceled job's reason.
func jobTable(w *tabwriter.Writer, jobs []*apitypes.Job) {
	fmt.Fprintln(w, "NAME\tDISPLAY NAME\tEXPERIMENT\tSTATUS\tCOMPUTE\tCREATED\tDURATION\tEXIT\tREASON")
	for _, j := range jobs {
		exit := "-"
		if j.ExitCode != nil {
			exit = strconv.Itoa(*j.ExitCode)
		}
		reason := ""
		switch j.Status {
		case apitypes.StatusQueued, apitypes.StatusFailed, apitypes.StatusCanceled:
			reason = strings.TrimPrefix(j.StatusReason, "queued: ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, orDash(j.DisplayName), orDash(j.ExperimentName), j.Status, j.Compute,
			fmtTime(j.Created), fmtDuration(j.Started, j.Ended), exit, orDash(oneLine(reason)))
	}
}

// oneLine is s on one line, for a table cell.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func (a *app) jobCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel a job (SIGTERM to its processes, SIGKILL after a grace period)",
		Args:  cobra.ExactArgs(1),
		RunE: nameRun(a, (*client.Client).CancelJob, func(w *tabwriter.Writer, j *apitypes.Job) {
			fmt.Fprintf(w, "%s\t%s\n", j.Name, j.Status)
		}),
	}
}

func (a *app) jobDownloadCmd() *cobra.Command {
	var dir, only string
	cmd := &cobra.Command{
		Use:   "download NAME",
		Short: "Download a job's outputs: ./outputs to DIR/artifacts/outputs, named outputs to DIR/named-outputs/NAME",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			where, err := download(cmd.Context(), c, args[0], dir, only)
			if err != nil {
				return err
			}
			for _, w := range where {
				fmt.Fprintln(a.stdout, w)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "download-path", ".", "directory to download into")
	cmd.Flags().StringVar(&only, "output-name", "", "download only this named output")
	return cmd
}

// download writes a job's outputs under dir and returns the paths written.
func download(ctx context.Context, c *client.Client, name, dir, only string) ([]string, error) {
	j, err := c.GetJob(ctx, name)
	if err != nil {
		return nil, err
	}
	if !apitypes.IsTerminal(j.Status) {
		return nil, fmt.Errorf("job %s is %s; its outputs can be downloaded once it has ended", name, j.Status)
	}
	if j.Pipeline != nil {
		return downloadPipeline(ctx, c, j, dir, only)
	}
	out, err := c.Outputs(ctx, name)
	if err != nil {
		return nil, err
	}
	var where []string
	if only == "" && out.Artifacts != "" {
		p := filepath.Join(dir, "artifacts", "outputs")
		if err := c.Download(ctx, out.Artifacts, p); err != nil {
			return nil, err
		}
		where = append(where, p)
	}
	if only != "" {
		if _, ok := out.Named[only]; !ok {
			return nil, fmt.Errorf("--output-name: job %s has no output %q (it has: %s)", name, only, strings.Join(slices.Sorted(maps.Keys(out.Named)), ", "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(out.Named)) {
		if only != "" && k != only {
			continue
		}
		p := filepath.Join(dir, "named-outputs", k)
		if err := c.Download(ctx, out.Named[k], p); err != nil {
			return nil, err
		}
		where = append(where, p)
	}
	return where, nil
}

var sizeRe = regexp.MustCompile(`^(?i)\s*(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$`)

// parseSize reads sizes like 1GiB, 500MB, 2g or 1048576 (bytes; units are
// powers of 1024).
func parseSize(s string) (int64, error) {
	m := sizeRe.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("size %q: write a number with an optional unit, e.g. 1GiB, 500MiB", s)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	mult := map[byte]float64{'b': 1, 'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30, 't': 1 << 40}
	if m[2] != "" {
		v *= mult[strings.ToLower(m[2])[0]]
	}
	return int64(v), nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// plural is "1 thing" or "n things", for messages.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
