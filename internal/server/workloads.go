package server

import (
	"context"
	"log/slog"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/online"
	"github.com/ferry-ml/ferry/internal/workload/sweeps"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// registerWorkloads plugs what is built from jobs into the job core, each
// workload a package of its own under internal/workload: a line or two
// each. It returns those whose routes the API serves.
func registerWorkloads(ctx context.Context, ws *workspace.Service, st store.Store, log *slog.Logger, eps online.Config) (api.Workloads, error) {
	sweeps.Register(ws, sweeps.New(ws, st, log))
	endpoints, err := online.New(ctx, ws, st, eps)
	if err != nil {
		return api.Workloads{}, err
	}
	online.Register(ws, endpoints)
	return api.Workloads{Online: endpoints}, nil
}
