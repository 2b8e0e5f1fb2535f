package store

import (
	"context"
	"time"
)

// Metric is one logged value of a job's metric.
type Metric struct {
	Name  string
	Value float64
	Step  int64
	Time  time.Time
}

// RunValue is one of a job's MLflow params or tags: Kind is "param" or
// "tag"; a key has one value, the last one set.
type RunValue struct {
	Kind  string
	Key   string
	Value string
}

// Metrics keeps what a job's run logs: metric values, params and tags, each
// of one stored job. Its methods are safe for concurrent use, and keep the
// contract common to every part of Store: errors wrap ErrNotFound or
// ErrConflict where those apply, and a returned error leaves stored state
// unchanged. Every method reports ErrNotFound for a missing job but
// LatestMetricsOf, which leaves it out of its map. NaN and infinite metric
// values round-trip.
type Metrics interface {
	// AddMetrics appends metric values to a job; ErrNotFound if no such job.
	AddMetrics(ctx context.Context, job string, ms []Metric) error
	// AddNumberedMetrics appends ms, numbered first, first+1, ... in the
	// sequence of the runner of node rank of the job's attempt, skipping
	// those numbered at or below the highest number stored for that
	// sequence (an earlier call stored them), all in one transaction. It
	// returns the highest number stored; ErrNotFound if no such job. first
	// must be ≥ 1.
	AddNumberedMetrics(ctx context.Context, job string, attempt, rank int, first int64, ms []Metric) (int64, error)
	// ListMetrics returns a job's values of one metric (all metrics if name
	// is empty) in the order they were added.
	ListMetrics(ctx context.Context, job, name string) ([]Metric, error)
	// LatestMetrics returns, per metric name, the value added last.
	LatestMetrics(ctx context.Context, job string) (map[string]Metric, error)
	// LatestMetricsOf returns what LatestMetrics returns for each of jobs,
	// keyed by job, in one read: a list of jobs shows their metrics without
	// a query per job. A job that has no metrics, or does not exist, has no
	// key; the map is empty, never nil.
	LatestMetricsOf(ctx context.Context, jobs []string) (map[string]map[string]Metric, error)

	// SetRunValues stores a job's params and tags, replacing the value
	// already under a kind and key, all in one transaction; ErrNotFound if
	// no such job.
	SetRunValues(ctx context.Context, job string, vs []RunValue) error
	// ListRunValues returns a job's params and tags ordered by kind, then
	// key; empty, never nil, when it has none; ErrNotFound if no such job.
	ListRunValues(ctx context.Context, job string) ([]RunValue, error)
}
