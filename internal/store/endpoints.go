package store

import (
	"context"
	"encoding/json"
	"time"
)

// Endpoint is an online endpoint. Spec is its file as JSON, opaque to the
// store; State its provisioning state. PrimaryKey and SecondaryKey are
// sealed by the workspace before they reach the store, which keeps them as
// given.
type Endpoint struct {
	Name         string
	Spec         json.RawMessage
	State        string
	PrimaryKey   string
	SecondaryKey string
	Created      time.Time
	Updated      time.Time
}

// Deployment is an online deployment of an endpoint. Spec and Replicas
// are JSON the workspace owns (its record of the deployment, and of the
// jobs that serve it), opaque to the store; State is its provisioning
// state, Reason why it failed.
type Deployment struct {
	Endpoint string
	Name     string
	Spec     json.RawMessage
	State    string
	Reason   string
	Replicas json.RawMessage
	Created  time.Time
	Updated  time.Time
}

// Endpoints keeps online endpoints and their deployments, which are named
// within their endpoint. Its methods are safe for concurrent use, and keep
// the contract common to every part of Store: errors wrap ErrNotFound or
// ErrConflict where those apply, and a returned error leaves stored state
// unchanged.
type Endpoints interface {
	// CreateEndpoint stores an online endpoint; ErrConflict if the name
	// is taken.
	CreateEndpoint(ctx context.Context, e Endpoint) error
	// GetEndpoint returns an endpoint; ErrNotFound if there is none.
	GetEndpoint(ctx context.Context, name string) (Endpoint, error)
	// ListEndpoints returns every endpoint, ordered by name.
	ListEndpoints(ctx context.Context) ([]Endpoint, error)
	// UpdateEndpoint replaces an endpoint's spec, state, keys and updated
	// time (its created time stays); ErrNotFound if there is none.
	UpdateEndpoint(ctx context.Context, e Endpoint) error
	// DeleteEndpoint removes an endpoint; ErrNotFound if there is none.
	DeleteEndpoint(ctx context.Context, name string) error

	// CreateDeployment stores an online deployment; ErrConflict if the
	// endpoint has one of that name.
	CreateDeployment(ctx context.Context, d Deployment) error
	// GetDeployment returns a deployment; ErrNotFound if there is none.
	GetDeployment(ctx context.Context, endpoint, name string) (Deployment, error)
	// ListDeployments returns an endpoint's deployments, or every
	// endpoint's when endpoint is empty, ordered by endpoint and name.
	ListDeployments(ctx context.Context, endpoint string) ([]Deployment, error)
	// UpdateDeployment replaces a deployment's spec, state, reason,
	// replicas and updated time (its created time stays); ErrNotFound if
	// there is none.
	UpdateDeployment(ctx context.Context, d Deployment) error
	// DeleteDeployment removes a deployment; ErrNotFound if there is none.
	DeleteDeployment(ctx context.Context, endpoint, name string) error
}
