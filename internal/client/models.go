package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/url"
	"strconv"
)

// CreateModel registers a model version.
func (c *Client) CreateModel(ctx context.Context, req apitypes.ModelRequest) (*apitypes.Model, error) {
	var out apitypes.Model
	return &out, c.do(ctx, "POST", "/v1/models", req, &out)
}

// ListModels lists registered model versions; name "" lists every model.
func (c *Client) ListModels(ctx context.Context, name string, includeArchived bool) ([]*apitypes.Model, error) {
	var out []*apitypes.Model
	q := url.Values{"name": {name}, "include_archived": {strconv.FormatBool(includeArchived)}}
	return out, c.do(ctx, "GET", "/v1/models?"+q.Encode(), nil, &out)
}

// GetModel shows one model version ("latest" for the newest not archived).
func (c *Client) GetModel(ctx context.Context, name, version string) (*apitypes.Model, error) {
	var out apitypes.Model
	return &out, c.do(ctx, "GET", "/v1/models/"+url.PathEscape(name)+"/versions/"+url.PathEscape(version), nil, &out)
}

// ArchiveModel archives a model version, or restores it when archived is
// false.
func (c *Client) ArchiveModel(ctx context.Context, name, version string, archived bool) (*apitypes.Model, error) {
	op := "restore"
	if archived {
		op = "archive"
	}
	var out apitypes.Model
	return &out, c.do(ctx, "POST", "/v1/models/"+url.PathEscape(name)+"/versions/"+url.PathEscape(version)+"/"+op, nil, &out)
}
