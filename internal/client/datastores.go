package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/url"
)

// CreateDatastore creates or replaces a datastore.
func (c *Client) CreateDatastore(ctx context.Context, req apitypes.DatastoreRequest) (*apitypes.Datastore, error) {
	var out apitypes.Datastore
	return &out, c.do(ctx, "POST", "/v1/datastores", req, &out)
}

// ListDatastores lists the datastores.
func (c *Client) ListDatastores(ctx context.Context) ([]*apitypes.Datastore, error) {
	var out []*apitypes.Datastore
	return out, c.do(ctx, "GET", "/v1/datastores", nil, &out)
}

// GetDatastore shows a datastore.
func (c *Client) GetDatastore(ctx context.Context, name string) (*apitypes.Datastore, error) {
	var out apitypes.Datastore
	return &out, c.do(ctx, "GET", "/v1/datastores/"+url.PathEscape(name), nil, &out)
}

// DeleteDatastore deletes a datastore.
func (c *Client) DeleteDatastore(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/datastores/"+url.PathEscape(name), nil, nil)
}
