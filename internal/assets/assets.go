package assets

import (
	"context"
	"time"

	"github.com/ferry-ml/ferry/internal/envcatalog"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/store"
)

// Assets are the workspace's registries: models (models.go), data assets
// (data.go), environments and the catalog of curated ones
// (environments.go), command components (components.go) and datastores
// (datastores.go), the checks of references to them (references.go), and
// the resolution of a job's inputs and environment against them, which
// the job core asks of them when a job is submitted. The workspace's
// Service makes one (Service.Assets); it is safe for concurrent use.
type Assets struct {
	st   Store
	core Core
	now  func() time.Time

	environments        *envcatalog.Catalog // curated environments, after the registered ones
	defaultDatastoreDir string              // the built-in workspaceblobstore's folder; "" for none
	blobEndpoints       map[string]string   // storage accounts' stand-in blob services (Config.BlobEndpoints)
}

// Store is the part of the store the assets read and write: the
// assets and datastores themselves, and the computes a reference may name.
type Store interface {
	store.Assets
	store.Datastores
	store.Computes
}

// Core is what the assets need of the job core, which keeps the
// uploaded snapshots (shared with jobs) and the computes: the workspace's
// Service provides one. RequireSnapshot fails unless snapshot id was
// uploaded (field names the request's field), ReadSnapshot returns an
// uploaded snapshot's manifest, and UnknownCompute the NotFound error for
// a compute that is not attached, naming those that are.
type Core interface {
	RequireSnapshot(id, field string) error
	ReadSnapshot(id string) (*snapshot.Manifest, error)
	UnknownCompute(ctx context.Context, name string) error
}

// New returns the registries over cfg's store; core is the job core they
// ask about snapshots and computes.
func New(cfg Config, core Core) *Assets {
	return &Assets{st: cfg.Store, core: core, now: cfg.Now, environments: cfg.Environments,
		defaultDatastoreDir: cfg.DefaultDatastoreDir, blobEndpoints: cfg.BlobEndpoints}
}
