package apitypes

import (
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// SweepView is what `job show` adds for a sweep job: its objective and
// its trials ranked by it.
type SweepView struct {
	PrimaryMetric       string `json:"primary_metric"`
	Goal                string `json:"goal"`
	Sampling            string `json:"sampling_algorithm"`
	MaxTotalTrials      int    `json:"max_total_trials"`
	MaxConcurrentTrials int    `json:"max_concurrent_trials"`
	// TrialCompute is the compute the trials run on ("" before the first).
	TrialCompute string `json:"trial_compute,omitempty"`
	// Best is the name of the trial with the best value of the primary
	// metric, "" while none has logged it.
	Best string `json:"best_trial,omitempty"`
	// Trials are ranked: those with a value best first (the best value
	// each logged), then the others by index.
	Trials []SweepTrialView `json:"trials"`
}

// SweepTrialView is one trial of a sweep.
type SweepTrialView struct {
	Name         string         `json:"name"`
	Index        int            `json:"index"`
	Status       string         `json:"status"`
	StatusReason string         `json:"status_reason,omitempty"`
	Params       map[string]any `json:"params"`
	Objective    *float64       `json:"objective,omitempty"`
	Rank         int            `json:"rank,omitempty"` // 1 for the best; 0 without a value
}

// StatusNotStarted is a pipeline job's status before its first step is
// made (Azure's name). A pipeline job then goes Running, and ends
// Completed, Failed or Canceled; CancelRequested while its steps stop.
const StatusNotStarted = "NotStarted"

// States of a step that never got a job of its own.
const (
	StepSkipped  = "Skipped"  // a step it depends on did not complete
	StepCanceled = "Canceled" // the pipeline was canceled or failed first
	StepFailed   = "Failed"   // the step's job could not be made
)

// PipelineStep is a step of a pipeline job as the API shows it.
type PipelineStep struct {
	Name   string `json:"name"`
	Job    string `json:"job,omitempty"` // the step's own job
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Compute is where the step runs (or would have).
	Compute string `json:"compute,omitempty"`
	// ReusedFrom is the job whose outputs the step took instead of
	// running: same component, inputs and environment.
	ReusedFrom string `json:"reused_from,omitempty"`
	// DependsOn are the steps whose outputs it takes.
	DependsOn []string `json:"depends_on,omitempty"`
	// Sweep says the step is a sweep (type: sweep): its job is a sweep
	// job, whose reason tells its trials' progress and best trial.
	Sweep bool `json:"sweep,omitempty"`
}

// Schedule is a job schedule as the API shows it.
type Schedule struct {
	Name        string            `json:"name"`
	DisplayName string            `json:"display_name,omitempty"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Enabled     bool              `json:"enabled"`
	// Trigger describes when it fires ("cron 0 * * * * (UTC)").
	Trigger   string             `json:"trigger"`
	Spec      *spec.ScheduleFile `json:"spec,omitempty"`
	NextFire  *time.Time         `json:"next_fire,omitempty"`
	LastFired *time.Time         `json:"last_fired,omitempty"`
	LastJob   string             `json:"last_job,omitempty"`
	LastError string             `json:"last_error,omitempty"`
	// JobType and Compute are the fired job's.
	JobType string    `json:"job_type,omitempty"`
	Compute string    `json:"compute,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}
