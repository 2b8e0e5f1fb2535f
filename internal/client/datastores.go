package client

import (
	"context"
	"net/url"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// CreateDatastore creates or replaces a datastore.
func (c *Client) CreateDatastore(ctx context.Context, req api.DatastoreRequest) (*workspace.Datastore, error) {
	var out workspace.Datastore
	return &out, c.do(ctx, "POST", "/v1/datastores", req, &out)
}

// ListDatastores lists the datastores.
func (c *Client) ListDatastores(ctx context.Context) ([]*workspace.Datastore, error) {
	var out []*workspace.Datastore
	return out, c.do(ctx, "GET", "/v1/datastores", nil, &out)
}

// GetDatastore shows a datastore.
func (c *Client) GetDatastore(ctx context.Context, name string) (*workspace.Datastore, error) {
	var out workspace.Datastore
	return &out, c.do(ctx, "GET", "/v1/datastores/"+url.PathEscape(name), nil, &out)
}

// DeleteDatastore deletes a datastore.
func (c *Client) DeleteDatastore(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/datastores/"+url.PathEscape(name), nil, nil)
}
