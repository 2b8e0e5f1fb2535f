package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"net/url"

	"github.com/ferry-ml/ferry/internal/spec"
)

// BatchEndpoints are the batch endpoints.
var BatchEndpoints = Named[apitypes.BatchEndpoint, *spec.BatchEndpoint]{Path: "/v1/batch-endpoints"}

func batchEndpointPath(name string) string { return BatchEndpoints.ItemPath(name) }

func batchDeploymentPath(endpoint, name string) string {
	return batchEndpointPath(endpoint) + "/deployments/" + url.PathEscape(name)
}

// CreateBatchEndpoint creates a batch endpoint.
func (c *Client) CreateBatchEndpoint(ctx context.Context, e *spec.BatchEndpoint) (*apitypes.BatchEndpoint, error) {
	return BatchEndpoints.Create(ctx, c, e)
}

// UpdateBatchEndpoint replaces a batch endpoint's file.
func (c *Client) UpdateBatchEndpoint(ctx context.Context, e *spec.BatchEndpoint) (*apitypes.BatchEndpoint, error) {
	var out apitypes.BatchEndpoint
	return &out, c.do(ctx, "PUT", batchEndpointPath(e.Name), e, &out)
}

// GetBatchEndpoint shows a batch endpoint.
func (c *Client) GetBatchEndpoint(ctx context.Context, name string) (*apitypes.BatchEndpoint, error) {
	return BatchEndpoints.Get(ctx, c, name)
}

// ListBatchEndpoints lists the batch endpoints.
func (c *Client) ListBatchEndpoints(ctx context.Context) ([]*apitypes.BatchEndpoint, error) {
	return BatchEndpoints.List(ctx, c)
}

// DeleteBatchEndpoint deletes a batch endpoint and its deployments.
func (c *Client) DeleteBatchEndpoint(ctx context.Context, name string) error {
	return BatchEndpoints.Delete(ctx, c, name)
}

// InvokeBatchEndpoint starts a batch scoring job.
func (c *Client) InvokeBatchEndpoint(ctx context.Context, endpoint string, inv apitypes.BatchInvocation) (*apitypes.Job, error) {
	var out apitypes.Job
	return &out, c.do(ctx, "POST", batchEndpointPath(endpoint)+"/jobs", inv, &out)
}

// ListBatchJobs lists the jobs of a batch endpoint's invocations.
func (c *Client) ListBatchJobs(ctx context.Context, endpoint string) ([]*apitypes.Job, error) {
	var out []*apitypes.Job
	return out, c.do(ctx, "GET", batchEndpointPath(endpoint)+"/jobs", nil, &out)
}

// PutBatchDeployment creates (create) or replaces a batch deployment
// whose files were uploaded as up.
func (c *Client) PutBatchDeployment(ctx context.Context, d *spec.BatchDeployment, up apitypes.DeploymentUploads, setDefault, create bool) (*apitypes.BatchDeployment, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	method, path := "PUT", batchDeploymentPath(d.EndpointName, d.Name)
	if create {
		method, path = "POST", batchEndpointPath(d.EndpointName)+"/deployments"
	}
	var out apitypes.BatchDeployment
	return &out, c.do(ctx, method, path, apitypes.BatchDeploymentRequest{Spec: raw, Uploads: up, SetDefault: setDefault}, &out)
}

// GetBatchDeployment shows a batch deployment.
func (c *Client) GetBatchDeployment(ctx context.Context, endpoint, name string) (*apitypes.BatchDeployment, error) {
	var out apitypes.BatchDeployment
	return &out, c.do(ctx, "GET", batchDeploymentPath(endpoint, name), nil, &out)
}

// ListBatchDeployments lists a batch endpoint's deployments.
func (c *Client) ListBatchDeployments(ctx context.Context, endpoint string) ([]*apitypes.BatchDeployment, error) {
	var out []*apitypes.BatchDeployment
	return out, c.do(ctx, "GET", batchEndpointPath(endpoint)+"/deployments", nil, &out)
}

// DeleteBatchDeployment deletes a batch deployment.
func (c *Client) DeleteBatchDeployment(ctx context.Context, endpoint, name string) error {
	return c.do(ctx, "DELETE", batchDeploymentPath(endpoint, name), nil, nil)
}
