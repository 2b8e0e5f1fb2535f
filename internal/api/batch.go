package api

import (
	"context"
	"io"
	"net/http"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
)

// BatchEndpoints is what the batch routes ask of batch endpoints'
// workload (internal/workload/batch).
type BatchEndpoints interface {
	CreateEndpoint(ctx context.Context, who auth.Principal, e *spec.BatchEndpoint) (*apitypes.BatchEndpoint, error)
	UpdateEndpoint(ctx context.Context, who auth.Principal, e *spec.BatchEndpoint) (*apitypes.BatchEndpoint, error)
	GetEndpoint(ctx context.Context, name string) (*apitypes.BatchEndpoint, error)
	ListEndpoints(ctx context.Context) ([]*apitypes.BatchEndpoint, error)
	DeleteEndpoint(ctx context.Context, who auth.Principal, name string) error
	Invoke(ctx context.Context, who auth.Principal, endpoint string, inv apitypes.BatchInvocation) (*apitypes.Job, error)
	ListJobs(ctx context.Context, endpoint string) ([]*apitypes.Job, error)
	CreateDeployment(ctx context.Context, who auth.Principal, d *spec.BatchDeployment, up apitypes.DeploymentUploads, setDefault bool) (*apitypes.BatchDeployment, error)
	UpdateDeployment(ctx context.Context, who auth.Principal, d *spec.BatchDeployment, up apitypes.DeploymentUploads, setDefault bool) (*apitypes.BatchDeployment, error)
	GetDeployment(ctx context.Context, endpoint, name string) (*apitypes.BatchDeployment, error)
	ListDeployments(ctx context.Context, endpoint string) ([]*apitypes.BatchDeployment, error)
	DeleteDeployment(ctx context.Context, who auth.Principal, endpoint, name string) error
}

// batchRoutes are the batch endpoints' and deployments' operations, for
// owner tokens only, as the online endpoints' are.
func (s *Server) batchRoutes() []route {
	const (
		base = "/v1/batch-endpoints"
		deps = base + "/{endpoint}/deployments"
	)
	return []route{
		{method: "GET", path: base, summary: "List batch endpoints", handle: s.listBatchEndpoints},
		{method: "POST", path: base, summary: "Create a batch endpoint from an Azure ML v2 batchEndpoint file (as JSON)", handle: s.createBatchEndpoint},
		{method: "GET", path: base + "/{name}", summary: "Show a batch endpoint: its default deployment and its deployments", handle: s.getBatchEndpoint},
		{method: "PUT", path: base + "/{name}", summary: "Replace a batch endpoint's file (description, tags, defaults.deployment_name)", handle: s.updateBatchEndpoint},
		{method: "DELETE", path: base + "/{name}", summary: "Delete a batch endpoint and its deployments; its jobs are kept", handle: s.deleteBatchEndpoint},
		{method: "POST", path: base + "/{name}/jobs", summary: "Invoke a batch endpoint: {deployment_name, type, path | snapshot, job_name}; starts a batch scoring job and returns it", handle: s.invokeBatchEndpoint},
		{method: "GET", path: base + "/{name}/jobs", summary: "The jobs of a batch endpoint's invocations, newest first", handle: s.listBatchJobs},
		{method: "GET", path: deps, summary: "List a batch endpoint's deployments", handle: s.listBatchDeployments},
		{method: "POST", path: deps, summary: "Create a batch deployment: {spec (an Azure ML v2 modelBatchDeployment file as JSON), uploads: {code_snapshot, model_snapshot, environment_snapshot}, set_default}", handle: s.createBatchDeployment},
		{method: "GET", path: deps + "/{name}", summary: "Show a batch deployment", handle: s.getBatchDeployment},
		{method: "PUT", path: deps + "/{name}", summary: "Replace a batch deployment: {spec, uploads, set_default}; jobs already started keep what they had", handle: s.updateBatchDeployment},
		{method: "DELETE", path: deps + "/{name}", summary: "Delete a batch deployment (not the default while the endpoint has others)", handle: s.deleteBatchDeployment},
	}
}

func batchEndpointOf(r *http.Request) (*spec.BatchEndpoint, error) {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxJSONBody))
	if err != nil {
		return nil, err
	}
	e, err := spec.DecodeBatchEndpointJSON(data)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if name := r.PathValue("name"); name != "" && e.Name != name {
		return nil, apperr.Invalid("name: the path names batch endpoint %s, the file %s; give one", name, e.Name)
	}
	return e, nil
}

func (s *Server) createBatchEndpoint(r *http.Request, who auth.Principal) (any, error) {
	e, err := batchEndpointOf(r)
	if err != nil {
		return nil, err
	}
	return s.wl.Batch.CreateEndpoint(r.Context(), who, e)
}

func (s *Server) updateBatchEndpoint(r *http.Request, who auth.Principal) (any, error) {
	e, err := batchEndpointOf(r)
	if err != nil {
		return nil, err
	}
	return s.wl.Batch.UpdateEndpoint(r.Context(), who, e)
}

func (s *Server) listBatchEndpoints(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Batch.ListEndpoints(r.Context())
}

func (s *Server) getBatchEndpoint(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Batch.GetEndpoint(r.Context(), r.PathValue("name"))
}

func (s *Server) deleteBatchEndpoint(r *http.Request, who auth.Principal) (any, error) {
	if err := s.wl.Batch.DeleteEndpoint(r.Context(), who, r.PathValue("name")); err != nil {
		return nil, err
	}
	return map[string]string{"deleted": r.PathValue("name")}, nil
}

func (s *Server) invokeBatchEndpoint(r *http.Request, who auth.Principal) (any, error) {
	var inv apitypes.BatchInvocation
	if err := decode(r, &inv); err != nil {
		return nil, err
	}
	return s.wl.Batch.Invoke(r.Context(), who, r.PathValue("name"), inv)
}

func (s *Server) listBatchJobs(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Batch.ListJobs(r.Context(), r.PathValue("name"))
}

// batchDeploymentOf reads the request's batch deployment (specOf).
func batchDeploymentOf(r *http.Request, req apitypes.BatchDeploymentRequest) (*spec.BatchDeployment, error) {
	return specOf(r, req.Spec, "a batch deployment file", "batch endpoint", spec.DecodeBatchDeploymentJSON)
}

func (s *Server) createBatchDeployment(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.BatchDeploymentRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	d, err := batchDeploymentOf(r, req)
	if err != nil {
		return nil, err
	}
	return s.wl.Batch.CreateDeployment(r.Context(), who, d, req.Uploads, req.SetDefault)
}

func (s *Server) updateBatchDeployment(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.BatchDeploymentRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	d, err := batchDeploymentOf(r, req)
	if err != nil {
		return nil, err
	}
	return s.wl.Batch.UpdateDeployment(r.Context(), who, d, req.Uploads, req.SetDefault)
}

func (s *Server) listBatchDeployments(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Batch.ListDeployments(r.Context(), r.PathValue("endpoint"))
}

func (s *Server) getBatchDeployment(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Batch.GetDeployment(r.Context(), r.PathValue("endpoint"), r.PathValue("name"))
}

func (s *Server) deleteBatchDeployment(r *http.Request, who auth.Principal) (any, error) {
	if err := s.wl.Batch.DeleteDeployment(r.Context(), who, r.PathValue("endpoint"), r.PathValue("name")); err != nil {
		return nil, err
	}
	return map[string]string{"deleted": r.PathValue("name")}, nil
}
