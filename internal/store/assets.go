package store

import (
	"context"
	"encoding/json"
	"time"
)

// Environment is one version of a registered environment. Spec is the
// resolved environment as JSON, opaque to the store; Hash its identity.
type Environment struct {
	Name        string
	Version     string
	Description string
	Spec        json.RawMessage
	Hash        string
	Created     time.Time
}

// Model is one version of a registered model. Its files are the snapshot
// Snapshot (a manifest's id in the blob store); Spec is the rest of the
// model (tags, properties) as JSON, opaque to the store; Hash its identity.
// An archived version is kept but hidden from lists and from "latest".
type Model struct {
	Name        string
	Version     string
	Type        string
	Description string
	Spec        json.RawMessage
	Snapshot    string
	Hash        string
	Archived    bool
	Created     time.Time
}

// DataAsset is one version of a registered data asset (uri_file or
// uri_folder), kept as a Model is: its files are the snapshot Snapshot,
// Spec the rest of it (tags) as JSON, opaque to the store, Hash its
// identity. An archived version is kept but hidden from lists and from
// "latest".
type DataAsset struct {
	Name        string
	Version     string
	Type        string
	Description string
	Spec        json.RawMessage
	Snapshot    string
	Hash        string
	Archived    bool
	Created     time.Time
}

// Component is one version of a registered command component. Spec is
// the component as JSON, opaque to the store; CodeSnapshot its uploaded
// code; Hash its content digest.
type Component struct {
	Name         string
	Version      string
	Description  string
	Spec         json.RawMessage
	CodeSnapshot string
	Hash         string
	Created      time.Time
}

// Assets keeps the workspace's registered, versioned assets: environments,
// models, data assets and command components. A stored version is never
// replaced (another of the same name and version is ErrConflict), and lists
// give a name's versions in the order they were registered. A model or data
// asset version can be archived: it is kept, with Archived set. Its methods
// are safe for concurrent use, and keep the contract common to every part of
// Store: errors wrap ErrNotFound or ErrConflict where those apply, and a
// returned error leaves stored state unchanged.
type Assets interface {
	// CreateEnvironment stores a version of an environment; ErrConflict
	// if that name and version exist.
	CreateEnvironment(ctx context.Context, e Environment) error
	// GetEnvironment returns one version; ErrNotFound if there is none.
	GetEnvironment(ctx context.Context, name, version string) (Environment, error)
	// ListEnvironments returns every version of the named environment, or
	// of all environments when name is empty, ordered by name and then by
	// registration (so a name's last entry is its latest version).
	ListEnvironments(ctx context.Context, name string) ([]Environment, error)

	// CreateModel stores a version of a model; ErrConflict if that name
	// and version exist.
	CreateModel(ctx context.Context, m Model) error
	// GetModel returns one version, archived or not; ErrNotFound if there
	// is none.
	GetModel(ctx context.Context, name, version string) (Model, error)
	// ListModels returns every version of the named model, or of all
	// models when name is empty, archived ones too, ordered by name and
	// then by registration.
	ListModels(ctx context.Context, name string) ([]Model, error)
	// SetModelArchived archives (or restores) one version and returns it;
	// ErrNotFound if there is none. Setting the state it has is not an
	// error.
	SetModelArchived(ctx context.Context, name, version string, archived bool) (Model, error)

	// CreateData stores a version of a data asset; ErrConflict if that
	// name and version exist.
	CreateData(ctx context.Context, d DataAsset) error
	// GetData returns one version, archived or not; ErrNotFound if there
	// is none.
	GetData(ctx context.Context, name, version string) (DataAsset, error)
	// ListData returns every version of the named data asset, or of all
	// of them when name is empty, archived ones too, ordered by name and
	// then by registration.
	ListData(ctx context.Context, name string) ([]DataAsset, error)
	// SetDataArchived archives (or restores) one version and returns it;
	// ErrNotFound if there is none. Setting the state it has is not an
	// error.
	SetDataArchived(ctx context.Context, name, version string, archived bool) (DataAsset, error)

	// CreateComponent stores a version of a command component;
	// ErrConflict if that name and version exist.
	CreateComponent(ctx context.Context, c Component) error
	// GetComponent returns one version; ErrNotFound if there is none.
	GetComponent(ctx context.Context, name, version string) (Component, error)
	// ListComponents returns every version of the named component, or of
	// all components when name is empty, ordered by name and then by
	// registration.
	ListComponents(ctx context.Context, name string) ([]Component, error)
}
