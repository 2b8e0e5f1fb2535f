// Package storetest is the semantics suite every store.Store implementation
// must pass: the executable form of the contract in package store's doc
// comments, plus the choices that contract leaves open, pinned here so that
// every implementation makes the same ones:
//
//   - Times are kept in UTC with at least microsecond precision: a stored time
//     reads back as the same instant, in time.UTC, differing from what was
//     given by less than a microsecond. The zero time reads back as zero (and
//     the Unix epoch as the epoch, not as zero).
//   - Returned records (CreateJob's and the Update methods') equal what a
//     later Get returns.
//   - JSON fields (Spec, Inputs, Outputs, Environment, Placement, Facts) read
//     back byte for byte, whitespace and key order included; nil reads back as
//     nil.
//   - ExitCode nil and ExitCode 0 are different values.
//   - UpdateJob ignores changes fn makes to Name and Seq; UpdateCompute and
//     UpdateNode ignore changes to Name. CreateJob ignores the Seq it is
//     given. The event given to CreateJob or returned by UpdateJob's fn is
//     stored for that job whatever its Job field says.
//   - ListEvents, ListMetrics and LatestMetrics return ErrNotFound for a
//     missing job. Lists and maps are empty, never nil, when there is nothing.
//   - Metric values NaN and ±Inf round-trip.
//   - The zero time sorts before every other time (ListNodes,
//     ListComputeEvents).
//   - DeleteCompute leaves the compute's nodes and events alone.
//
// Run runs the whole suite. It is made of one suite per part of store.Store
// (RunComputes, RunQuotas, RunJobs, RunMetrics, RunAssets, RunDatastores,
// RunSchedules, RunPipelines, RunEndpoints, RunBatchEndpoints, RunSweeps,
// RunTokens, RunSessions), each taking a constructor of just the part it
// checks, and of the parts its tests also read or set up where the records
// of its part depend on theirs (metrics on jobs, run tokens on jobs, ...).
package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ferry-ml/ferry/internal/store"
)

// Run runs every suite below, the whole contract of store.Store, on stores
// from open. open must return a new, empty store each time it is called and
// arrange for it to be closed with t.Cleanup. The suites' subtests are
// subtests of t itself (Compute/CreateGet, Job/List, ...), so that their
// names do not depend on which suite runs them.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	RunComputes(t, open)
	RunQuotas(t, open)
	RunJobs(t, open)
	RunMetrics(t, open)
	RunAssets(t, open)
	RunDatastores(t, open)
	RunSchedules(t, open)
	RunPipelines(t, open)
	RunEndpoints(t, open)
	RunBatchEndpoints(t, open)
	RunSweeps(t, open)
	RunTokens(t, open)
	RunSessions(t, open)
}

// test is one subtest of a suite: f checks a new, empty store of type S.
type test[S any] struct {
	name string
	f    func(t *testing.T, s S)
}

// run runs each of tests as a subtest of t, by its name, on a store of its
// own from open.
func run[S any](t *testing.T, open func(t *testing.T) S, tests []test[S]) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f(t, open(t))
		})
	}
}

// t0 is a base time with microsecond precision in a zone other than UTC, so
// that tests see the store keep the instant, not the zone.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.FixedZone("UTC+2", 2*3600))

var errTest = errors.New("storetest: fn failed")

func ptr[T any](v T) *T { return &v }

// diff compares stored records. cmp uses time.Time's Equal method, so times
// are compared as instants.
func diff(want, got any) string {
	return cmp.Diff(want, got, cmpopts.EquateNaNs())
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}
