package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/url"
)

// CreateComponent registers a component version.
func (c *Client) CreateComponent(ctx context.Context, req apitypes.ComponentRequest) (*apitypes.Component, error) {
	var out apitypes.Component
	return &out, c.do(ctx, "POST", "/v1/components", req, &out)
}

// ListComponents lists registered component versions; name "" lists them all.
func (c *Client) ListComponents(ctx context.Context, name string) ([]*apitypes.Component, error) {
	var out []*apitypes.Component
	return out, c.do(ctx, "GET", "/v1/components?"+url.Values{"name": {name}}.Encode(), nil, &out)
}

// GetComponent shows one component version ("latest" for the newest).
func (c *Client) GetComponent(ctx context.Context, name, version string) (*apitypes.Component, error) {
	var out apitypes.Component
	return &out, c.do(ctx, "GET", "/v1/components/"+url.PathEscape(name)+"/versions/"+url.PathEscape(version), nil, &out)
}

// SubmitPipeline submits a pipeline job.
func (c *Client) SubmitPipeline(ctx context.Context, req apitypes.PipelineJobRequest) (*apitypes.Job, error) {
	var out apitypes.Job
	return &out, c.do(ctx, "POST", "/v1/pipeline-jobs", req, &out)
}
