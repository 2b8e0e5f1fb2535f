package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
)

// Datastores are the workspace's datastores.
var Datastores = Named[apitypes.Datastore, apitypes.DatastoreRequest]{Path: "/v1/datastores"}

// CreateDatastore creates or replaces a datastore.
func (c *Client) CreateDatastore(ctx context.Context, req apitypes.DatastoreRequest) (*apitypes.Datastore, error) {
	return Datastores.Create(ctx, c, req)
}

// ListDatastores lists the datastores.
func (c *Client) ListDatastores(ctx context.Context) ([]*apitypes.Datastore, error) {
	return Datastores.List(ctx, c)
}

// GetDatastore shows a datastore.
func (c *Client) GetDatastore(ctx context.Context, name string) (*apitypes.Datastore, error) {
	return Datastores.Get(ctx, c, name)
}
