package apitypes

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Job statuses, as Azure ML names them.
const (
	StatusQueued          = "Queued"
	StatusPreparing       = "Preparing"
	StatusRunning         = "Running"
	StatusFinalizing      = "Finalizing"
	StatusCompleted       = "Completed"
	StatusFailed          = "Failed"
	StatusCanceled        = "Canceled"
	StatusCancelRequested = "CancelRequested"
)

// IsTerminal reports whether a job in status s will never change again.
func IsTerminal(s string) bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCanceled
}

// Job is a job as the API shows it.
type Job struct {
	Name              string             `json:"name"`
	DisplayName       string             `json:"display_name,omitempty"`
	ExperimentName    string             `json:"experiment_name,omitempty"`
	Status            string             `json:"status"`
	StatusReason      string             `json:"status_reason,omitempty"`
	Compute           string             `json:"compute"`
	ExitCode          *int               `json:"exit_code"`
	Error             string             `json:"error,omitempty"`
	CancelRequestedBy string             `json:"cancel_requested_by,omitempty"`
	Attempt           int                `json:"attempt"`
	Handle            string             `json:"handle,omitempty"` // the current attempt's name in its compute's engine (a Slurm job id)
	CreatedBy         string             `json:"created_by,omitempty"`
	Created           *time.Time         `json:"created"`
	Started           *time.Time         `json:"started"`
	Ended             *time.Time         `json:"ended"`
	Metrics           map[string]float64 `json:"metrics"`
	CodeSnapshot      string             `json:"code_snapshot,omitempty"`
	InputSnapshots    map[string]string  `json:"input_snapshots,omitempty"`
	// RemoteInputs are the inputs the runner fetches on its node.
	RemoteInputs map[string]RemoteInput `json:"remote_inputs,omitempty"`
	Environment  *environment.Spec      `json:"environment,omitempty"`
	Outputs      *Outputs               `json:"outputs,omitempty"`
	Spec         *spec.Job              `json:"spec,omitempty"`
	// Pipeline is a pipeline job's spec (Spec is nil), and Steps its
	// steps (in GetJob's view, not in lists).
	Pipeline *spec.PipelineJob `json:"pipeline,omitempty"`
	Steps    []PipelineStep    `json:"steps,omitempty"`
	// Unreadable names the stored parts of a damaged record that could
	// not be read, and why; they are left out of the view.
	Unreadable []string `json:"unreadable,omitempty"`
	History    []Event  `json:"history,omitempty"`
	// Preemptions are the attempts that ended because their node was
	// preempted; each was followed by a new attempt (shown with History).
	Preemptions []Preemption `json:"preemptions,omitempty"`
	// Params and RunTags are what the job set with mlflow.log_param and
	// mlflow.set_tag; shown with History.
	Params  map[string]string `json:"params,omitempty"`
	RunTags map[string]string `json:"run_tags,omitempty"`
	// Sweep is a sweep job's objective and trials, ranked.
	Sweep *SweepView `json:"sweep,omitempty"`
}

// Event is one status change of a job.
type Event struct {
	Time   time.Time `json:"time"`
	From   string    `json:"from,omitempty"`
	To     string    `json:"to"`
	Reason string    `json:"reason,omitempty"`
}

// Outputs are the snapshots a job's runner uploaded: the working
// directory's ./outputs and each named output.
type Outputs struct {
	Artifacts string            `json:"artifacts,omitempty"`
	Named     map[string]string `json:"named,omitempty"`
	// Skipped lists the entries the runner left out because they were
	// unsafe or over a limit (docs/architecture.md, "Failure": outputs are never lost
	// wholesale); SkippedMore counts those past MaxSkippedOutputs.
	Skipped     []SkippedOutput `json:"skipped,omitempty"`
	SkippedMore int             `json:"skipped_more,omitempty"`
}

// MaxSkippedOutputs is the most skipped entries one attempt may list.
const MaxSkippedOutputs = 1000

// SkippedOutput is an output entry the runner did not upload, and why.
type SkippedOutput struct {
	// Output is "outputs" for the working directory's ./outputs, else the
	// name of a named output.
	Output string `json:"output"`
	Path   string `json:"path"` // relative to the output's directory
	Reason string `json:"reason"`
}

// OutputLimits bound what a runner uploads of an attempt's outputs; the
// runner checks them on the sizes the file system reports, before it
// uploads anything, and skips what is over them.
type OutputLimits struct {
	// JobBytes is the most bytes all of an attempt's outputs may hold
	// together: the per-job output quota (0: none).
	JobBytes int64 `json:"job_bytes,omitempty"`
	// SnapshotBytes is the most bytes one output directory may hold: the
	// server's snapshot size limit (0: none).
	SnapshotBytes int64 `json:"snapshot_bytes,omitempty"`
}

// Compute is a compute target as the API shows it.
type Compute struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	State string `json:"state"`
	// Capacity is how many jobs can run at once: the local target's
	// attempts at once; a pool's max nodes, since a job there takes whole
	// nodes (one job a node, or fewer for jobs of several instances).
	Capacity int `json:"capacity,omitempty"`
	Active   int `json:"active_jobs"`
	Queued   int `json:"queued_jobs"`
	// Size is a pool's node size (a catalog name, or "attached" for an
	// attached machine); empty for the local target.
	Size string `json:"size,omitempty"`
	// Pool computes: node counts by state, the bounds the count is kept
	// in (a cluster's min and max_instances; 1 and 1 for an attached
	// machine or an instance meant to run, 0 and 0 for a stopped one; nil
	// for the local target), the target count the autoscaler last aimed
	// at, and the newest events.
	Nodes        map[string]int `json:"nodes,omitempty"`
	CurrentNodes int            `json:"current_nodes"`
	MinNodes     *int           `json:"min_nodes,omitempty"`
	MaxNodes     *int           `json:"max_nodes,omitempty"`
	TargetNodes  int            `json:"target_nodes"`
	Events       []ComputeEvent `json:"events,omitempty"`
	// Warnings are about nodes with less than their size promises.
	Warnings []string      `json:"warnings,omitempty"`
	Created  time.Time     `json:"created"`
	Spec     *spec.Compute `json:"spec,omitempty"`

	// Compute instances: the exec/ssh sessions and port-forwards open now.
	Sessions     int `json:"sessions,omitempty"`
	PortForwards int `json:"port_forwards,omitempty"`
}

// Metric is one logged metric value.
type Metric struct {
	Name  string    `json:"name"`
	Value float64   `json:"value"`
	Step  int64     `json:"step"`
	Time  time.Time `json:"time"`
}

// Assignment is what a runner needs to run one attempt.
type Assignment struct {
	Job            string            `json:"job"`
	Attempt        int               `json:"attempt"`
	Spec           *spec.Job         `json:"spec"`
	CodeSnapshot   string            `json:"code_snapshot,omitempty"`
	InputSnapshots map[string]string `json:"input_snapshots,omitempty"`
	// RemoteInputs are the inputs the runner fetches on its node.
	RemoteInputs map[string]RemoteInput `json:"remote_inputs,omitempty"`
	// Environment is the job's environment, resolved; nil = the node's own.
	Environment *environment.Spec `json:"environment,omitempty"`
	// ResumeOutputs is the snapshot of ./outputs an earlier attempt of the
	// job uploaded (one its node's preemption stopped, say). The runner
	// puts it in ./outputs before the command starts, so a job that
	// checkpoints there resumes.
	ResumeOutputs string `json:"resume_outputs,omitempty"`
	// OutputLimits bound the outputs the runner uploads.
	OutputLimits OutputLimits `json:"output_limits"`
	// FinalOutputs says the server takes Report.Outputs and
	// Report.Finalizing with an attempt's final report, so the runner
	// makes no calls of their own (an older server leaves it false, and
	// its runners report Finalizing and set the outputs apart).
	FinalOutputs bool `json:"final_outputs,omitempty"`
	// FinalRunning says the server takes Report.Running with an
	// attempt's final report: a command that ends at once is not
	// reported Running apart (an older server leaves it false).
	FinalRunning bool `json:"final_running,omitempty"`
	// ReplicaSecret, for an attempt of an online deployment's replica, is
	// that replica's secret (Service.replicaSecret): the runner gives it
	// to the job as inferenceserver.SecretEnv, and the replica answers
	// only requests that carry it (the gateway's, the probes'). A secret:
	// the runner never writes it anywhere else.
	ReplicaSecret string `json:"replica_secret,omitempty"`
}

// Report is a runner's word on its attempt.
type Report struct {
	// Rank is the node rank of the runner: a multi-node job has one runner
	// per node, and is done when every rank is.
	Rank     int    `json:"rank,omitempty"`
	Status   string `json:"status"`
	Reason   string `json:"reason,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	// Outputs, in a final or Preempted report to a server whose assignment
	// said FinalOutputs, are the attempt's outputs, recorded with its end
	// (rank 0's alone, as with the outputs call).
	Outputs *Outputs `json:"outputs,omitempty"`
	// Finalizing, in a final report to such a server, is the reason of the
	// Finalizing step the runner went through without reporting it apart
	// (it had nothing to upload): the server records the step before the
	// end, in the same transaction.
	Finalizing string `json:"finalizing,omitempty"`
	// Running, in a final report to a server whose assignment said
	// FinalRunning, is the reason of the Running step the runner did not
	// report apart (the command ended within moments of its start), and
	// RunningForUS how many microseconds before the report the command
	// started: the server records the step, at its own time less that, in
	// the end's transaction.
	Running      string `json:"running,omitempty"`
	RunningForUS int64  `json:"running_for_us,omitempty"`
}

// HeartbeatReply tells a runner what the server wants of it.
type HeartbeatReply struct {
	Cancel bool `json:"cancel"`
	// Preempt asks the runner to stop the job because its node is being
	// preempted: upload the outputs and report StatusPreempted.
	Preempt bool `json:"preempt,omitempty"`
}

// Empty says whether o names no output and skipped none: there is nothing
// in it to check against the job's spec or the quota.
func (o Outputs) Empty() bool {
	return o.Artifacts == "" && len(o.Named) == 0 && len(o.Skipped) == 0 && o.SkippedMore == 0
}

// StatusPreempted is what a runner reports when it stopped its attempt
// because the node was preempted. It is an attempt's end, never a job's
// status: the job goes back to Queued.
const StatusPreempted = "Preempted"

// Preemption is an attempt of a job that its node's preemption ended.
type Preemption struct {
	Attempt int       `json:"attempt"`
	Node    string    `json:"node"`
	Time    time.Time `json:"time"`
	Reason  string    `json:"reason,omitempty"`
}

// RunValues are a job's MLflow params and tags (mlflow.log_param,
// mlflow.set_tag), one value per key, the last one set.
type RunValues struct {
	Params map[string]string `json:"params"`
	Tags   map[string]string `json:"tags"`
}

// Bounds of what a job may set as params and tags, MLflow's own: a key of
// up to 250 characters, a value of up to 6000, 100 params and tags a call.
const (
	MaxRunKey          = 250
	MaxRunValue        = 6000
	MaxRunValuesPerSet = 100
)

// CheckRunValues says what is wrong with params and tags a job sets,
// naming the field; nil if nothing is. The runner checks with it too.
func CheckRunValues(v RunValues) error {
	if n := len(v.Params) + len(v.Tags); n > MaxRunValuesPerSet {
		return fmt.Errorf("params and tags: at most %d per call (got %d)", MaxRunValuesPerSet, n)
	}
	check := func(field string, m map[string]string) error {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if strings.TrimSpace(k) == "" || len(k) > MaxRunKey {
				return fmt.Errorf("%s: a key needs 1 to %d characters (got %q)", field, MaxRunKey, k)
			}
			if len(m[k]) > MaxRunValue {
				return fmt.Errorf("%s.%s: a value may have at most %d characters (got %d)", field, k, MaxRunValue, len(m[k]))
			}
		}
		return nil
	}
	return errors.Join(check("params", v.Params), check("tags", v.Tags))
}

// RemoteInput is where the runner gets a job's input that the workspace
// does not hold: an http(s) file, a blob container's file or folder, or a
// folder every node reads. The workspace resolves it when the job is
// submitted (datastores and data assets included), so the job gets what
// they named then, and the runner needs nothing but this to fetch it.
type RemoteInput struct {
	// From is what the job or its data asset names, as written.
	From string `json:"from"`
	// URL is an http(s) file.
	URL string `json:"url,omitempty"`
	// Blob is a file or folder of an Azure blob container, read
	// anonymously.
	Blob *BlobSource `json:"blob,omitempty"`
	// Folder is a file or folder at this absolute path on every node (a
	// local_folder datastore).
	Folder string `json:"folder,omitempty"`
}

// BlobSource is a path in a blob container of the blob service at Base.
type BlobSource struct {
	Base      string `json:"base"`
	Container string `json:"container"`
	Path      string `json:"path,omitempty"`
}

// URLOf is the https URL of the blob path (a folder's is its prefix).
func (b *BlobSource) URLOf() string {
	u := b.Base + "/" + b.Container
	if b.Path != "" {
		u += "/" + spec.EscapeURLPath(b.Path)
	}
	return u
}

// Where is what a job with mode direct gets as the input's value, and
// what the log and messages name.
func (r RemoteInput) Where() string {
	switch {
	case r.URL != "":
		return r.URL
	case r.Blob != nil:
		return r.Blob.URLOf()
	}
	return r.Folder
}

// MaxMetricsPerRequest bounds the values of one request to log metrics.
const MaxMetricsPerRequest = 10000

// CheckMetric says what is wrong with a metric value a job logs, naming
// the field; nil if nothing is. The runner checks with it too, before it
// queues a value for a server that would refuse it.
func CheckMetric(m Metric) error {
	if strings.TrimSpace(m.Name) == "" || len(m.Name) > 255 {
		return errors.New("name: a metric needs a name of 1 to 255 characters")
	}
	return nil
}
