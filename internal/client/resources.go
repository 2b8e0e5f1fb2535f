package client

import (
	"context"
	"net/url"
	"strconv"
)

// Versioned is the REST API of one kind of versioned asset (models, data
// assets, components, environments): versions are registered by a POST
// of an R to Path, listed at Path (?name= for one asset's), read at
// Path/NAME/versions/VERSION and archived or restored at
// Path/NAME/versions/VERSION/archive|restore. A kind's calls are a
// Versioned value, not methods of their own.
type Versioned[T, R any] struct {
	Path string // the collection, e.g. /v1/models
	// Archives says whether versions can be archived (and listed with
	// ?include_archived=).
	Archives bool
}

// Create registers the version req describes.
func (v Versioned[T, R]) Create(ctx context.Context, c *Client, req R) (*T, error) {
	var out T
	return &out, c.do(ctx, "POST", v.Path, req, &out)
}

// List lists the registered versions; name "" lists every asset's.
// includeArchived lists the archived versions too, of a kind that
// Archives.
func (v Versioned[T, R]) List(ctx context.Context, c *Client, name string, includeArchived bool) ([]*T, error) {
	q := url.Values{"name": {name}}
	if v.Archives {
		q.Set("include_archived", strconv.FormatBool(includeArchived))
	}
	var out []*T
	return out, c.do(ctx, "GET", v.Path+"?"+q.Encode(), nil, &out)
}

// Get reads one version ("latest" for the newest not archived).
func (v Versioned[T, R]) Get(ctx context.Context, c *Client, name, version string) (*T, error) {
	var out T
	return &out, c.do(ctx, "GET", v.versionPath(name, version), nil, &out)
}

// Archive archives a version, or restores it when archived is false.
func (v Versioned[T, R]) Archive(ctx context.Context, c *Client, name, version string, archived bool) (*T, error) {
	op := "/restore"
	if archived {
		op = "/archive"
	}
	var out T
	return &out, c.do(ctx, "POST", v.versionPath(name, version)+op, nil, &out)
}

func (v Versioned[T, R]) versionPath(name, version string) string {
	return v.Path + "/" + url.PathEscape(name) + "/versions/" + url.PathEscape(version)
}

// Named is the REST API of one kind of thing a workspace knows by name
// (computes, datastores, schedules, online and batch endpoints): created
// by a POST of an R to Path, listed at Path, read and deleted at
// Path/NAME.
type Named[T, R any] struct {
	Path string // the collection, e.g. /v1/datastores
}

// Create creates the thing req describes.
func (n Named[T, R]) Create(ctx context.Context, c *Client, req R) (*T, error) {
	var out T
	return &out, c.do(ctx, "POST", n.Path, req, &out)
}

// List lists them all.
func (n Named[T, R]) List(ctx context.Context, c *Client) ([]*T, error) {
	var out []*T
	return out, c.do(ctx, "GET", n.Path, nil, &out)
}

// Get reads the one named name.
func (n Named[T, R]) Get(ctx context.Context, c *Client, name string) (*T, error) {
	var out T
	return &out, c.do(ctx, "GET", n.ItemPath(name), nil, &out)
}

// Delete deletes the one named name.
func (n Named[T, R]) Delete(ctx context.Context, c *Client, name string) error {
	return c.do(ctx, "DELETE", n.ItemPath(name), nil, nil)
}

// ItemPath is the path of the one named name, under which its own
// calls (an endpoint's keys, a compute's nodes) are.
func (n Named[T, R]) ItemPath(name string) string { return n.Path + "/" + url.PathEscape(name) }
