package store

import (
	"context"
	"encoding/json"
	"time"
)

// SweepTrial is one trial of a sweep job: its index (from 0), the name
// of its job and its parameters (JSON owned by the workspace), stored
// before the job is created.
type SweepTrial struct {
	Sweep   string
	Index   int
	Job     string
	Params  json.RawMessage
	Created time.Time
}

// Sweeps keeps the server's record of the sweep jobs it drives: which of
// them are still open, and the trials each has made. A sweep is named by its
// job. Its methods are safe for concurrent use, and keep the contract common
// to every part of Store: errors wrap ErrNotFound or ErrConflict where those
// apply, and a returned error leaves stored state unchanged.
type Sweeps interface {
	// CreateSweep records that the job named name is a sweep the server
	// drives; ErrConflict if it is recorded already.
	CreateSweep(ctx context.Context, name string, created time.Time) error
	// ListOpenSweeps returns the names of the sweeps not marked done, in
	// the order they were created.
	ListOpenSweeps(ctx context.Context) ([]string, error)
	// SweepDone marks a sweep done; ErrNotFound if there is none.
	SweepDone(ctx context.Context, name string) error

	// AddSweepTrial stores a trial of a sweep; ErrConflict if the sweep
	// has a trial of that index.
	AddSweepTrial(ctx context.Context, t SweepTrial) error
	// ListSweepTrials returns a sweep's trials by index, empty when it has
	// none (or there is no such sweep).
	ListSweepTrials(ctx context.Context, sweep string) ([]SweepTrial, error)
}
