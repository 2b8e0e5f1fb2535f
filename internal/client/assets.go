package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"

	"github.com/ferry-ml/ferry/internal/envcatalog"
)

// The kinds of versioned asset, each a declaration of its routes.
var (
	Models       = Versioned[apitypes.Model, apitypes.ModelRequest]{Path: "/v1/models", Archives: true}
	DataAssets   = Versioned[apitypes.DataAsset, apitypes.DataRequest]{Path: "/v1/data", Archives: true}
	Components   = Versioned[apitypes.Component, apitypes.ComponentRequest]{Path: "/v1/components"}
	Environments = Versioned[apitypes.Environment, apitypes.EnvironmentRequest]{Path: "/v1/environments"}
)

// ListModels lists registered model versions; name "" lists every model.
func (c *Client) ListModels(ctx context.Context, name string, includeArchived bool) ([]*apitypes.Model, error) {
	return Models.List(ctx, c, name, includeArchived)
}

// GetModel shows one model version ("latest" for the newest not archived).
func (c *Client) GetModel(ctx context.Context, name, version string) (*apitypes.Model, error) {
	return Models.Get(ctx, c, name, version)
}

// GetData shows one data asset version ("latest" for the newest not
// archived).
func (c *Client) GetData(ctx context.Context, name, version string) (*apitypes.DataAsset, error) {
	return DataAssets.Get(ctx, c, name, version)
}

// GetComponent shows one component version ("latest" for the newest).
func (c *Client) GetComponent(ctx context.Context, name, version string) (*apitypes.Component, error) {
	return Components.Get(ctx, c, name, version)
}

// ListEnvironments lists registered environments; name "" lists all.
func (c *Client) ListEnvironments(ctx context.Context, name string) ([]*apitypes.Environment, error) {
	return Environments.List(ctx, c, name, false)
}

// GetEnvironment shows one environment version ("latest" for the last).
func (c *Client) GetEnvironment(ctx context.Context, name, version string) (*apitypes.Environment, error) {
	return Environments.Get(ctx, c, name, version)
}

// EnvironmentCatalog returns the workspace's catalog of curated environments.
func (c *Client) EnvironmentCatalog(ctx context.Context) ([]envcatalog.Entry, error) {
	var out []envcatalog.Entry
	return out, c.do(ctx, "GET", Environments.Path+"/catalog", nil, &out)
}
