package server

import (
	"log/slog"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/batch"
	"github.com/ferry-ml/ferry/internal/workload/sweeps"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// registerWorkloads plugs what is built from jobs into the job core, each
// workload a package of its own under internal/workload: one line each;
// it returns those whose routes the API serves.
func registerWorkloads(ws *workspace.Service, st store.Store, log *slog.Logger) api.Workloads {
	var wl api.Workloads
	sweeps.Register(ws, sweeps.New(ws, st, log))
	wl.Batch = batch.New(ws, st, log)
	return wl
}
