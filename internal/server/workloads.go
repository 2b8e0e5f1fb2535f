package server

import (
	"context"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/batch"
	"github.com/ferry-ml/ferry/internal/workload/online"
	"github.com/ferry-ml/ferry/internal/workload/pipelines"
	"github.com/ferry-ml/ferry/internal/workload/schedules"
	"github.com/ferry-ml/ferry/internal/workload/sweeps"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// registerWorkloads plugs what is built from jobs into the job core, each
// workload a package of its own under internal/workload: a line or two
// each. It returns those whose routes the API serves. Schedules fire
// pipeline jobs through the pipeline workload.
func registerWorkloads(ctx context.Context, ws *workspace.Service, st store.Store, cfg Config, eps online.Config) (api.Workloads, error) {
	log := cfg.Log
	var wl api.Workloads
	sweeps.Register(ws, sweeps.New(ws, st, log))
	pipes := pipelines.New(ws, st, log)
	pipelines.Register(ws, pipes)
	wl.Pipelines = pipes
	scheds := schedules.New(ws, st, pipes, schedules.Config{Minute: cfg.ScheduleMinute}, log)
	schedules.Register(ws, scheds)
	wl.Schedules = scheds
	wl.Batch = batch.New(ws, st, log)
	endpoints, err := online.New(ctx, ws, st, eps)
	if err != nil {
		return api.Workloads{}, err
	}
	online.Register(ws, endpoints)
	wl.Online = endpoints
	return wl, nil
}
