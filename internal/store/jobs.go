package store

import (
	"context"
	"encoding/json"
	"time"
)

// Job is one submitted job. Spec, Inputs and Outputs are JSON owned by the
// workspace service; the store keeps them opaque. Zero times mean "not yet".
type Job struct {
	Name           string
	Seq            int64 // submit order, assigned by CreateJob, strictly increasing
	DisplayName    string
	ExperimentName string
	Compute        string
	Status         string
	StatusReason   string
	Priority       int
	Attempt        int
	ExitCode       *int
	Error          string
	CreatedBy      string
	CancelBy       string
	Spec           json.RawMessage
	CodeSnapshot   string
	Inputs         json.RawMessage
	Outputs        json.RawMessage
	Environment    json.RawMessage // the resolved environment
	Placement      json.RawMessage // where the current attempt runs (JSON owned by the workspace)
	Created        time.Time
	Started        time.Time
	Ended          time.Time
	Heartbeat      time.Time
	Handle         string // the current attempt's name in its target's engine (a Slurm job id); "" when none
}

// Event is one stored status change of a job.
type Event struct {
	Job    string
	Time   time.Time
	From   string
	To     string
	Reason string
}

// Preemption is one attempt of a job that ended because the node it ran
// on was preempted; the job was queued again as a new attempt.
type Preemption struct {
	Job     string
	Attempt int
	Node    string
	Time    time.Time
	Reason  string
}

// JobFilter selects jobs for ListJobs. Zero fields select everything.
type JobFilter struct {
	Statuses []string // any of these
	Compute  string
	// Experiment selects the jobs of one experiment (experiment_name).
	Experiment string
	// Before is a job's name: only jobs submitted before it are selected
	// (by Seq), the keyset of a page of a Newest list that ended with it.
	// A name that is not stored selects nothing.
	Before string
	Limit  int  // at most this many; 0 means no limit
	Newest bool // order by Seq descending instead of ascending
	// ByPriority orders by Priority descending, then Seq ascending: the
	// order the dispatcher starts queued jobs in. Newest is then ignored.
	ByPriority bool
	// Handle selects by whether the job's current attempt has an engine
	// handle; HandleAny (the zero value) selects both.
	Handle HandleFilter
}

// HandleFilter selects jobs by whether their Handle is set.
type HandleFilter int

// The values of JobFilter.Handle.
const (
	HandleAny   HandleFilter = iota // with or without a handle
	HandleSet                       // only jobs whose Handle is not ""
	HandleUnset                     // only jobs whose Handle is ""
)

// JobChange is what UpdateJobWith writes beside a job's record.
type JobChange struct {
	// Events are stored in this order, as events of the job.
	Events []Event
	// CreateToken, when not nil, is stored.
	CreateToken *Token
	// DeleteTokens, when not empty, is a kind of token: every token of
	// that kind whose subject is the job is removed, as
	// DeleteTokens(kind, job) does.
	DeleteTokens string
}

// Jobs keeps jobs: their records, the status events each went through and
// the attempts that ended in a preemption. Its methods are safe for
// concurrent use, and keep the contract common to every part of Store:
// errors wrap ErrNotFound or ErrConflict where those apply, and a returned
// error leaves stored state unchanged. UpdateJob ignores changes to Name and
// Seq, and the function given to it may read through the store but must not
// write through it; the events given are stored under the job they are for;
// ListEvents and ListPreemptions report ErrNotFound for a missing job.
// UpdateJobs and UpdateJobWith also write a job's run tokens (read through
// Tokens) in the transaction of its record: a run token is stored with its
// attempt and removed with the attempt's end.
type Jobs interface {
	// CreateJob stores a new job with its first event in one transaction and
	// returns it with Seq assigned; ErrConflict if the name is taken.
	CreateJob(ctx context.Context, j Job, first Event) (Job, error)
	// GetJob returns one job; ErrNotFound if there is none by that name.
	GetJob(ctx context.Context, name string) (Job, error)
	// ListJobs returns the jobs the filter selects, ordered by Seq.
	ListJobs(ctx context.Context, f JobFilter) ([]Job, error)
	// CountJobs returns, per compute, how many jobs have one of statuses
	// (every status when statuses is empty). A compute with none has no
	// key; the map is empty, never nil. The dispatcher asks it on every
	// pass, where reading the jobs themselves was a cost of its own.
	CountJobs(ctx context.Context, statuses []string) (map[string]int, error)
	// UpdateJob reads, modifies with fn and writes back one job in a single
	// transaction. If fn returns a non-nil event it is stored in the same
	// transaction. If fn returns an error nothing is written and that error
	// is returned as is. Concurrent UpdateJob calls on one job are serialised.
	UpdateJob(ctx context.Context, name string, fn func(*Job) (*Event, error)) (Job, error)
	// UpdateJobs is UpdateJobWith for each of names in turn, all in one
	// transaction, so that a batch of changes (a dispatcher's hand-off:
	// attempts and their run tokens) costs one commit. An error fn
	// returns for a job, or ErrNotFound for a missing one, leaves that job
	// unchanged and is its entry of errs; the other jobs are written.
	// jobs[i] is names[i] as written (or as read, when errs[i] is not
	// nil). err is the transaction's own (a token that cannot be created
	// is one): when it is not nil, nothing was written.
	UpdateJobs(ctx context.Context, names []string, fn func(*Job) (JobChange, error)) (jobs []Job, errs []error, err error)
	// UpdateJobWith is UpdateJob for a change that is more than the
	// record and one event: fn's JobChange (events, a token to create, a
	// kind of the job's tokens to delete) is written in the same
	// transaction as the record, when fn returns no error, whether or not
	// fn changed the record. A run token is then stored with the attempt it
	// belongs to and removed with the attempt's end, one commit each; tokens
	// deleted this way are not found by TokenByHash from the moment
	// UpdateJobWith returns, as with DeleteTokens. If the token cannot be
	// created (ErrConflict if its hash exists) nothing is written.
	UpdateJobWith(ctx context.Context, name string, fn func(*Job) (JobChange, error)) (Job, error)
	// ListEvents returns a job's events in the order they were stored.
	ListEvents(ctx context.Context, job string) ([]Event, error)

	// AddPreemption records that an attempt of p.Job was preempted;
	// ErrNotFound if there is no such job. Recording the same job and
	// attempt again keeps the first record and is not an error.
	AddPreemption(ctx context.Context, p Preemption) error
	// ListPreemptions returns a job's preemptions by attempt, empty when
	// it had none; ErrNotFound if there is no such job.
	ListPreemptions(ctx context.Context, job string) ([]Preemption, error)
}
