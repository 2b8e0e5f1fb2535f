package batch

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/assets"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/serving/batchdriver"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/serving"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// maxBatchJobsKept bounds the jobs an endpoint remembers for list-jobs.
const maxBatchJobsKept = 1000

// Store is the part of the workspace's store batch endpoints read and
// write: the endpoints, with the jobs of their invocations, and their
// deployments.
type Store interface {
	store.BatchEndpoints
}

// Workspace is what batch endpoints need of the job core: jobs to submit
// and show, and the models, environments, computes and snapshots a
// deployment refers to. *workspace.Service is one.
type Workspace interface {
	workspace.Jobs
	// SubmitJob submits an invocation's job as any job is submitted.
	SubmitJob(ctx context.Context, who auth.Principal, sub workspace.Submission) (*apitypes.Job, error)
	// GetJob reads a job as `ferry job show` does.
	GetJob(ctx context.Context, name string, history bool) (*apitypes.Job, error)
	GetCompute(ctx context.Context, name string) (*apitypes.Compute, error)
	ResolveModel(ctx context.Context, ref string) (*apitypes.Model, error)
	ResolveEnvironment(ctx context.Context, e *spec.Environment, snap string) (*environment.Spec, error)
	RequireSnapshot(id, field string) error
	GetSnapshot(ctx context.Context, who auth.Principal, id string) (*snapshot.Manifest, error)
	HasBlob(digest string) bool
	StoreSnapshot(m *snapshot.Manifest, files map[string]string, what string) (string, error)
}

var _ Workspace = (*workspace.Service)(nil)

// Endpoints are a workspace's batch endpoints, their deployments and the
// jobs of their invocations: what the API's batch routes call.
type Endpoints struct {
	ws  Workspace
	st  Store
	log *slog.Logger

	// mu orders the writes of batch endpoints and deployments, and the
	// making of driverSnap, the snapshot of Ferry's batch driver that
	// batch jobs take as an input (driver.go).
	mu         sync.Mutex
	driverSnap string
}

// New makes the batch endpoints of a workspace.
func New(ws Workspace, st Store, log *slog.Logger) *Endpoints {
	return &Endpoints{ws: ws, st: st, log: log}
}

type batchDeploymentDoc struct {
	Spec        *spec.BatchDeployment `json:"spec"`
	ModelID     string                `json:"model_id,omitempty"`
	ModelFolder string                `json:"model_folder,omitempty"`
	apitypes.DeploymentUploads
}

func (s *Endpoints) getBatchEndpointRecord(ctx context.Context, name string) (store.BatchEndpoint, error) {
	rec, err := s.st.GetBatchEndpoint(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return rec, apperr.NotFound("batch endpoint %s does not exist; ferry batch-endpoint list shows those that do", name)
	}
	return rec, err
}

func batchEndpointSpec(rec store.BatchEndpoint) (*spec.BatchEndpoint, error) {
	var e spec.BatchEndpoint
	if err := json.Unmarshal(rec.Spec, &e); err != nil {
		return nil, fmt.Errorf("batch endpoint %s: stored spec: %w", rec.Name, err)
	}
	return &e, nil
}

func (s *Endpoints) batchEndpointView(ctx context.Context, rec store.BatchEndpoint) (*apitypes.BatchEndpoint, error) {
	e, err := batchEndpointSpec(rec)
	if err != nil {
		return nil, err
	}
	ds, err := s.st.ListBatchDeployments(ctx, rec.Name)
	if err != nil {
		return nil, err
	}
	v := &apitypes.BatchEndpoint{BatchEndpoint: e, ProvisioningState: apitypes.DeploymentSucceeded, Deployments: []string{}, Created: rec.Created, Updated: rec.Updated}
	for _, d := range ds {
		v.Deployments = append(v.Deployments, d.Name)
	}
	return v, nil
}

// CreateEndpoint stores a batch endpoint. A default deployment it
// names is made after it (batch-deployment create), as in Azure; until
// then an invocation without a deployment is refused naming it.
func (s *Endpoints) CreateEndpoint(ctx context.Context, who auth.Principal, e *spec.BatchEndpoint) (*apitypes.BatchEndpoint, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot create batch endpoints")
	}
	if e == nil {
		return nil, apperr.Invalid("the batch endpoint is missing")
	}
	if err := e.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	now := s.ws.Now()
	rec := store.BatchEndpoint{Name: e.Name, Spec: raw, Jobs: json.RawMessage("[]"), Created: now, Updated: now}
	if err := s.st.CreateBatchEndpoint(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("batch endpoint %s exists; change it with ferry batch-endpoint update, or pick another name", e.Name)
		}
		return nil, apperr.NoSpace(err, "batch endpoint "+e.Name)
	}
	s.log.Info("batch endpoint created", "endpoint", e.Name)
	return s.batchEndpointView(ctx, rec)
}

// UpdateEndpoint replaces an endpoint's file; a default deployment
// it names must exist.
func (s *Endpoints) UpdateEndpoint(ctx context.Context, who auth.Principal, e *spec.BatchEndpoint) (*apitypes.BatchEndpoint, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot change batch endpoints")
	}
	if e == nil {
		return nil, apperr.Invalid("the batch endpoint is missing")
	}
	if err := e.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.getBatchEndpointRecord(ctx, e.Name)
	if err != nil {
		return nil, err
	}
	if d := e.DefaultDeployment(); d != "" {
		if _, err := s.getBatchDeploymentRecord(ctx, e.Name, d); err != nil {
			return nil, apperr.Invalid("defaults.deployment_name: %v", err)
		}
	}
	if rec.Spec, err = json.Marshal(e); err != nil {
		return nil, err
	}
	rec.Updated = s.ws.Now()
	if err := s.st.UpdateBatchEndpoint(ctx, rec); err != nil {
		return nil, apperr.NoSpace(err, "batch endpoint "+e.Name)
	}
	return s.batchEndpointView(ctx, rec)
}

// GetEndpoint shows a batch endpoint.
func (s *Endpoints) GetEndpoint(ctx context.Context, name string) (*apitypes.BatchEndpoint, error) {
	rec, err := s.getBatchEndpointRecord(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.batchEndpointView(ctx, rec)
}

// ListEndpoints lists the batch endpoints by name.
func (s *Endpoints) ListEndpoints(ctx context.Context) ([]*apitypes.BatchEndpoint, error) {
	recs, err := s.st.ListBatchEndpoints(ctx)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.BatchEndpoint{}
	for _, rec := range recs {
		v, err := s.batchEndpointView(ctx, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// DeleteEndpoint removes a batch endpoint and its deployments. Jobs
// it started keep running and are kept, as every job is.
func (s *Endpoints) DeleteEndpoint(ctx context.Context, who auth.Principal, name string) error {
	if !who.IsOwner() {
		return apperr.Forbidden("a run token cannot delete batch endpoints")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.st.DeleteBatchEndpoint(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return apperr.NotFound("batch endpoint %s does not exist; ferry batch-endpoint list shows those that do", name)
	}
	if err == nil {
		s.log.Info("batch endpoint deleted", "endpoint", name)
	}
	return err
}

func (s *Endpoints) getBatchDeploymentRecord(ctx context.Context, endpoint, name string) (store.BatchDeployment, error) {
	rec, err := s.st.GetBatchDeployment(ctx, endpoint, name)
	if errors.Is(err, store.ErrNotFound) {
		if _, eerr := s.getBatchEndpointRecord(ctx, endpoint); eerr != nil {
			return rec, eerr
		}
		return rec, apperr.NotFound("batch endpoint %s has no deployment %s; ferry batch-deployment list --endpoint-name %s shows those it has", endpoint, name, endpoint)
	}
	return rec, err
}

func decodeBatchDeployment(rec store.BatchDeployment) (*batchDeploymentDoc, error) {
	var doc batchDeploymentDoc
	if err := json.Unmarshal(rec.Spec, &doc); err != nil || doc.Spec == nil {
		return nil, fmt.Errorf("batch deployment %s/%s: stored spec: %v", rec.Endpoint, rec.Name, err)
	}
	return &doc, nil
}

// resolveBatchDeployment checks what a batch deployment refers to (its
// endpoint, snapshots, model, environment and compute) and fills doc.
// who is the owner (putBatchDeployment checks), who reads every
// snapshot.
func (s *Endpoints) resolveBatchDeployment(ctx context.Context, who auth.Principal, d *spec.BatchDeployment, up apitypes.DeploymentUploads, doc *batchDeploymentDoc) error {
	if _, err := s.getBatchEndpointRecord(ctx, d.EndpointName); err != nil {
		return err
	}
	switch {
	case d.CodeConfiguration == nil && up.CodeSnapshot != "":
		return apperr.Invalid("code_snapshot: the deployment has no code_configuration, but code was uploaded")
	case d.CodeConfiguration == nil:
	case up.CodeSnapshot == "":
		return apperr.Invalid("code_configuration.code: %q was not uploaded with the deployment (ferry batch-deployment create uploads it)", d.CodeConfiguration.Code)
	default:
		if err := s.ws.RequireSnapshot(up.CodeSnapshot, "code_configuration.code"); err != nil {
			return err
		}
	}
	var modelName, modelType string
	switch m := d.Model; {
	case m == nil:
		if up.ModelSnapshot != "" {
			return apperr.Invalid("model_snapshot: the deployment has no model, but model files were uploaded")
		}
	case m.Ref != "":
		model, err := s.ws.ResolveModel(ctx, m.Ref)
		if err != nil {
			var we *apperr.Error
			if errors.As(err, &we) {
				we.Msg = "model: " + we.Msg
			}
			return err
		}
		up.ModelSnapshot = model.Snapshot
		doc.ModelID, modelName, modelType = model.ID, model.PathName, model.Type
	default:
		if up.ModelSnapshot == "" {
			return apperr.Invalid("model.path: %q was not uploaded with the deployment (ferry batch-deployment create uploads it)", m.Path)
		}
		if err := s.ws.RequireSnapshot(up.ModelSnapshot, "model.path"); err != nil {
			return err
		}
		modelName, modelType = assets.ModelPathName(m.Path), m.Type
	}
	if d.CodeConfiguration == nil && modelType == "" && up.ModelSnapshot != "" {
		// An inline model without a type is an MLflow model when it
		// has an MLmodel file, as Azure decides.
		if m, err := s.ws.GetSnapshot(ctx, who, up.ModelSnapshot); err == nil {
			for _, f := range m.Files {
				if path.Base(f.Path) == "MLmodel" {
					modelType = "mlflow_model"
					break
				}
			}
		}
	}
	if d.CodeConfiguration == nil && modelType != "mlflow_model" {
		// What makes it an MLflow model is its MLmodel file, which the
		// registry's type says; Ferry's script finds it at init().
		return apperr.Invalid("code_configuration: is required: the model is %s, and only an mlflow_model is scored without a scoring script", cmp.Or(modelType, "custom_model"))
	}
	if up.ModelSnapshot != "" && modelName != "" {
		m, err := s.ws.GetSnapshot(ctx, who, up.ModelSnapshot)
		if err != nil {
			return err
		}
		if len(m.Files) != 1 || m.Files[0].Path != modelName {
			doc.ModelFolder = modelName
		}
	}
	if _, err := s.ws.ResolveEnvironment(ctx, d.Environment, up.EnvironmentSnapshot); err != nil {
		return err
	}
	if _, err := s.ws.GetCompute(ctx, d.ComputeName()); err != nil {
		var we *apperr.Error
		if errors.As(err, &we) {
			we.Msg = "compute: " + we.Msg
		}
		return err
	}
	doc.DeploymentUploads = up
	return nil
}

// CreateDeployment stores a batch deployment. setDefault makes it
// the endpoint's default; so does being the endpoint's first.
func (s *Endpoints) CreateDeployment(ctx context.Context, who auth.Principal, d *spec.BatchDeployment, up apitypes.DeploymentUploads, setDefault bool) (*apitypes.BatchDeployment, error) {
	return s.putBatchDeployment(ctx, who, d, up, setDefault, true)
}

// UpdateDeployment replaces a batch deployment's file; jobs already
// started keep what they were started with.
func (s *Endpoints) UpdateDeployment(ctx context.Context, who auth.Principal, d *spec.BatchDeployment, up apitypes.DeploymentUploads, setDefault bool) (*apitypes.BatchDeployment, error) {
	return s.putBatchDeployment(ctx, who, d, up, setDefault, false)
}

func (s *Endpoints) putBatchDeployment(ctx context.Context, who auth.Principal, d *spec.BatchDeployment, up apitypes.DeploymentUploads, setDefault, create bool) (*apitypes.BatchDeployment, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot change batch deployments")
	}
	if d == nil {
		return nil, apperr.Invalid("the batch deployment is missing")
	}
	if err := d.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	d.ApplyDefaults()
	doc := &batchDeploymentDoc{Spec: d}
	if err := s.resolveBatchDeployment(ctx, who, d, up, doc); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.ws.Now()
	rec := store.BatchDeployment{Endpoint: d.EndpointName, Name: d.Name, Spec: raw, Created: now, Updated: now}
	if create {
		if err := s.st.CreateBatchDeployment(ctx, rec); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return nil, apperr.Conflict("batch endpoint %s has a deployment %s; change it with ferry batch-deployment update, or pick another name", d.EndpointName, d.Name)
			}
			return nil, apperr.NoSpace(err, "batch deployment "+d.Name)
		}
	} else {
		old, err := s.getBatchDeploymentRecord(ctx, d.EndpointName, d.Name)
		if err != nil {
			return nil, err
		}
		rec.Created = old.Created
		if err := s.st.UpdateBatchDeployment(ctx, rec); err != nil {
			return nil, apperr.NoSpace(err, "batch deployment "+d.Name)
		}
	}
	erec, err := s.getBatchEndpointRecord(ctx, d.EndpointName)
	if err != nil {
		return nil, err
	}
	e, err := batchEndpointSpec(erec)
	if err != nil {
		return nil, err
	}
	if setDefault || e.DefaultDeployment() == "" {
		e.Defaults = &spec.BatchDefaults{DeploymentName: d.Name}
		if erec.Spec, err = json.Marshal(e); err != nil {
			return nil, err
		}
		erec.Updated = now
		if err := s.st.UpdateBatchEndpoint(ctx, erec); err != nil {
			return nil, apperr.NoSpace(err, "batch endpoint "+erec.Name)
		}
	}
	s.log.Info("batch deployment stored", "endpoint", d.EndpointName, "deployment", d.Name, "compute", d.ComputeName(), "default", e.DefaultDeployment() == d.Name)
	return s.batchDeploymentView(rec, e)
}

func (s *Endpoints) batchDeploymentView(rec store.BatchDeployment, e *spec.BatchEndpoint) (*apitypes.BatchDeployment, error) {
	doc, err := decodeBatchDeployment(rec)
	if err != nil {
		return nil, err
	}
	return &apitypes.BatchDeployment{BatchDeployment: doc.Spec, ModelID: doc.ModelID, Default: e.DefaultDeployment() == rec.Name,
		ProvisioningState: apitypes.DeploymentSucceeded, Created: rec.Created, Updated: rec.Updated}, nil
}

// GetDeployment shows a batch deployment.
func (s *Endpoints) GetDeployment(ctx context.Context, endpoint, name string) (*apitypes.BatchDeployment, error) {
	rec, err := s.getBatchDeploymentRecord(ctx, endpoint, name)
	if err != nil {
		return nil, err
	}
	erec, err := s.getBatchEndpointRecord(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	e, err := batchEndpointSpec(erec)
	if err != nil {
		return nil, err
	}
	return s.batchDeploymentView(rec, e)
}

// ListDeployments lists a batch endpoint's deployments by name.
func (s *Endpoints) ListDeployments(ctx context.Context, endpoint string) ([]*apitypes.BatchDeployment, error) {
	erec, err := s.getBatchEndpointRecord(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	e, err := batchEndpointSpec(erec)
	if err != nil {
		return nil, err
	}
	recs, err := s.st.ListBatchDeployments(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.BatchDeployment{}
	for _, rec := range recs {
		v, err := s.batchDeploymentView(rec, e)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// DeleteDeployment removes a batch deployment. The endpoint's
// default is refused while it has others (make another the default
// first); the last one goes, and the endpoint has no default then.
func (s *Endpoints) DeleteDeployment(ctx context.Context, who auth.Principal, endpoint, name string) error {
	if !who.IsOwner() {
		return apperr.Forbidden("a run token cannot delete batch deployments")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.getBatchDeploymentRecord(ctx, endpoint, name); err != nil {
		return err
	}
	erec, err := s.getBatchEndpointRecord(ctx, endpoint)
	if err != nil {
		return err
	}
	e, err := batchEndpointSpec(erec)
	if err != nil {
		return err
	}
	if e.DefaultDeployment() == name {
		ds, err := s.st.ListBatchDeployments(ctx, endpoint)
		if err != nil {
			return err
		}
		if len(ds) > 1 {
			return apperr.Conflict("deployment %s is batch endpoint %s's default; make another the default first (ferry batch-deployment update ... --set-default), then delete it", name, endpoint)
		}
		e.Defaults = nil
		if erec.Spec, err = json.Marshal(e); err != nil {
			return err
		}
		erec.Updated = s.ws.Now()
		if err := s.st.UpdateBatchEndpoint(ctx, erec); err != nil {
			return apperr.NoSpace(err, "batch endpoint "+endpoint)
		}
	}
	return s.st.DeleteBatchDeployment(ctx, endpoint, name)
}

func newBatchJobName(endpoint string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand does not fail (Go 1.24+)
	return endpoint + "-" + hex.EncodeToString(b)
}

// Invoke starts a batch job on the deployment inv names (the
// endpoint's default when it names none) over inv's input, and returns
// the job.
func (s *Endpoints) Invoke(ctx context.Context, who auth.Principal, endpoint string, inv apitypes.BatchInvocation) (*apitypes.Job, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot invoke batch endpoints")
	}
	erec, err := s.getBatchEndpointRecord(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	e, err := batchEndpointSpec(erec)
	if err != nil {
		return nil, err
	}
	dep := inv.Deployment
	if dep == "" {
		if dep = e.DefaultDeployment(); dep == "" {
			return nil, apperr.Invalid("deployment_name: batch endpoint %s has no default deployment; name one (--deployment-name) or create one (ferry batch-deployment create --set-default)", endpoint)
		}
	}
	drec, err := s.getBatchDeploymentRecord(ctx, endpoint, dep)
	if err != nil {
		return nil, err
	}
	doc, err := decodeBatchDeployment(drec)
	if err != nil {
		return nil, err
	}
	in := spec.Input{Type: inv.Type, Mode: "download"}
	switch {
	case inv.Type != "" && inv.Type != "uri_folder" && inv.Type != "uri_file":
		return nil, apperr.Invalid("input.type: %q is not uri_folder or uri_file", inv.Type)
	case inv.Snapshot != "" && inv.Path != "":
		return nil, apperr.Invalid("input: give a path or an uploaded snapshot, not both")
	case inv.Snapshot != "":
		if err := s.ws.RequireSnapshot(inv.Snapshot, "input.snapshot"); err != nil {
			return nil, err
		}
		in.Path = "input"
	case inv.Path != "":
		in.Path = inv.Path
	default:
		return nil, apperr.Invalid("input: is required: the file or folder to score (a local path the CLI uploads, azureml:NAME:VERSION of a data asset, or a URL)")
	}
	if in.Type == "" {
		in.Type = "uri_folder"
	}
	driver, err := s.batchDriverSnapshot()
	if err != nil {
		return nil, err
	}
	name := inv.JobName
	if name == "" {
		name = newBatchJobName(endpoint)
	}
	d := doc.Spec
	j := &spec.Job{
		Type: "command", Name: name,
		DisplayName:          fmt.Sprintf("%s/%s batch scoring", endpoint, dep),
		ExperimentName:       "batch-" + endpoint,
		Description:          "a batch scoring job of deployment " + dep + " of batch endpoint " + endpoint,
		Tags:                 map[string]string{"ferry.batch_endpoint": endpoint, "ferry.batch_deployment": dep},
		Command:              batchCommand(d, doc.ModelSnapshot != "", doc.ModelFolder),
		Environment:          d.Environment,
		EnvironmentVariables: batchJobVariables(d.EnvironmentVariables),
		Compute:              d.ComputeName(),
		Inputs: map[string]spec.Input{
			"ferry_batch_driver": {Type: "uri_folder", Path: "ferry-batch-driver", Mode: "download"},
			"data":               in,
		},
	}
	if d.CodeConfiguration != nil {
		j.Code = d.CodeConfiguration.Code
	}
	if d.Resources.InstanceCount > 1 || d.Resources.InstanceType != "" {
		j.Resources = &spec.Resources{InstanceCount: d.Resources.InstanceCount, InstanceType: d.Resources.InstanceType}
	}
	inputs := map[string]string{"ferry_batch_driver": driver}
	if inv.Snapshot != "" {
		inputs["data"] = inv.Snapshot
	}
	if doc.ModelSnapshot != "" {
		j.Inputs["model"] = spec.Input{Type: "uri_folder", Path: "model", Mode: "download"}
		inputs["model"] = doc.ModelSnapshot
	}
	if err := j.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	// The job's name is recorded before the job is made, so that a
	// server stopped in between lists a name whose job never came
	// (list-jobs leaves it out) rather than a job it does not list.
	if err := s.addBatchJob(ctx, endpoint, name); err != nil {
		return nil, err
	}
	job, err := s.ws.SubmitJob(ctx, auth.Principal{Kind: auth.KindOwner, Subject: who.Subject},
		workspace.Submission{Spec: j, CodeSnapshot: doc.CodeSnapshot, InputSnapshots: inputs, EnvironmentSnapshot: doc.EnvironmentSnapshot})
	if err != nil {
		return nil, err
	}
	s.log.Info("batch endpoint invoked", "endpoint", endpoint, "deployment", dep, "job", name)
	return job, nil
}

// batchJobVariables are a batch job's variables: the deployment's, and
// BATCH_DRIVER_KEY, a key of the job's own that its driver's workers
// present to node rank 0's queue, which serves no one else.
func batchJobVariables(vars map[string]string) map[string]string {
	out := maps.Clone(vars)
	if out == nil {
		out = map[string]string{}
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand does not fail (Go 1.24+)
	out["BATCH_DRIVER_KEY"] = hex.EncodeToString(b)
	return out
}

func (s *Endpoints) addBatchJob(ctx context.Context, endpoint, job string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.getBatchEndpointRecord(ctx, endpoint)
	if err != nil {
		return err
	}
	var jobs []string
	if len(rec.Jobs) > 0 {
		if err := json.Unmarshal(rec.Jobs, &jobs); err != nil {
			return fmt.Errorf("batch endpoint %s: stored jobs: %w", endpoint, err)
		}
	}
	jobs = append(jobs, job)
	if len(jobs) > maxBatchJobsKept {
		jobs = jobs[len(jobs)-maxBatchJobsKept:]
	}
	if rec.Jobs, err = json.Marshal(jobs); err != nil {
		return err
	}
	return apperr.NoSpace(s.st.UpdateBatchEndpoint(ctx, rec), "batch endpoint "+endpoint)
}

// ListJobs lists the jobs of a batch endpoint's invocations, newest
// first.
func (s *Endpoints) ListJobs(ctx context.Context, endpoint string) ([]*apitypes.Job, error) {
	rec, err := s.getBatchEndpointRecord(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	var names []string
	if len(rec.Jobs) > 0 {
		if err := json.Unmarshal(rec.Jobs, &names); err != nil {
			return nil, fmt.Errorf("batch endpoint %s: stored jobs: %w", endpoint, err)
		}
	}
	out := []*apitypes.Job{}
	for i := len(names) - 1; i >= 0; i-- {
		j, err := s.ws.GetJob(ctx, names[i], false)
		if apperr.CodeOf(err) == apperr.CodeNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		j.Spec = nil
		out = append(out, j)
	}
	return out, nil
}

// batchCommand is a batch job's command: Ferry's batch driver (the job's
// input ferry_batch_driver) over the input data with the deployment's
// scoring script (or, for an MLflow model without one, the driver's
// batchdriver.MLflowScript) and settings. AZUREML_MODEL_DIR is as for an online
// deployment's replica (serving.ModelDir).
func batchCommand(d *spec.BatchDeployment, hasModel bool, modelFolder string) string {
	q := serving.ShellQuote
	var b strings.Builder
	setup, dir := serving.ModelDir(hasModel, modelFolder)
	b.WriteString(setup)
	b.WriteString(`export AML_APP_ROOT="$PWD"` + dir)
	script := `"${{inputs.ferry_batch_driver}}/` + batchdriver.MLflowScript + `"`
	if d.CodeConfiguration != nil {
		script = q(d.CodeConfiguration.ScoringScript)
	}
	r := d.RetrySettings
	args := []string{
		"--script", script,
		"--input", `"${{inputs.data}}"`,
		"--nodes", strconv.Itoa(d.Resources.InstanceCount),
		"--concurrency", strconv.Itoa(d.MaxConcurrencyPerInstance),
		"--mini-batch-size", strconv.Itoa(d.MiniBatchSize),
		"--max-retries", strconv.Itoa(*r.MaxRetries),
		"--timeout", strconv.Itoa(r.Timeout),
		"--error-threshold", strconv.Itoa(*d.ErrorThreshold),
		"--output-action", d.OutputAction,
		"--output-file-name", q(d.OutputFileName),
		"--logging-level", d.LoggingLevel,
	}
	b.WriteString(`; exec python3 -u "${{inputs.ferry_batch_driver}}/` + batchdriver.Program + `" ` + strings.Join(args, " "))
	return b.String()
}
