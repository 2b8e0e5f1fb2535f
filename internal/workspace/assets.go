package workspace

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
// the job core asks of them when a job is submitted. The Service makes
// one (Service.Assets); it is safe for concurrent use.
type Assets struct {
	st   assetStore
	core assetCore
	now  func() time.Time

	environments        *envcatalog.Catalog // curated environments, after the registered ones
	defaultDatastoreDir string              // the built-in workspaceblobstore's folder; "" for none
	blobEndpoints       map[string]string   // storage accounts' stand-in blob services (Config.BlobEndpoints)
}

// assetStore is the part of the store the assets read and write: the
// assets and datastores themselves, and the computes a reference may name.
type assetStore interface {
	store.Assets
	store.Datastores
	store.Computes
}

// assetCore is what the assets need of the job core, which keeps the
// uploaded snapshots (shared with jobs) and the computes: *Service is one.
type assetCore interface {
	requireSnapshot(id, field string) error
	readSnapshot(id string) (*snapshot.Manifest, error)
	unknownCompute(ctx context.Context, name string) error
}

func newAssets(cfg Config, core assetCore) *Assets {
	return &Assets{st: cfg.Store, core: core, now: cfg.Now, environments: cfg.Environments,
		defaultDatastoreDir: cfg.DefaultDatastoreDir, blobEndpoints: cfg.BlobEndpoints}
}

// Assets are the workspace's registered models, data assets, environments,
// components and datastores: what the API's asset routes call.
func (s *Service) Assets() *Assets { return s.assets }
