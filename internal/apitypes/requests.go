package apitypes

import (
	"encoding/json"

	"github.com/ferry-ml/ferry/internal/spec"
)

// Problem is the JSON error document every failed call returns.
type Problem struct {
	Type   string             `json:"type"`
	Title  string             `json:"title"`
	Status int                `json:"status"`
	Detail string             `json:"detail"`
	Errors []*spec.FieldError `json:"errors,omitempty"`
}

// ResizeRequest is the body of POST /v1/computes/{name}/resize.
type ResizeRequest struct {
	MinInstances            *int `json:"min_instances,omitempty"`
	MaxInstances            *int `json:"max_instances,omitempty"`
	IdleTimeBeforeScaleDown *int `json:"idle_time_before_scale_down,omitempty"`
}

// EnvironmentRequest is the body of POST /v1/environments.
type EnvironmentRequest struct {
	Spec json.RawMessage `json:"spec"`
	// ContextSnapshot holds the files the environment refers to.
	ContextSnapshot string `json:"context_snapshot,omitempty"`
}

// JobRequest is the body of POST /v1/jobs.
type JobRequest struct {
	Spec           json.RawMessage   `json:"spec"`
	CodeSnapshot   string            `json:"code_snapshot,omitempty"`
	InputSnapshots map[string]string `json:"input_snapshots,omitempty"`
	// EnvironmentSnapshot holds the files an inline environment refers to
	// (its conda file, requirements file or build context).
	EnvironmentSnapshot string `json:"environment_snapshot,omitempty"`
}

// MetricsRequest is the body of POST /v1/jobs/{name}/metrics: one metric
// inline or a list.
type MetricsRequest struct {
	Metric
	Metrics []Metric `json:"metrics,omitempty"`
	// Seq, set by a runner, numbers the first of the values in its
	// sequence (from 1; one per attempt and node rank, ?rank=): values
	// already recorded under their numbers are skipped, so a batch sent
	// again is recorded once.
	Seq int64 `json:"seq,omitempty"`
}

// LogSize is the reply to the runner's log calls.
type LogSize struct {
	Size int64 `json:"size"`
}

// DigestList is the body and reply of POST /v1/blobs/missing.
type DigestList struct {
	Digests []string `json:"digests"`
}

// BlobCount is the reply of POST /v1/blobs/batch.
type BlobCount struct {
	Blobs int `json:"blobs"`
}

// SnapshotID is the reply of POST /v1/snapshots.
type SnapshotID struct {
	ID string `json:"id"`
}

// BatchDeploymentRequest is the body of POST and PUT
// /v1/batch-endpoints/{endpoint}/deployments[/{name}].
type BatchDeploymentRequest struct {
	Spec    json.RawMessage   `json:"spec"`
	Uploads DeploymentUploads `json:"uploads"`
	// SetDefault makes it the endpoint's default deployment.
	SetDefault bool `json:"set_default,omitempty"`
}

// DataRequest is the body of POST /v1/data.
type DataRequest struct {
	Spec json.RawMessage `json:"spec"`
	// Snapshot holds the data's files (POST /v1/snapshots).
	Snapshot string `json:"snapshot"`
}

// DatastoreRequest is the body of POST /v1/datastores.
type DatastoreRequest struct {
	Spec json.RawMessage `json:"spec"`
}

// DeploymentRequest is the body of POST and PUT
// /v1/online-endpoints/{endpoint}/deployments[/{name}].
type DeploymentRequest struct {
	Spec    json.RawMessage   `json:"spec"`
	Uploads DeploymentUploads `json:"uploads"`
	// Local runs the deployment's one replica on the server's local
	// target instead of nodes of its instance_type; create only.
	Local bool `json:"local,omitempty"`
}

// RegenerateKeysRequest is the body of POST
// /v1/online-endpoints/{name}/regenerate-keys.
type RegenerateKeysRequest struct {
	KeyType string `json:"key_type"` // primary (the default) or secondary
}

// ModelRequest is the body of POST /v1/models.
type ModelRequest struct {
	Spec json.RawMessage `json:"spec"`
	// Snapshot holds the model's files (POST /v1/snapshots).
	Snapshot string `json:"snapshot"`
}

// ComponentRequest is the body of POST /v1/components.
type ComponentRequest struct {
	Spec json.RawMessage `json:"spec"`
}

// PipelineJobRequest is the body of POST /v1/pipeline-jobs.
type PipelineJobRequest struct {
	Spec json.RawMessage `json:"spec"`
	// InputSnapshots hold the uploaded local data inputs, keyed
	// inputs.NAME (the pipeline's) or jobs.STEP.inputs.NAME (a step's).
	InputSnapshots map[string]string `json:"input_snapshots,omitempty"`
}

// ScheduleRequest is the body of POST /v1/schedules.
type ScheduleRequest struct {
	Spec json.RawMessage `json:"spec"`
	// Job is the job each firing submits, with its snapshots uploaded.
	Job *JobRequest `json:"job,omitempty"`
	// Pipeline is the pipeline job each firing submits instead, as POST
	// /v1/pipeline-jobs takes it.
	Pipeline *PipelineJobRequest `json:"pipeline,omitempty"`
	// CopyJob names a job of the workspace whose spec and snapshots each
	// firing submits again (create_job: azureml:JOB).
	CopyJob string `json:"copy_job,omitempty"`
	// Overrides are fields laid over the copied job's (create_job's
	// other fields beside job: azureml:JOB).
	Overrides map[string]any `json:"overrides,omitempty"`
}

// ReferencesRequest is the body of POST /v1/references/check.
type ReferencesRequest struct {
	References []Reference `json:"references"`
}

// ReferencesAnswer is its answer.
type ReferencesAnswer struct {
	Problems []ReferenceProblem `json:"problems"`
}
