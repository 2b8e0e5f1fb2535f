package workspace

import (
	"context"

	"github.com/ferry-ml/ferry/internal/assets"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

// Assets are the workspace's registered models, data assets, environments,
// components and datastores: what the API's asset routes call.
func (s *Service) Assets() *assets.Assets { return s.assets }

// newAssets makes the registries of s from the workspace's configuration.
func newAssets(cfg Config, s *Service) *assets.Assets {
	return assets.New(assets.Config{Store: cfg.Store, Now: cfg.Now, Environments: cfg.Environments,
		DefaultDatastoreDir: cfg.DefaultDatastoreDir, BlobEndpoints: cfg.BlobEndpoints}, (*assetCore)(s))
}

// assetCore is the Service as the assets see it (assets.Core): the keeper
// of uploaded snapshots and of computes. It is a view, not a copy, so the
// Service's exported surface does not grow by what only the assets call.
type assetCore Service

func (c *assetCore) RequireSnapshot(id, field string) error {
	return (*Service)(c).requireSnapshot(id, field)
}

func (c *assetCore) ReadSnapshot(id string) (*snapshot.Manifest, error) {
	return (*Service)(c).readSnapshot(id)
}

func (c *assetCore) UnknownCompute(ctx context.Context, name string) error {
	return (*Service)(c).unknownCompute(ctx, name)
}
