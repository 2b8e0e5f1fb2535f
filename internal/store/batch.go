package store

import (
	"context"
	"encoding/json"
	"time"
)

// BatchEndpoint is a batch endpoint. Spec is the workspace's record of it
// as JSON, Jobs the JSON list of the jobs its invocations made; both are
// opaque to the store.
type BatchEndpoint struct {
	Name    string
	Spec    json.RawMessage
	Jobs    json.RawMessage
	Created time.Time
	Updated time.Time
}

// BatchDeployment is a deployment of a batch endpoint. Spec is the
// workspace's record of it as JSON, opaque to the store.
type BatchDeployment struct {
	Endpoint string
	Name     string
	Spec     json.RawMessage
	Created  time.Time
	Updated  time.Time
}

// BatchEndpoints keeps batch endpoints and their deployments, which are
// named within their endpoint and removed with it. Its methods are safe for
// concurrent use, and keep the contract common to every part of Store:
// errors wrap ErrNotFound or ErrConflict where those apply, and a returned
// error leaves stored state unchanged.
type BatchEndpoints interface {
	// CreateBatchEndpoint stores a batch endpoint; ErrConflict if the
	// name is taken.
	CreateBatchEndpoint(ctx context.Context, e BatchEndpoint) error
	// GetBatchEndpoint returns a batch endpoint; ErrNotFound if there is
	// none.
	GetBatchEndpoint(ctx context.Context, name string) (BatchEndpoint, error)
	// ListBatchEndpoints returns every batch endpoint, ordered by name.
	ListBatchEndpoints(ctx context.Context) ([]BatchEndpoint, error)
	// UpdateBatchEndpoint replaces a batch endpoint's spec, jobs and
	// updated time (its created time stays); ErrNotFound if there is none.
	UpdateBatchEndpoint(ctx context.Context, e BatchEndpoint) error
	// DeleteBatchEndpoint removes a batch endpoint and its deployments in
	// one transaction; ErrNotFound if there is none.
	DeleteBatchEndpoint(ctx context.Context, name string) error

	// CreateBatchDeployment stores a batch deployment; ErrConflict if the
	// endpoint has one of that name.
	CreateBatchDeployment(ctx context.Context, d BatchDeployment) error
	// GetBatchDeployment returns a batch deployment; ErrNotFound if there
	// is none.
	GetBatchDeployment(ctx context.Context, endpoint, name string) (BatchDeployment, error)
	// ListBatchDeployments returns a batch endpoint's deployments, ordered
	// by name.
	ListBatchDeployments(ctx context.Context, endpoint string) ([]BatchDeployment, error)
	// UpdateBatchDeployment replaces a batch deployment's spec and updated
	// time (its created time stays); ErrNotFound if there is none.
	UpdateBatchDeployment(ctx context.Context, d BatchDeployment) error
	// DeleteBatchDeployment removes a batch deployment; ErrNotFound if
	// there is none.
	DeleteBatchDeployment(ctx context.Context, endpoint, name string) error
}
