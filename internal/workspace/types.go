package workspace

import (
	"context"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/store"

	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// activeStatuses are those of a job whose runner holds a slot.
var activeStatuses = []string{apitypes.StatusPreparing, apitypes.StatusRunning, apitypes.StatusFinalizing, apitypes.StatusCancelRequested}

// Submission is a job to create: its spec plus the snapshots the client
// uploaded for its code and its local data inputs.
type Submission struct {
	Spec           *spec.Job
	CodeSnapshot   string
	InputSnapshots map[string]string
	// EnvironmentSnapshot holds the files an inline environment refers to.
	EnvironmentSnapshot string

	// DryRun checks the submission as SubmitJob would and stores nothing.
	DryRun bool
	// Create, when set, stores the job's record in place of the store's
	// CreateJob: a schedule's firing stores it with the schedule's record
	// in one transaction.
	Create func(ctx context.Context, rec store.Job, first store.Event) (store.Job, error)
}

// maxRunningFor bounds the Running step's age a final report may claim
// (the runner holds the step for milliseconds; a larger claim is taken as
// none, the step recorded at the end).
const maxRunningFor = 10 * time.Second

// runningFor is how long before r the command started, as the report
// claims it, within bounds.
func runningFor(r apitypes.Report) time.Duration {
	d := time.Duration(r.RunningForUS) * time.Microsecond
	if d < 0 || d > maxRunningFor {
		return 0
	}
	return d
}
