// Package compute defines compute targets: the places where job attempts run.
//
// A Target only knows how to get a runner onto compute (docs/architecture.md, "How a job runs"):
// the local target starts `ferry runner` processes on this machine, pool
// targets will hand assignments to agents, Slurm and Kubernetes will start
// the runner through their own schedulers. Everything a job does once it runs
// is the runner's business and the same on every target.
//
// Implementations live in sub-packages (compute/local, ...) and are wired in
// one explicit map by the server package.
package compute

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// ErrNotSupported is wrapped by errors that say a target cannot do something
// a job asks for (a distribution, a GPU count, an image environment ...).
var ErrNotSupported = errors.New("not supported by this compute target")

// Launch is what a target needs to start one attempt of a job.
type Launch struct {
	Job      string // job name
	Attempt  int    // attempt number, fenced by the server
	APIURL   string // where the runner reaches the workspace API
	RunToken string // run-scoped token; secret, never log it

	// Spec is the job as submitted and Environment its resolved
	// environment (nil when it has none). A target that hands the attempt
	// to a scheduler of its own (Slurm, Kubernetes) maps them to the
	// engine's request: resources.instance_count to nodes,
	// distribution.process_count_per_instance to tasks per node, GPUs,
	// limits.timeout to a time limit. The runner still reads the whole
	// job from its assignment; nothing here replaces that.
	Spec        *spec.Job
	Environment *environment.Spec

	// Assignment, set for a target that is an AssignmentCarrier, is what
	// the attempt's runner would fetch first (a workspace.Assignment, as
	// JSON): handed to the runner with the launch, it saves the runner a
	// round trip to the server. Nil: the runner fetches it.
	Assignment json.RawMessage
}

// Handle names an attempt in the engine a target hands it to: a Slurm job
// id, a Kubernetes object name. It is durable: the workspace stores it
// with the attempt, so a server started again can still cancel or inspect
// what an earlier one launched. Empty means the target has no engine-side
// name for the attempt (the local target: its runner is the attempt).
// A handle is opaque to the workspace, never holds a secret and never
// begins with "!" (the workspace marks an attempt it is handing over so).
type Handle string

// Target runs job attempts.
//
// Admit is called at submit time with the job and its resolved environment
// and must refuse, with an error wrapping ErrNotSupported that names the
// field, every job the target cannot honour.
// Capacity is how many attempts may run at once; for a target that
// queues itself (SelfQueueing) it is how many attempts Ferry keeps handed
// to the engine at once, running or waiting there.
// Launch starts a runner for the attempt, or hands the attempt to the
// target's engine, and returns once that is done (not when the job ends),
// with the attempt's handle; a returned error means nothing was started
// and no handle exists. Methods are safe for concurrent use.
type Target interface {
	Type() string
	Admit(job *spec.Job, env *environment.Spec) error
	Capacity() int
	Launch(ctx context.Context, l Launch) (Handle, error)
}

// The optional powers of a target, found by type assertion (as Nomad's
// drivers offer RecoverTask and friends).

// AssignmentCarrier is a target that can hand the attempt's assignment to
// its runner with the launch (Launch.Assignment), when CarriesAssignment
// says so.
type AssignmentCarrier interface {
	CarriesAssignment() bool
}

// Canceller is a target that can end an attempt through its engine, also
// before the attempt's runner started (a Slurm job still pending). Cancel
// is idempotent: a handle the engine no longer knows, or one already
// ended, is not an error. The runner, when it runs, still gets the
// ordinary cancel and its grace from the workspace; Cancel is what reaches
// an attempt no runner speaks for yet.
type Canceller interface {
	Cancel(ctx context.Context, h Handle) error
}

// Phase is where an engine says an attempt is.
type Phase string

const (
	// PhasePending: waiting in the engine's own queue; Reason says why
	// in the engine's words ("Resources", "Priority").
	PhasePending Phase = "Pending"
	// PhaseRunning: the engine started it; its runner reports from now.
	PhaseRunning Phase = "Running"
	// PhaseEnded: the engine ended it; Outcome says how.
	PhaseEnded Phase = "Ended"
	// PhaseGone: the engine does not know the handle (any more).
	PhaseGone Phase = "Gone"
)

// EngineState is what the engine says of one handle.
type EngineState struct {
	Phase Phase
	// Reason is the engine's own words for the phase: why it is pending,
	// or how it ended ("Resources", "TIMEOUT", "NODE_FAIL").
	Reason string
	// Outcome, when the phase is PhaseEnded: the workspace status the
	// attempt ends with, as the engine saw it (Completed, Failed,
	// Canceled), used only when the runner never reported one.
	Outcome string
	// Requeue, when the phase is PhaseEnded: the engine took the attempt
	// away (preemption) and the job should get a new attempt instead of
	// failing.
	Requeue  bool
	ExitCode *int
	// Runner, when the phase is PhaseRunning, names where the engine
	// started the attempt's runner ("pod train-1-0-x7k2q"), for the
	// job's reason while that runner has not reached the server; ""
	// when the engine cannot say.
	Runner string
}

// Inspector is a target that can say what its engine did with handles:
// after a server restart the workspace reconciles every stored handle
// with it, and a self-queueing target's pending attempts take their queue
// reason from it. Handles missing from the answer are unknown to the
// engine (as PhaseGone). One call asks about many handles, so an engine
// with a batch query (squeue) answers with one.
type Inspector interface {
	Inspect(ctx context.Context, hs []Handle) (map[Handle]EngineState, error)
}

// SelfQueueing is a target whose engine queues attempts itself (Slurm,
// Kubernetes): an attempt handed to it may wait there for a long time.
// Such an attempt is Queued in Ferry, with the engine's reason, and is
// not failed by runner lease expiry until its runner has started.
type SelfQueueing interface {
	QueuesItself() bool
}

// Checker is a target that checks, when its compute is created or
// attached and before anything is stored, that its engine answers as the
// compute file says (Slurm: the login node lets Ferry in, sinfo answers,
// the partition exists). It may complete c with what it learned on first
// use (a login node's host key, to be pinned). Its errors name the field
// to fix and never hold a secret.
type Checker interface {
	CheckCompute(ctx context.Context, c *spec.Compute) error
}

// FinalReports is an optional power of a target whose runners keep, on
// the target's machine, the final report they could not deliver (a runner
// that gave up on a silent server). FinalReport returns the report of an
// attempt as JSON, as the runner would have sent it, and true when there
// is one. The workspace asks before it fails a silent attempt as lost.
type FinalReports interface {
	FinalReport(job string, attempt int) ([]byte, bool)
}

// BatchLauncher is a target that hands many attempts to its engine in one
// go (Slurm: one sbatch --array for the attempts that ask for the same
// resources), so that a burst of submissions reaches the engine's queue
// in a few engine calls instead of one call per attempt. LaunchBatch
// returns one result per launch, in the order given; each result means
// what Launch's would (an error: that attempt was not started and has no
// handle). Handles of attempts launched together are distinct and each
// is usable alone (Cancel, Inspect).
type BatchLauncher interface {
	LaunchBatch(ctx context.Context, ls []Launch) []Launched
}

// Launched is one attempt's result of LaunchBatch.
type Launched struct {
	Handle Handle
	Err    error
}

// Attempt names one attempt of a job.
type Attempt struct {
	Job     string
	Attempt int
}

// Finder is a target that can find the handles of attempts whose launch
// was under way when the server stopped (killed before it stored what
// Launch returned): the target keeps, on its side, a record of each
// launch's handle. A restarted server adopts each handle found, so the
// attempt the engine has is the one Ferry follows; attempts not found
// are launched again as new attempts (the engine may still get the old
// one, whose runner is then refused). Attempts missing from the answer
// have no record.
type Finder interface {
	FindHandles(ctx context.Context, as []Attempt) (map[Attempt]Handle, error)
}
