// Package store defines how Ferry keeps workspace state: compute targets with
// their nodes, scaling events and quotas, jobs with their status history,
// metrics and API tokens.
//
// There is one interface, Store, with an SQLite implementation (sqlite/) and,
// later, a PostgreSQL one. Every implementation must pass storetest.Run, which
// is the executable form of the contract written in the doc comments below.
//
// Blobs (snapshot files, logs, outputs) are not kept here; see package blob.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrNotFound is wrapped by every error that reports a missing record.
var ErrNotFound = errors.New("not found")

// ErrConflict is wrapped by every error that reports a record that already
// exists (a duplicate name).
var ErrConflict = errors.New("already exists")

// ErrNoSpace is wrapped by a write that failed because the disk (or quota)
// under the store is full; nothing of it was stored.
var ErrNoSpace = errors.New("the store's disk is full")

// Compute is a stored compute target. Spec is the validated compute file as
// JSON; the store does not look inside it.
type Compute struct {
	Name     string
	Type     string
	Spec     json.RawMessage
	State    string
	Created  time.Time
	Modified time.Time
	// Status is runtime state the workspace keeps (JSON it owns; nil when
	// none), e.g. the schedule occurrences of an instance that fired.
	Status json.RawMessage
}

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

// Environment is one version of a registered environment. Spec is the
// resolved environment as JSON, opaque to the store; Hash its identity.
type Environment struct {
	Name        string
	Version     string
	Description string
	Spec        json.RawMessage
	Hash        string
	Created     time.Time
}

// Model is one version of a registered model. Its files are the snapshot
// Snapshot (a manifest's id in the blob store); Spec is the rest of the
// model (tags, properties) as JSON, opaque to the store; Hash its identity.
// An archived version is kept but hidden from lists and from "latest".
type Model struct {
	Name        string
	Version     string
	Type        string
	Description string
	Spec        json.RawMessage
	Snapshot    string
	Hash        string
	Archived    bool
	Created     time.Time
}

// DataAsset is one version of a registered data asset (uri_file or
// uri_folder), kept as a Model is: its files are the snapshot Snapshot,
// Spec the rest of it (tags) as JSON, opaque to the store, Hash its
// identity. An archived version is kept but hidden from lists and from
// "latest".
type DataAsset struct {
	Name        string
	Version     string
	Type        string
	Description string
	Spec        json.RawMessage
	Snapshot    string
	Hash        string
	Archived    bool
	Created     time.Time
}

// Component is one version of a registered command component. Spec is
// the component as JSON, opaque to the store; CodeSnapshot its uploaded
// code; Hash its content digest.
type Component struct {
	Name         string
	Version      string
	Description  string
	Spec         json.RawMessage
	CodeSnapshot string
	Hash         string
	Created      time.Time
}

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

// Datastore is a place job inputs name as azureml://datastores/NAME/paths/PATH.
// Spec is its file as JSON (never with credentials), opaque to the store.
type Datastore struct {
	Name    string
	Type    string
	Spec    json.RawMessage
	Created time.Time
	Updated time.Time
}

// Endpoint is an online endpoint. Spec is its file as JSON, opaque to the
// store; State its provisioning state. PrimaryKey and SecondaryKey are
// sealed by the workspace before they reach the store, which keeps them as
// given.
type Endpoint struct {
	Name         string
	Spec         json.RawMessage
	State        string
	PrimaryKey   string
	SecondaryKey string
	Created      time.Time
	Updated      time.Time
}

// Deployment is an online deployment of an endpoint. Spec and Replicas
// are JSON the workspace owns (its record of the deployment, and of the
// jobs that serve it), opaque to the store; State is its provisioning
// state, Reason why it failed.
type Deployment struct {
	Endpoint string
	Name     string
	Spec     json.RawMessage
	State    string
	Reason   string
	Replicas json.RawMessage
	Created  time.Time
	Updated  time.Time
}

// Schedule is a job schedule. Spec (the schedule file and its trigger)
// and Job (the submission each firing makes) are JSON the workspace owns,
// opaque to the store. NextFire is the occurrence the schedule fires next
// (zero: none, it has ended); LastFired the last occurrence it fired
// (zero: none yet), which FireSchedule moves forward only, so an
// occurrence is never fired twice; LastJob the job that firing created.
// LastError says why the last occurrence created no job ("" when it did).
type Schedule struct {
	Name      string
	Spec      json.RawMessage
	Job       json.RawMessage
	Enabled   bool
	NextFire  time.Time
	LastFired time.Time
	LastJob   string
	LastError string
	CreatedBy string
	Created   time.Time
	Updated   time.Time
}

// BatchEndpoint is a batch endpoint. Spec is the workspace's record of it
// as JSON, Jobs the JSON list of the jobs its invocations made; both are
// opaque to the store.
type BatchEndpoint struct {
	Name    string
	Spec    json.RawMessage
	Jobs    json.RawMessage
	Created time.Time
	Updated time.Time
}

// BatchDeployment is a deployment of a batch endpoint. Spec is the
// workspace's record of it as JSON, opaque to the store.
type BatchDeployment struct {
	Endpoint string
	Name     string
	Spec     json.RawMessage
	Created  time.Time
	Updated  time.Time
}

// Node is a machine of a pool compute (a cluster or an instance). State and
// Reason are owned by the workspace; Facts is JSON the store keeps opaque.
type Node struct {
	Name      string // unique in the workspace
	Compute   string
	State     string
	Reason    string
	Size      string
	Machine   string // the provider's id of the machine
	Address   string
	Facts     json.RawMessage
	Created   time.Time // when its launch was asked
	Joined    time.Time // zero until its agent joined
	Heartbeat time.Time // zero until its first heartbeat
	IdleSince time.Time // zero while busy
}

// ComputeEvent is one scaling or health event of a compute, for people.
type ComputeEvent struct {
	Compute string
	Time    time.Time
	Kind    string // e.g. scale_up, scale_down, launch_failed, node_lost, resize
	Message string
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

// Metric is one logged value of a job's metric.
type Metric struct {
	Name  string
	Value float64
	Step  int64
	Time  time.Time
}

// RunValue is one of a job's MLflow params or tags: Kind is "param" or
// "tag"; a key has one value, the last one set.
type RunValue struct {
	Kind  string
	Key   string
	Value string
}

// SweepTrial is one trial of a sweep job: its index (from 0), the name
// of its job and its parameters (JSON owned by the workspace), stored
// before the job is created.
type SweepTrial struct {
	Sweep   string
	Index   int
	Job     string
	Params  json.RawMessage
	Created time.Time
}

// Token is an API token. Only the SHA-256 of the secret is stored.
type Token struct {
	Hash    string // hex SHA-256 of the secret
	Kind    string // "owner" or "run"
	Subject string // user name for owner tokens, job name for run tokens
	Attempt int    // the attempt a run token belongs to
	Created time.Time
}

// Session is a signed-in studio session. Neither its id (the cookie) nor
// the token it acts with is stored: only their SHA-256 (auth.Hash), so
// that a copy of the database signs no one in.
type Session struct {
	Hash      string // hex SHA-256 of the session's id, the cookie's value
	TokenHash string // the Hash of the workspace token it acts with
	// CSRF is the session's CSRF token: random, made with the session,
	// and put in the forms of its pages. Alone it grants nothing.
	CSRF    string
	Created time.Time
	Expires time.Time
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

// Store keeps workspace state durably. All methods are safe for concurrent
// use. Errors wrap ErrNotFound or ErrConflict where those apply, so callers
// test them with errors.Is. A returned error leaves stored state unchanged.
//
// Every implementation makes the same choices, which storetest checks:
// times are kept in UTC to the microsecond (finer parts are cut off) and the
// zero time reads back as zero; JSON fields (Spec, Inputs, Outputs,
// Environment, Placement, Facts) come back byte for byte; UpdateJob ignores
// changes to Name and Seq, and UpdateCompute and UpdateNode to Name;
// events are stored under the job they are for; ListEvents, ListMetrics and
// LatestMetrics report ErrNotFound for a missing job; empty results are
// empty, not nil; NaN and infinite metric values round-trip. The function
// given to UpdateJob, UpdateCompute or UpdateNode may read through the store
// but must not write through it.
type Store interface {
	// CreateCompute stores a new compute target; ErrConflict if the name is taken.
	CreateCompute(ctx context.Context, c Compute) error
	// GetCompute returns one target; ErrNotFound if there is none by that name.
	GetCompute(ctx context.Context, name string) (Compute, error)
	// ListComputes returns every target ordered by name.
	ListComputes(ctx context.Context) ([]Compute, error)
	// UpdateCompute reads, modifies with fn and writes back one target in a
	// single transaction. If fn returns an error nothing is written and that
	// error is returned as is.
	UpdateCompute(ctx context.Context, name string, fn func(*Compute) error) (Compute, error)
	// DeleteCompute removes a target; ErrNotFound if there is none. Its
	// nodes and events stay: removing nodes is the workspace's decision, as
	// it must first give their machines back.
	DeleteCompute(ctx context.Context, name string) error

	// CreateNode stores a new node; ErrConflict if the name is taken. The
	// compute it names need not exist.
	CreateNode(ctx context.Context, n Node) error
	// GetNode returns one node; ErrNotFound if there is none by that name.
	GetNode(ctx context.Context, name string) (Node, error)
	// ListNodes returns the nodes of compute, or of every compute when it is
	// empty, ordered by Created and then by Name.
	ListNodes(ctx context.Context, compute string) ([]Node, error)
	// UpdateNode reads, modifies with fn and writes back one node in a
	// single transaction; ErrNotFound if there is none, and then fn is not
	// called. A change fn makes to Name is ignored. If fn returns an error
	// nothing is written and that error is returned as is. Concurrent
	// UpdateNode calls on one node are serialised.
	UpdateNode(ctx context.Context, name string, fn func(*Node) error) (Node, error)
	// DeleteNode removes a node; ErrNotFound if there is none.
	DeleteNode(ctx context.Context, name string) error

	// AddComputeEvent stores an event of e.Compute, which need not exist.
	AddComputeEvent(ctx context.Context, e ComputeEvent) error
	// ListComputeEvents returns the newest limit events of compute (all of
	// them if limit <= 0), oldest first; events with equal times are in the
	// order they were added. A compute without events, or with no such
	// compute, has an empty list, not ErrNotFound: events outlive their
	// compute.
	ListComputeEvents(ctx context.Context, compute string, limit int) ([]ComputeEvent, error)

	// SetQuota sets the core limit of a size family, replacing the default
	// or an earlier limit. The store does not check the number.
	SetQuota(ctx context.Context, family string, cores int) error
	// DeleteQuota puts a family back to its default limit; ErrNotFound if
	// no limit was set for it.
	DeleteQuota(ctx context.Context, family string) error
	// ListQuotas returns every limit set, by family.
	ListQuotas(ctx context.Context) (map[string]int, error)
	// SetSizeEnabled enables or disables a restricted size. Enabling an
	// enabled size or disabling a disabled one is not an error.
	SetSizeEnabled(ctx context.Context, size string, enabled bool) error
	// ListEnabledSizes returns the enabled restricted sizes, sorted.
	ListEnabledSizes(ctx context.Context) ([]string, error)

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

	// AddMetrics appends metric values to a job; ErrNotFound if no such job.
	AddMetrics(ctx context.Context, job string, ms []Metric) error
	// AddNumberedMetrics appends ms, numbered first, first+1, ... in the
	// sequence of the runner of node rank of the job's attempt, skipping
	// those numbered at or below the highest number stored for that
	// sequence (an earlier call stored them), all in one transaction. It
	// returns the highest number stored; ErrNotFound if no such job. first
	// must be ≥ 1.
	AddNumberedMetrics(ctx context.Context, job string, attempt, rank int, first int64, ms []Metric) (int64, error)
	// ListMetrics returns a job's values of one metric (all metrics if name
	// is empty) in the order they were added.
	ListMetrics(ctx context.Context, job, name string) ([]Metric, error)
	// LatestMetrics returns, per metric name, the value added last.
	LatestMetrics(ctx context.Context, job string) (map[string]Metric, error)
	// LatestMetricsOf returns what LatestMetrics returns for each of jobs,
	// keyed by job, in one read: a list of jobs shows their metrics without
	// a query per job. A job that has no metrics, or does not exist, has no
	// key; the map is empty, never nil.
	LatestMetricsOf(ctx context.Context, jobs []string) (map[string]map[string]Metric, error)
	// SetRunValues stores a job's params and tags, replacing the value
	// already under a kind and key, all in one transaction; ErrNotFound if
	// no such job.
	SetRunValues(ctx context.Context, job string, vs []RunValue) error
	// ListRunValues returns a job's params and tags ordered by kind, then
	// key; empty, never nil, when it has none; ErrNotFound if no such job.
	ListRunValues(ctx context.Context, job string) ([]RunValue, error)

	// CreateEnvironment stores a version of an environment; ErrConflict
	// if that name and version exist.
	CreateEnvironment(ctx context.Context, e Environment) error
	// GetEnvironment returns one version; ErrNotFound if there is none.
	GetEnvironment(ctx context.Context, name, version string) (Environment, error)
	// ListEnvironments returns every version of the named environment, or
	// of all environments when name is empty, ordered by name and then by
	// registration (so a name's last entry is its latest version).
	ListEnvironments(ctx context.Context, name string) ([]Environment, error)
	// CreateModel stores a version of a model; ErrConflict if that name
	// and version exist.
	CreateModel(ctx context.Context, m Model) error
	// GetModel returns one version, archived or not; ErrNotFound if there
	// is none.
	GetModel(ctx context.Context, name, version string) (Model, error)
	// ListModels returns every version of the named model, or of all
	// models when name is empty, archived ones too, ordered by name and
	// then by registration.
	ListModels(ctx context.Context, name string) ([]Model, error)
	// SetModelArchived archives (or restores) one version and returns it;
	// ErrNotFound if there is none. Setting the state it has is not an
	// error.
	SetModelArchived(ctx context.Context, name, version string, archived bool) (Model, error)
	// CreateData stores a version of a data asset; ErrConflict if that
	// name and version exist.
	CreateData(ctx context.Context, d DataAsset) error
	// GetData returns one version, archived or not; ErrNotFound if there
	// is none.
	GetData(ctx context.Context, name, version string) (DataAsset, error)
	// ListData returns every version of the named data asset, or of all
	// of them when name is empty, archived ones too, ordered by name and
	// then by registration.
	ListData(ctx context.Context, name string) ([]DataAsset, error)
	// SetDataArchived archives (or restores) one version and returns it;
	// ErrNotFound if there is none. Setting the state it has is not an
	// error.
	SetDataArchived(ctx context.Context, name, version string, archived bool) (DataAsset, error)

	// CreateComponent stores a version of a command component;
	// ErrConflict if that name and version exist.
	CreateComponent(ctx context.Context, c Component) error
	// GetComponent returns one version; ErrNotFound if there is none.
	GetComponent(ctx context.Context, name, version string) (Component, error)
	// ListComponents returns every version of the named component, or of
	// all components when name is empty, ordered by name and then by
	// registration.
	ListComponents(ctx context.Context, name string) ([]Component, error)

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
	// PutDatastore stores a datastore, replacing the type and spec (and
	// Updated, keeping Created) of one by that name.
	PutDatastore(ctx context.Context, d Datastore) error
	// GetDatastore returns a datastore; ErrNotFound if there is none.
	GetDatastore(ctx context.Context, name string) (Datastore, error)
	// ListDatastores returns every datastore, ordered by name.
	ListDatastores(ctx context.Context) ([]Datastore, error)
	// DeleteDatastore removes a datastore; ErrNotFound if there is none.
	DeleteDatastore(ctx context.Context, name string) error

	// CreateEndpoint stores an online endpoint; ErrConflict if the name
	// is taken.
	CreateEndpoint(ctx context.Context, e Endpoint) error
	// GetEndpoint returns an endpoint; ErrNotFound if there is none.
	GetEndpoint(ctx context.Context, name string) (Endpoint, error)
	// ListEndpoints returns every endpoint, ordered by name.
	ListEndpoints(ctx context.Context) ([]Endpoint, error)
	// UpdateEndpoint replaces an endpoint's spec, state, keys and updated
	// time (its created time stays); ErrNotFound if there is none.
	UpdateEndpoint(ctx context.Context, e Endpoint) error
	// DeleteEndpoint removes an endpoint; ErrNotFound if there is none.
	DeleteEndpoint(ctx context.Context, name string) error

	// CreateDeployment stores an online deployment; ErrConflict if the
	// endpoint has one of that name.
	CreateDeployment(ctx context.Context, d Deployment) error
	// GetDeployment returns a deployment; ErrNotFound if there is none.
	GetDeployment(ctx context.Context, endpoint, name string) (Deployment, error)
	// ListDeployments returns an endpoint's deployments, or every
	// endpoint's when endpoint is empty, ordered by endpoint and name.
	ListDeployments(ctx context.Context, endpoint string) ([]Deployment, error)
	// UpdateDeployment replaces a deployment's spec, state, reason,
	// replicas and updated time (its created time stays); ErrNotFound if
	// there is none.
	UpdateDeployment(ctx context.Context, d Deployment) error
	// DeleteDeployment removes a deployment; ErrNotFound if there is none.
	DeleteDeployment(ctx context.Context, endpoint, name string) error

	// CreateSweep records that the job named name is a sweep the server
	// drives; ErrConflict if it is recorded already.
	CreateSweep(ctx context.Context, name string, created time.Time) error
	// ListOpenSweeps returns the names of the sweeps not marked done, in
	// the order they were created.
	ListOpenSweeps(ctx context.Context) ([]string, error)
	// SweepDone marks a sweep done; ErrNotFound if there is none.
	SweepDone(ctx context.Context, name string) error
	// AddSweepTrial stores a trial of a sweep; ErrConflict if the sweep
	// has a trial of that index.
	AddSweepTrial(ctx context.Context, t SweepTrial) error
	// ListSweepTrials returns a sweep's trials by index, empty when it has
	// none (or there is no such sweep).
	ListSweepTrials(ctx context.Context, sweep string) ([]SweepTrial, error)

	// CreateSchedule stores a schedule; ErrConflict if the name is taken.
	CreateSchedule(ctx context.Context, sc Schedule) error
	// GetSchedule returns a schedule; ErrNotFound if there is none.
	GetSchedule(ctx context.Context, name string) (Schedule, error)
	// ListSchedules returns every schedule, ordered by name.
	ListSchedules(ctx context.Context) ([]Schedule, error)
	// UpdateSchedule reads, modifies with fn and writes back one schedule
	// in a single transaction; ErrNotFound if there is none, and then fn
	// is not called. A change fn makes to Name or Created is ignored, and
	// one that moves LastFired back is refused with ErrConflict. If fn
	// returns an error nothing is written and that error is returned as is.
	UpdateSchedule(ctx context.Context, name string, fn func(*Schedule) error) (Schedule, error)
	// DeleteSchedule removes a schedule; ErrNotFound if there is none.
	// The jobs it fired stay.
	DeleteSchedule(ctx context.Context, name string) error
	// FireSchedule stores the job that occurrence of schedule fires, with
	// its first event, and sets the schedule's LastFired to occurrence,
	// LastJob to the job, LastError to "" and NextFire to next, all in one
	// transaction: a firing is stored whole or not at all. ErrNotFound if
	// there is no such schedule; ErrConflict, with nothing written, if the
	// schedule is disabled, has fired occurrence or a later one, or the
	// job's name is taken. When j is a pipeline job's parent, steps are
	// its steps, stored as CreatePipelineJob stores them; nil otherwise.
	FireSchedule(ctx context.Context, schedule string, occurrence, next time.Time, j Job, first Event, steps []PipelineStep) (Job, error)
	// CreateBatchEndpoint stores a batch endpoint; ErrConflict if the
	// name is taken.
	CreateBatchEndpoint(ctx context.Context, e BatchEndpoint) error
	// GetBatchEndpoint returns a batch endpoint; ErrNotFound if there is
	// none.
	GetBatchEndpoint(ctx context.Context, name string) (BatchEndpoint, error)
	// ListBatchEndpoints returns every batch endpoint, ordered by name.
	ListBatchEndpoints(ctx context.Context) ([]BatchEndpoint, error)
	// UpdateBatchEndpoint replaces a batch endpoint's spec, jobs and
	// updated time (its created time stays); ErrNotFound if there is none.
	UpdateBatchEndpoint(ctx context.Context, e BatchEndpoint) error
	// DeleteBatchEndpoint removes a batch endpoint and its deployments in
	// one transaction; ErrNotFound if there is none.
	DeleteBatchEndpoint(ctx context.Context, name string) error
	// CreateBatchDeployment stores a batch deployment; ErrConflict if the
	// endpoint has one of that name.
	CreateBatchDeployment(ctx context.Context, d BatchDeployment) error
	// GetBatchDeployment returns a batch deployment; ErrNotFound if there
	// is none.
	GetBatchDeployment(ctx context.Context, endpoint, name string) (BatchDeployment, error)
	// ListBatchDeployments returns a batch endpoint's deployments, ordered
	// by name.
	ListBatchDeployments(ctx context.Context, endpoint string) ([]BatchDeployment, error)
	// UpdateBatchDeployment replaces a batch deployment's spec and updated
	// time (its created time stays); ErrNotFound if there is none.
	UpdateBatchDeployment(ctx context.Context, d BatchDeployment) error
	// DeleteBatchDeployment removes a batch deployment; ErrNotFound if
	// there is none.
	DeleteBatchDeployment(ctx context.Context, endpoint, name string) error

	// CreateToken stores a token; ErrConflict if the hash exists.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token; ErrNotFound if there is none.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// DeleteTokens removes every token of the given kind and subject.
	DeleteTokens(ctx context.Context, kind, subject string) error

	// CreateSession stores a studio session; ErrConflict if its hash
	// exists.
	CreateSession(ctx context.Context, s Session) error
	// SessionByHash finds a session by the hash of its id, expired or
	// not; ErrNotFound if there is none.
	SessionByHash(ctx context.Context, hash string) (Session, error)
	// DeleteSession removes a session; deleting none is not an error.
	DeleteSession(ctx context.Context, hash string) error
	// DeleteExpiredSessions removes the sessions that expire at or
	// before now.
	DeleteExpiredSessions(ctx context.Context, now time.Time) error

	// Close releases the store.
	Close() error
}

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
