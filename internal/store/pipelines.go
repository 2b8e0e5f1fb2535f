package store

import "context"

// PipelineStep is one step of a pipeline job (Pipeline, the parent job's
// name). Job is the step's own job, "" until it is made; ReuseKey what
// it ran (for reuse by later steps); ReusedFrom the job whose outputs a
// reused step took; State and Reason are those of a step that never got
// a job (skipped, canceled, refused at submit), "" otherwise.
type PipelineStep struct {
	Pipeline   string
	Step       string
	Job        string
	ReuseKey   string
	ReusedFrom string
	State      string
	Reason     string
}

// Pipelines keeps the steps of pipeline jobs. A pipeline is a parent job,
// stored with its steps by CreatePipelineJob and then a job like any other
// (Jobs); each step gets a job of its own when it runs. Its methods are safe
// for concurrent use, and keep the contract common to every part of Store:
// errors wrap ErrNotFound or ErrConflict where those apply, and a returned
// error leaves stored state unchanged.
type Pipelines interface {
	// CreatePipelineJob is CreateJob for a pipeline job's parent, with
	// its steps stored in the same transaction (their Pipeline fields are
	// ignored: they are j's).
	CreatePipelineJob(ctx context.Context, j Job, first Event, steps []PipelineStep) (Job, error)
	// ListPipelineSteps returns a pipeline's steps in the order they were
	// stored; empty for a job that is no pipeline.
	ListPipelineSteps(ctx context.Context, pipeline string) ([]PipelineStep, error)
	// PipelineStepJobs returns the jobs of a pipeline's steps that have
	// one, in one read, keyed by job name; empty (not nil) when none has.
	PipelineStepJobs(ctx context.Context, pipeline string) (map[string]Job, error)
	// UpdatePipelineStep replaces a step's job, reuse key, reused_from,
	// state and reason; ErrNotFound if there is no such step.
	UpdatePipelineStep(ctx context.Context, st PipelineStep) error
	// ActivePipelines returns the names of the pipeline jobs that have not
	// ended (their parent's status is not Completed, Failed or Canceled),
	// in submit order.
	ActivePipelines(ctx context.Context) ([]string, error)
	// ReusableStep returns the job of the newest step stored with reuse
	// key key whose job Completed; ErrNotFound if there is none.
	ReusableStep(ctx context.Context, key string) (string, error)
}
