package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/url"
	"strconv"
)

// CreateData registers a data asset version.
func (c *Client) CreateData(ctx context.Context, req apitypes.DataRequest) (*apitypes.DataAsset, error) {
	var out apitypes.DataAsset
	return &out, c.do(ctx, "POST", "/v1/data", req, &out)
}

// ListData lists registered data asset versions; name "" lists them all.
func (c *Client) ListData(ctx context.Context, name string, includeArchived bool) ([]*apitypes.DataAsset, error) {
	var out []*apitypes.DataAsset
	q := url.Values{"name": {name}, "include_archived": {strconv.FormatBool(includeArchived)}}
	return out, c.do(ctx, "GET", "/v1/data?"+q.Encode(), nil, &out)
}

// GetData shows one data asset version ("latest" for the newest not
// archived).
func (c *Client) GetData(ctx context.Context, name, version string) (*apitypes.DataAsset, error) {
	var out apitypes.DataAsset
	return &out, c.do(ctx, "GET", "/v1/data/"+url.PathEscape(name)+"/versions/"+url.PathEscape(version), nil, &out)
}

// ArchiveData archives a data asset version, or restores it when archived
// is false.
func (c *Client) ArchiveData(ctx context.Context, name, version string, archived bool) (*apitypes.DataAsset, error) {
	op := "restore"
	if archived {
		op = "archive"
	}
	var out apitypes.DataAsset
	return &out, c.do(ctx, "POST", "/v1/data/"+url.PathEscape(name)+"/versions/"+url.PathEscape(version)+"/"+op, nil, &out)
}
