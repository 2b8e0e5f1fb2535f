package store

import (
	"context"
	"encoding/json"
	"time"
)

// Datastore is a place job inputs name as azureml://datastores/NAME/paths/PATH.
// Spec is its file as JSON (never with credentials), opaque to the store.
type Datastore struct {
	Name    string
	Type    string
	Spec    json.RawMessage
	Created time.Time
	Updated time.Time
}

// Datastores keeps the workspace's datastores, the places job inputs name as
// azureml://datastores/NAME/paths/PATH. PutDatastore creates one or replaces
// it. Its methods are safe for concurrent use, and keep the contract common
// to every part of Store: errors wrap ErrNotFound or ErrConflict where those
// apply, and a returned error leaves stored state unchanged.
type Datastores interface {
	// PutDatastore stores a datastore, replacing the type and spec (and
	// Updated, keeping Created) of one by that name.
	PutDatastore(ctx context.Context, d Datastore) error
	// GetDatastore returns a datastore; ErrNotFound if there is none.
	GetDatastore(ctx context.Context, name string) (Datastore, error)
	// ListDatastores returns every datastore, ordered by name.
	ListDatastores(ctx context.Context) ([]Datastore, error)
	// DeleteDatastore removes a datastore; ErrNotFound if there is none.
	DeleteDatastore(ctx context.Context, name string) error
}
