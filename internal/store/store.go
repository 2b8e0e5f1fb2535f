// Package store defines how Ferry keeps workspace state: compute targets with
// their nodes, scaling events and quotas, jobs with their status history,
// metrics and API tokens.
//
// Store is the whole, made of one small interface per aggregate (the records
// that change together): Computes, Quotas, Jobs, Metrics, Sweeps, Pipelines,
// Schedules, Assets, Datastores, Endpoints, BatchEndpoints, Tokens and
// Sessions, each in its own file beside the records it keeps. It has an
// SQLite implementation (sqlite/) and, later, a PostgreSQL one. Every
// implementation must pass storetest.Run, which is the executable form of the
// contract written in the doc comments of this package: it runs one suite
// per part (storetest.RunComputes, storetest.RunJobs, ...).
//
// Blobs (snapshot files, logs, outputs) are not kept here; see package blob.
package store

import "errors"

// ErrNotFound is wrapped by every error that reports a missing record.
var ErrNotFound = errors.New("not found")

// ErrConflict is wrapped by every error that reports a record that already
// exists (a duplicate name).
var ErrConflict = errors.New("already exists")

// ErrNoSpace is wrapped by a write that failed because the disk (or quota)
// under the store is full; nothing of it was stored.
var ErrNoSpace = errors.New("the store's disk is full")

// Store keeps workspace state durably: it is every part below and Close.
// Code that needs one part can name just that part.
//
// Every part keeps the same contract. All methods are safe for concurrent
// use. Errors wrap ErrNotFound or ErrConflict where those apply, so callers
// test them with errors.Is. A returned error leaves stored state unchanged.
//
// Every implementation makes the same choices, which storetest checks:
// times are kept in UTC to the microsecond (finer parts are cut off) and the
// zero time reads back as zero; JSON fields (Spec, Inputs, Outputs,
// Environment, Placement, Facts) come back byte for byte; empty results are
// empty, not nil. What a part adds to this is in its own doc comment.
type Store interface {
	Computes
	Quotas
	Jobs
	Metrics
	Sweeps
	Pipelines
	Schedules
	Assets
	Datastores
	Endpoints
	BatchEndpoints
	Tokens
	Sessions

	// Close releases the store.
	Close() error
}
