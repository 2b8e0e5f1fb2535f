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
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ferry-ml/ferry/internal/store"
)

// Run runs the suite. open must return a new, empty store each time it is
// called and arrange for it to be closed with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, s store.Store)
	}{
		{"Compute/CreateGet", testComputeCreateGet},
		{"Compute/NilSpec", testComputeNilSpec},
		{"Compute/CreateConflict", testComputeCreateConflict},
		{"Compute/GetNotFound", testComputeGetNotFound},
		{"Compute/List", testComputeList},
		{"Compute/Update", testComputeUpdate},
		{"Compute/UpdateFnError", testComputeUpdateFnError},
		{"Compute/UpdateNotFound", testComputeUpdateNotFound},
		{"Compute/UpdateIgnoresName", testComputeUpdateIgnoresName},
		{"Compute/Delete", testComputeDelete},
		{"Compute/DeleteKeepsNodesAndEvents", testComputeDeleteKeepsNodesAndEvents},

		{"Node/RoundTrip", testNodeRoundTrip},
		{"Node/ZeroValues", testNodeZeroValues},
		{"Node/CreateConflict", testNodeCreateConflict},
		{"Node/GetNotFound", testNodeGetNotFound},
		{"Node/List", testNodeList},
		{"Node/Update", testNodeUpdate},
		{"Node/UpdateFnError", testNodeUpdateFnError},
		{"Node/UpdateNotFound", testNodeUpdateNotFound},
		{"Node/UpdateIgnoresName", testNodeUpdateIgnoresName},
		{"Node/UpdateConcurrent", testNodeUpdateConcurrent},
		{"Node/Delete", testNodeDelete},

		{"ComputeEvent/Order", testComputeEventOrder},
		{"ComputeEvent/Limit", testComputeEventLimit},
		{"ComputeEvent/Empty", testComputeEventEmpty},

		{"Quota/SetListDelete", testQuotaSetListDelete},
		{"Quota/EnabledSizes", testQuotaEnabledSizes},

		{"Job/CreateAssignsSeq", testJobCreateAssignsSeq},
		{"Job/CreateConcurrent", testJobCreateConcurrent},
		{"Job/CreateStoresFirstEvent", testJobCreateStoresFirstEvent},
		{"Job/CreateConflict", testJobCreateConflict},
		{"Job/RoundTrip", testJobRoundTrip},
		{"Job/ZeroValues", testJobZeroValues},
		{"Job/ExitCodeZero", testJobExitCodeZero},
		{"Job/TimePrecision", testJobTimePrecision},
		{"Job/GetNotFound", testJobGetNotFound},
		{"Job/List", testJobList},
		{"Job/ListByHandle", testJobListByHandle},
		{"Job/Count", testJobCount},
		{"Job/Update", testJobUpdate},
		{"Job/UpdateNilEvent", testJobUpdateNilEvent},
		{"Job/UpdateFnError", testJobUpdateFnError},
		{"Job/UpdateMany", testJobUpdateMany},
		{"Job/UpdateManyTokenConflict", testJobUpdateManyTokenConflict},
		{"Job/UpdateNotFound", testJobUpdateNotFound},
		{"Job/UpdateIgnoresNameAndSeq", testJobUpdateIgnoresNameAndSeq},
		{"Job/UpdateConcurrent", testJobUpdateConcurrent},
		{"Job/ListEventsOrder", testJobListEventsOrder},
		{"Job/ListEventsNotFound", testJobListEventsNotFound},
		{"Job/Preemptions", testJobPreemptions},
		{"Job/PreemptionsNotFound", testJobPreemptionsNotFound},

		{"Metrics/AddList", testMetricsAddList},
		{"Metrics/Latest", testMetricsLatest},
		{"Metrics/LatestOf", testMetricsLatestOf},
		{"Metrics/SpecialValues", testMetricsSpecialValues},
		{"Metrics/Empty", testMetricsEmpty},
		{"Metrics/NotFound", testMetricsNotFound},
		{"Metrics/NumberedOnce", testMetricsNumberedOnce},
		{"RunValues", testRunValues},

		{"Environment/CreateGet", testEnvironmentCreateGet},
		{"Environment/Conflict", testEnvironmentConflict},
		{"Environment/NotFound", testEnvironmentNotFound},
		{"Environment/ListOrder", testEnvironmentListOrder},

		{"Model/CreateGet", testModelCreateGet},
		{"Model/Conflict", testModelConflict},
		{"Model/NotFound", testModelNotFound},
		{"Model/ListOrder", testModelListOrder},
		{"Model/Archive", testModelArchive},

		{"Data/CreateGet", testDataCreateGet},
		{"Data/ConflictNotFound", testDataConflictNotFound},
		{"Data/ListArchive", testDataListArchive},
		{"Datastore/Lifecycle", testDatastoreLifecycle},

		{"Schedule/CRUD", testScheduleCRUD},
		{"Schedule/FireOnce", testScheduleFireOnce},
		{"Schedule/FirePipeline", testScheduleFirePipeline},
		{"Component/CreateGetList", testComponentCreateGetList},
		{"Pipeline/Steps", testPipelineSteps},
		{"Pipeline/Reuse", testPipelineReuse},

		{"Endpoint/CreateGet", testEndpointCreateGet},
		{"Endpoint/Conflict", testEndpointConflict},
		{"Endpoint/NotFound", testEndpointNotFound},
		{"Endpoint/Update", testEndpointUpdate},
		{"Endpoint/ListDelete", testEndpointListDelete},
		{"Deployment/Lifecycle", testDeploymentLifecycle},
		{"BatchEndpoint/Lifecycle", testBatchEndpointLifecycle},

		{"Sweep/Lifecycle", testSweepLifecycle},
		{"Sweep/Trials", testSweepTrials},

		{"Token/CreateLookup", testTokenCreateLookup},
		{"Token/Conflict", testTokenConflict},
		{"Token/NotFound", testTokenNotFound},
		{"Token/Delete", testTokenDelete},
		{"Token/WithJobUpdate", testTokenWithJobUpdate},
		{"Token/WithJobUpdateFnError", testTokenWithJobUpdateFnError},
		{"Token/WithJobUpdateConflict", testTokenWithJobUpdateConflict},

		{"Session/Lifecycle", testSessionLifecycle},
	}
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

func testCompute(name string) store.Compute {
	return store.Compute{
		Name:     name,
		Type:     "amlcompute",
		Spec:     json.RawMessage(`{"size": "Standard_NC6", "max_instances": 4}`),
		State:    "Succeeded",
		Created:  t0,
		Modified: t0.Add(time.Minute),
	}
}

func testJob(name string) store.Job {
	return store.Job{
		Name:    name,
		Compute: "cpu",
		Status:  "Queued",
		Created: t0,
	}
}

func firstEvent(name string) store.Event {
	return store.Event{Job: name, Time: t0, To: "Queued", Reason: "submitted"}
}

func mustCreateCompute(t *testing.T, s store.Store, c store.Compute) {
	t.Helper()
	if err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatalf("CreateCompute(%q): %v", c.Name, err)
	}
}

func mustGetCompute(t *testing.T, s store.Store, name string) store.Compute {
	t.Helper()
	c, err := s.GetCompute(context.Background(), name)
	if err != nil {
		t.Fatalf("GetCompute(%q): %v", name, err)
	}
	return c
}

func mustCreateJob(t *testing.T, s store.Store, j store.Job) store.Job {
	t.Helper()
	got, err := s.CreateJob(context.Background(), j, firstEvent(j.Name))
	if err != nil {
		t.Fatalf("CreateJob(%q): %v", j.Name, err)
	}
	return got
}

func mustGetJob(t *testing.T, s store.Store, name string) store.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), name)
	if err != nil {
		t.Fatalf("GetJob(%q): %v", name, err)
	}
	return j
}

func mustListJobs(t *testing.T, s store.Store, f store.JobFilter) []store.Job {
	t.Helper()
	js, err := s.ListJobs(context.Background(), f)
	if err != nil {
		t.Fatalf("ListJobs(%+v): %v", f, err)
	}
	return js
}

func mustListEvents(t *testing.T, s store.Store, job string) []store.Event {
	t.Helper()
	es, err := s.ListEvents(context.Background(), job)
	if err != nil {
		t.Fatalf("ListEvents(%q): %v", job, err)
	}
	return es
}

func mustAddMetrics(t *testing.T, s store.Store, job string, ms ...store.Metric) {
	t.Helper()
	if err := s.AddMetrics(context.Background(), job, ms); err != nil {
		t.Fatalf("AddMetrics(%q): %v", job, err)
	}
}

func mustListMetrics(t *testing.T, s store.Store, job, name string) []store.Metric {
	t.Helper()
	ms, err := s.ListMetrics(context.Background(), job, name)
	if err != nil {
		t.Fatalf("ListMetrics(%q, %q): %v", job, name, err)
	}
	return ms
}

func mustLatestMetrics(t *testing.T, s store.Store, job string) map[string]store.Metric {
	t.Helper()
	ms, err := s.LatestMetrics(context.Background(), job)
	if err != nil {
		t.Fatalf("LatestMetrics(%q): %v", job, err)
	}
	return ms
}

func mustCreateToken(t *testing.T, s store.Store, tok store.Token) {
	t.Helper()
	if err := s.CreateToken(context.Background(), tok); err != nil {
		t.Fatalf("CreateToken(%s %q): %v", tok.Kind, tok.Subject, err)
	}
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

// --- compute targets ---

func testComputeCreateGet(t *testing.T, s store.Store) {
	want := testCompute("gpu-cluster")
	mustCreateCompute(t, s, want)
	if d := diff(want, mustGetCompute(t, s, "gpu-cluster")); d != "" {
		t.Errorf("GetCompute after CreateCompute (-want +got):\n%s", d)
	}
}

func testComputeNilSpec(t *testing.T, s store.Store) {
	want := store.Compute{Name: "local", Type: "local", State: "Succeeded"}
	mustCreateCompute(t, s, want)
	got := mustGetCompute(t, s, "local")
	if d := diff(want, got); d != "" {
		t.Errorf("GetCompute (-want +got):\n%s", d)
	}
	if got.Spec != nil {
		t.Errorf("Spec = %q, want nil", got.Spec)
	}
	if !got.Created.IsZero() || !got.Modified.IsZero() {
		t.Errorf("Created, Modified = %v, %v; want zero times", got.Created, got.Modified)
	}
}

func testComputeCreateConflict(t *testing.T, s store.Store) {
	first := testCompute("gpu-cluster")
	mustCreateCompute(t, s, first)
	second := testCompute("gpu-cluster")
	second.Type = "kubernetes"
	second.Spec = json.RawMessage(`{}`)
	wantErrIs(t, "second CreateCompute", s.CreateCompute(context.Background(), second), store.ErrConflict)
	if d := diff(first, mustGetCompute(t, s, "gpu-cluster")); d != "" {
		t.Errorf("first target changed by a conflicting create (-want +got):\n%s", d)
	}
}

func testComputeGetNotFound(t *testing.T, s store.Store) {
	_, err := s.GetCompute(context.Background(), "nope")
	wantErrIs(t, "GetCompute of a missing target", err, store.ErrNotFound)
}

func testComputeList(t *testing.T, s store.Store) {
	got, err := s.ListComputes(context.Background())
	if err != nil {
		t.Fatalf("ListComputes on an empty store: %v", err)
	}
	if got == nil || len(got) != 0 {
		t.Errorf("ListComputes on an empty store = %#v, want an empty, non-nil slice", got)
	}

	var want []store.Compute
	for _, name := range []string{"b", "c", "a"} {
		mustCreateCompute(t, s, testCompute(name))
	}
	for _, name := range []string{"a", "b", "c"} {
		want = append(want, testCompute(name))
	}
	got, err = s.ListComputes(context.Background())
	if err != nil {
		t.Fatalf("ListComputes: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("ListComputes, ordered by name (-want +got):\n%s", d)
	}
}

func testComputeUpdate(t *testing.T, s store.Store) {
	mustCreateCompute(t, s, testCompute("gpu-cluster"))
	want := testCompute("gpu-cluster")
	want.State = "Resizing"
	want.Spec = json.RawMessage(`{"max_instances":8}`)
	want.Status = json.RawMessage(`{"last_fired":["2026-01-02T18:00:00Z"]}`)
	want.Modified = t0.Add(time.Hour)

	got, err := s.UpdateCompute(context.Background(), "gpu-cluster", func(c *store.Compute) error {
		if d := diff(testCompute("gpu-cluster"), *c); d != "" {
			t.Errorf("fn got (-want +got):\n%s", d)
		}
		c.State = want.State
		c.Spec = want.Spec
		c.Status = want.Status
		c.Modified = want.Modified
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateCompute: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("UpdateCompute returned (-want +got):\n%s", d)
	}
	if d := diff(want, mustGetCompute(t, s, "gpu-cluster")); d != "" {
		t.Errorf("GetCompute after UpdateCompute (-want +got):\n%s", d)
	}
}

func testComputeUpdateFnError(t *testing.T, s store.Store) {
	want := testCompute("gpu-cluster")
	mustCreateCompute(t, s, want)
	_, err := s.UpdateCompute(context.Background(), "gpu-cluster", func(c *store.Compute) error {
		c.State = "Failed"
		c.Spec = nil
		return errTest
	})
	if err != errTest {
		t.Errorf("UpdateCompute with a failing fn: got error %v, want fn's error as is", err)
	}
	if d := diff(want, mustGetCompute(t, s, "gpu-cluster")); d != "" {
		t.Errorf("target changed by an update whose fn failed (-want +got):\n%s", d)
	}
}

func testComputeUpdateNotFound(t *testing.T, s store.Store) {
	called := false
	_, err := s.UpdateCompute(context.Background(), "nope", func(*store.Compute) error {
		called = true
		return nil
	})
	wantErrIs(t, "UpdateCompute of a missing target", err, store.ErrNotFound)
	if called {
		t.Error("UpdateCompute called fn for a missing target")
	}
}

func testComputeUpdateIgnoresName(t *testing.T, s store.Store) {
	mustCreateCompute(t, s, testCompute("gpu-cluster"))
	want := testCompute("gpu-cluster")
	want.State = "Stopped"
	got, err := s.UpdateCompute(context.Background(), "gpu-cluster", func(c *store.Compute) error {
		c.Name = "renamed"
		c.State = "Stopped"
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateCompute: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("UpdateCompute returned (-want +got):\n%s", d)
	}
	if d := diff(want, mustGetCompute(t, s, "gpu-cluster")); d != "" {
		t.Errorf("GetCompute (-want +got):\n%s", d)
	}
	_, err = s.GetCompute(context.Background(), "renamed")
	wantErrIs(t, "GetCompute of the name fn set", err, store.ErrNotFound)
}

func testComputeDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateCompute(t, s, testCompute("a"))
	mustCreateCompute(t, s, testCompute("b"))
	if err := s.DeleteCompute(ctx, "a"); err != nil {
		t.Fatalf("DeleteCompute: %v", err)
	}
	_, err := s.GetCompute(ctx, "a")
	wantErrIs(t, "GetCompute after DeleteCompute", err, store.ErrNotFound)
	wantErrIs(t, "second DeleteCompute", s.DeleteCompute(ctx, "a"), store.ErrNotFound)
	mustGetCompute(t, s, "b")
	// The name is free again.
	mustCreateCompute(t, s, testCompute("a"))
}

// --- jobs ---

func testJobCreateAssignsSeq(t *testing.T, s store.Store) {
	var prev int64
	for i, name := range []string{"j1", "j2", "j3"} {
		j := testJob(name)
		j.Seq = int64(1000 - i) // ignored
		got := mustCreateJob(t, s, j)
		if i > 0 && got.Seq <= prev {
			t.Errorf("CreateJob(%q).Seq = %d, want more than the previous job's %d", name, got.Seq, prev)
		}
		prev = got.Seq
		if stored := mustGetJob(t, s, name).Seq; stored != got.Seq {
			t.Errorf("GetJob(%q).Seq = %d, CreateJob returned %d", name, stored, got.Seq)
		}
	}
}

func testJobCreateConcurrent(t *testing.T, s store.Store) {
	const n = 20
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seqs = map[int64]string{}
	)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("job-%02d", i)
			j, err := s.CreateJob(context.Background(), testJob(name), firstEvent(name))
			if err != nil {
				t.Errorf("CreateJob(%q): %v", name, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := seqs[j.Seq]; dup {
				t.Errorf("jobs %q and %q both got Seq %d", other, name, j.Seq)
			}
			seqs[j.Seq] = name
		})
	}
	wg.Wait()
	js := mustListJobs(t, s, store.JobFilter{})
	if len(js) != n {
		t.Fatalf("ListJobs returned %d jobs, want %d", len(js), n)
	}
	for i, j := range js {
		if seqs[j.Seq] != j.Name {
			t.Errorf("ListJobs: %q has Seq %d, CreateJob returned it for %q", j.Name, j.Seq, seqs[j.Seq])
		}
		if i > 0 && j.Seq <= js[i-1].Seq {
			t.Errorf("ListJobs not ordered by Seq: %d after %d", j.Seq, js[i-1].Seq)
		}
		if es := mustListEvents(t, s, j.Name); len(es) != 1 {
			t.Errorf("job %q has %d events, want 1", j.Name, len(es))
		}
	}
}

func testJobCreateStoresFirstEvent(t *testing.T, s store.Store) {
	first := store.Event{Job: "some-other-name", Time: t0, From: "", To: "Queued", Reason: "submitted by alice"}
	if _, err := s.CreateJob(context.Background(), testJob("j1"), first); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	want := first
	want.Job = "j1"
	if d := diff([]store.Event{want}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("ListEvents after CreateJob (-want +got):\n%s", d)
	}
}

func testJobCreateConflict(t *testing.T, s store.Store) {
	want := mustCreateJob(t, s, testJob("j1"))
	second := testJob("j1")
	second.Status = "Running"
	second.Compute = "gpu"
	_, err := s.CreateJob(context.Background(), second, store.Event{Time: t0, To: "Running", Reason: "second"})
	wantErrIs(t, "second CreateJob", err, store.ErrConflict)
	if d := diff(want, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("first job changed by a conflicting create (-want +got):\n%s", d)
	}
	if d := diff([]store.Event{firstEvent("j1")}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("events changed by a conflicting create (-want +got):\n%s", d)
	}
	if js := mustListJobs(t, s, store.JobFilter{}); len(js) != 1 {
		t.Errorf("ListJobs after a conflicting create returned %d jobs, want 1", len(js))
	}
}

// fullJob has every field set to a value other than its zero value.
func fullJob(name string) store.Job {
	return store.Job{
		Name:           name,
		DisplayName:    "Train ResNet ✓",
		ExperimentName: "resnet",
		Compute:        "gpu-cluster",
		Status:         "Failed",
		StatusReason:   "exit status 3",
		Priority:       -5,
		Attempt:        2,
		ExitCode:       ptr(3),
		Error:          "CUDA out of memory\nsecond line",
		CreatedBy:      "alice",
		CancelBy:       "bob",
		Spec:           json.RawMessage("{\"command\": \"python train.py\",\n  \"b\": [1, 2.50, null], \"a\": {}}"),
		CodeSnapshot:   "sha256:0123abcd",
		Inputs:         json.RawMessage(`{"data":{"type":"uri_folder","path":"./data"}}`),
		Environment:    json.RawMessage(`{"kind":"python","requirements":"requirements.txt"}`),
		Placement:      json.RawMessage("{\"nodes\": [\"gpu-1\", \"gpu-2\"],\n \"gpus\": 8}"),
		Handle:         "4242_1 ✓",
		Outputs:        json.RawMessage(`[]`),
		Created:        t0,
		Started:        t0.Add(90 * time.Second),
		Ended:          t0.Add(time.Hour + 1*time.Microsecond),
		Heartbeat:      time.Unix(0, 0), // the epoch is a time, not "not yet"
	}
}

func testJobRoundTrip(t *testing.T, s store.Store) {
	want := fullJob("j1")
	created := mustCreateJob(t, s, want)
	want.Seq = created.Seq
	if d := diff(want, created); d != "" {
		t.Errorf("CreateJob returned (-want +got):\n%s", d)
	}
	got := mustGetJob(t, s, "j1")
	if d := diff(want, got); d != "" {
		t.Errorf("GetJob (-want +got):\n%s", d)
	}
	for what, tm := range map[string]time.Time{"Created": got.Created, "Started": got.Started, "Ended": got.Ended, "Heartbeat": got.Heartbeat} {
		if tm.Location() != time.UTC {
			t.Errorf("GetJob: %s is in %v, want UTC", what, tm.Location())
		}
	}
	if got.Heartbeat.IsZero() {
		t.Error("GetJob: a Heartbeat at the Unix epoch read back as the zero time")
	}
	if js := mustListJobs(t, s, store.JobFilter{}); len(js) != 1 || diff(want, js[0]) != "" {
		t.Errorf("ListJobs = %+v, want just %+v", js, want)
	}
}

func testJobZeroValues(t *testing.T, s store.Store) {
	created, err := s.CreateJob(context.Background(), store.Job{Name: "j1"}, store.Event{})
	if err != nil {
		t.Fatalf("CreateJob with zero fields: %v", err)
	}
	want := store.Job{Name: "j1", Seq: created.Seq}
	got := mustGetJob(t, s, "j1")
	if d := diff(want, got); d != "" {
		t.Errorf("GetJob (-want +got):\n%s", d)
	}
	if got.ExitCode != nil {
		t.Errorf("ExitCode = %d, want nil", *got.ExitCode)
	}
	if got.Spec != nil || got.Inputs != nil || got.Outputs != nil || got.Environment != nil || got.Placement != nil {
		t.Errorf("Spec, Inputs, Outputs, Environment, Placement = %q, %q, %q, %q, %q; want nil",
			got.Spec, got.Inputs, got.Outputs, got.Environment, got.Placement)
	}
	for what, tm := range map[string]time.Time{"Created": got.Created, "Started": got.Started, "Ended": got.Ended, "Heartbeat": got.Heartbeat} {
		if !tm.IsZero() {
			t.Errorf("%s = %v, want the zero time", what, tm)
		}
	}
	if d := diff([]store.Event{{Job: "j1"}}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("ListEvents (-want +got):\n%s", d)
	}
}

func testJobExitCodeZero(t *testing.T, s store.Store) {
	j := testJob("j1")
	j.ExitCode = ptr(0)
	mustCreateJob(t, s, j)
	got := mustGetJob(t, s, "j1")
	if got.ExitCode == nil || *got.ExitCode != 0 {
		t.Errorf("ExitCode = %v, want a pointer to 0", got.ExitCode)
	}

	got, err := s.UpdateJob(context.Background(), "j1", func(j *store.Job) (*store.Event, error) {
		j.ExitCode = nil
		return nil, nil
	})
	if err != nil {
		t.Fatalf("UpdateJob: %v", err)
	}
	if got.ExitCode != nil {
		t.Errorf("UpdateJob returned ExitCode %d, want nil", *got.ExitCode)
	}
	if got := mustGetJob(t, s, "j1"); got.ExitCode != nil {
		t.Errorf("after setting ExitCode to nil, GetJob returned %d", *got.ExitCode)
	}
}

func testJobTimePrecision(t *testing.T, s store.Store) {
	in := time.Date(2025, 3, 14, 15, 9, 26, 123456789, time.FixedZone("", -7*3600))
	j := testJob("j1")
	j.Created, j.Started = in, in.Add(time.Nanosecond)
	created := mustCreateJob(t, s, j)
	got := mustGetJob(t, s, "j1")
	if d := diff(got, created); d != "" {
		t.Errorf("CreateJob returned something else than GetJob (-get +create):\n%s", d)
	}
	for what, tm := range map[string]time.Time{"Created": got.Created, "Started": got.Started} {
		if d := tm.Sub(in).Abs(); d >= time.Microsecond {
			t.Errorf("%s = %v, %v away from %v; want less than 1µs", what, tm, d, in)
		}
		if tm.Location() != time.UTC {
			t.Errorf("%s is in %v, want UTC", what, tm.Location())
		}
	}

	updated, err := s.UpdateJob(context.Background(), "j1", func(j *store.Job) (*store.Event, error) {
		j.Heartbeat = in.Add(time.Hour)
		return nil, nil
	})
	if err != nil {
		t.Fatalf("UpdateJob: %v", err)
	}
	if d := diff(mustGetJob(t, s, "j1"), updated); d != "" {
		t.Errorf("UpdateJob returned something else than GetJob (-get +update):\n%s", d)
	}
}

func testJobGetNotFound(t *testing.T, s store.Store) {
	_, err := s.GetJob(context.Background(), "nope")
	wantErrIs(t, "GetJob of a missing job", err, store.ErrNotFound)
}

func testJobList(t *testing.T, s store.Store) {
	if js := mustListJobs(t, s, store.JobFilter{}); js == nil || len(js) != 0 {
		t.Errorf("ListJobs on an empty store = %#v, want an empty, non-nil slice", js)
	}

	specs := []struct{ name, status, compute string }{
		{"a", "Queued", "cpu"},
		{"b", "Running", "gpu"},
		{"c", "Completed", "cpu"},
		{"d", "Queued", "gpu"},
		{"e", "Running", "cpu"},
	}
	all := map[string]store.Job{}
	for _, sp := range specs {
		j := testJob(sp.name)
		j.Status, j.Compute = sp.status, sp.compute
		if sp.compute == "gpu" {
			j.ExperimentName = "resnet"
		}
		if sp.name == "d" {
			j.Priority = 5
		}
		all[sp.name] = mustCreateJob(t, s, j)
	}
	jobs := func(names ...string) []store.Job {
		js := []store.Job{}
		for _, n := range names {
			js = append(js, all[n])
		}
		return js
	}

	for _, tt := range []struct {
		f    store.JobFilter
		want []store.Job
	}{
		{store.JobFilter{}, jobs("a", "b", "c", "d", "e")},
		{store.JobFilter{Statuses: []string{}}, jobs("a", "b", "c", "d", "e")},
		{store.JobFilter{Newest: true}, jobs("e", "d", "c", "b", "a")},
		{store.JobFilter{Statuses: []string{"Queued"}}, jobs("a", "d")},
		{store.JobFilter{Statuses: []string{"Running", "Queued"}}, jobs("a", "b", "d", "e")},
		{store.JobFilter{Statuses: []string{"Canceled"}}, jobs()},
		{store.JobFilter{Compute: "cpu"}, jobs("a", "c", "e")},
		{store.JobFilter{Compute: "tpu"}, jobs()},
		{store.JobFilter{Compute: "gpu", Statuses: []string{"Queued"}}, jobs("d")},
		{store.JobFilter{Limit: 2}, jobs("a", "b")},
		{store.JobFilter{Limit: 2, Newest: true}, jobs("e", "d")},
		{store.JobFilter{Limit: 10}, jobs("a", "b", "c", "d", "e")},
		{store.JobFilter{Statuses: []string{"Running", "Completed"}, Compute: "cpu", Limit: 1, Newest: true}, jobs("e")},
		{store.JobFilter{Statuses: []string{"Running", "Completed"}, Compute: "cpu", Limit: 1}, jobs("c")},
		{store.JobFilter{ByPriority: true}, jobs("d", "a", "b", "c", "e")},
		{store.JobFilter{Statuses: []string{"Queued"}, ByPriority: true, Limit: 1}, jobs("d")},
		{store.JobFilter{Statuses: []string{"Queued"}, ByPriority: true, Newest: true}, jobs("d", "a")},
		// The studio's list: by experiment, and pages by keyset (Before).
		{store.JobFilter{Experiment: "resnet", Newest: true}, jobs("d", "b")},
		{store.JobFilter{Experiment: "none"}, jobs()},
		{store.JobFilter{Newest: true, Limit: 2, Before: "d"}, jobs("c", "b")},
		{store.JobFilter{Newest: true, Before: "a"}, jobs()},
		{store.JobFilter{Newest: true, Before: "no-such-job"}, jobs()},
		{store.JobFilter{Newest: true, Compute: "cpu", Before: "e"}, jobs("c", "a")},
		{store.JobFilter{Newest: true, Experiment: "resnet", Statuses: []string{"Running"}, Before: "d"}, jobs("b")},
	} {
		if d := diff(tt.want, mustListJobs(t, s, tt.f)); d != "" {
			t.Errorf("ListJobs(%+v) (-want +got):\n%s", tt.f, d)
		}
	}
}

// The dispatcher reads only queued jobs not yet handed to an engine, and
// the engine reconcile only those that were, by the same filter.
func testJobListByHandle(t *testing.T, s store.Store) {
	all := map[string]store.Job{}
	for _, sp := range []struct{ name, status, handle string }{
		{"a", "Queued", ""},
		{"b", "Queued", "101"},
		{"c", "Running", "102"},
		{"d", "Queued", ""},
	} {
		j := testJob(sp.name)
		j.Status, j.Handle = sp.status, sp.handle
		all[sp.name] = mustCreateJob(t, s, j)
	}
	jobs := func(names ...string) []store.Job {
		js := []store.Job{}
		for _, n := range names {
			js = append(js, all[n])
		}
		return js
	}
	for _, tt := range []struct {
		f    store.JobFilter
		want []store.Job
	}{
		{store.JobFilter{}, jobs("a", "b", "c", "d")},
		{store.JobFilter{Handle: store.HandleSet}, jobs("b", "c")},
		{store.JobFilter{Handle: store.HandleUnset}, jobs("a", "d")},
		{store.JobFilter{Statuses: []string{"Queued"}, Handle: store.HandleUnset, ByPriority: true, Limit: 1}, jobs("a")},
		{store.JobFilter{Statuses: []string{"Queued"}, Handle: store.HandleSet}, jobs("b")},
	} {
		if d := diff(tt.want, mustListJobs(t, s, tt.f)); d != "" {
			t.Errorf("ListJobs(%+v) (-want +got):\n%s", tt.f, d)
		}
	}
	// A handle written by UpdateJob reads back, and so does its removal.
	if _, err := s.UpdateJob(context.Background(), "a", func(j *store.Job) (*store.Event, error) {
		j.Handle = "103"
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := mustGetJob(t, s, "a").Handle; got != "103" {
		t.Errorf("Handle after UpdateJob = %q, want 103", got)
	}
	if _, err := s.UpdateJob(context.Background(), "a", func(j *store.Job) (*store.Event, error) {
		j.Handle = ""
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := mustGetJob(t, s, "a").Handle; got != "" {
		t.Errorf("Handle after clearing it = %q, want empty", got)
	}
}

func testJobUpdate(t *testing.T, s store.Store) {
	before := mustCreateJob(t, s, testJob("j1"))
	want := before
	want.Status = "Running"
	want.Attempt = 1
	want.Started = t0.Add(time.Minute)
	want.Outputs = json.RawMessage(`{"model": "azureml://x"}`)
	want.Placement = json.RawMessage(`{"nodes": ["node-1"]}`)
	ev := store.Event{Job: "ignored", Time: t0.Add(time.Minute), From: "Queued", To: "Running", Reason: "placed on node-1"}

	got, err := s.UpdateJob(context.Background(), "j1", func(j *store.Job) (*store.Event, error) {
		if d := diff(before, *j); d != "" {
			t.Errorf("fn got (-want +got):\n%s", d)
		}
		j.Status, j.Attempt, j.Started, j.Outputs, j.Placement = want.Status, want.Attempt, want.Started, want.Outputs, want.Placement
		return &ev, nil
	})
	if err != nil {
		t.Fatalf("UpdateJob: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("UpdateJob returned (-want +got):\n%s", d)
	}
	if d := diff(want, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("GetJob after UpdateJob (-want +got):\n%s", d)
	}
	wantEv := ev
	wantEv.Job = "j1"
	if d := diff([]store.Event{firstEvent("j1"), wantEv}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("ListEvents after UpdateJob (-want +got):\n%s", d)
	}
}

func testJobUpdateNilEvent(t *testing.T, s store.Store) {
	mustCreateJob(t, s, testJob("j1"))
	got, err := s.UpdateJob(context.Background(), "j1", func(j *store.Job) (*store.Event, error) {
		j.Heartbeat = t0.Add(time.Second)
		return nil, nil
	})
	if err != nil {
		t.Fatalf("UpdateJob: %v", err)
	}
	if !got.Heartbeat.Equal(t0.Add(time.Second)) {
		t.Errorf("Heartbeat = %v, want %v", got.Heartbeat, t0.Add(time.Second))
	}
	if d := diff([]store.Event{firstEvent("j1")}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("a nil event was stored (-want +got):\n%s", d)
	}
}

func testJobUpdateFnError(t *testing.T, s store.Store) {
	want := mustCreateJob(t, s, fullJob("j1"))
	_, err := s.UpdateJob(context.Background(), "j1", func(j *store.Job) (*store.Event, error) {
		j.Status = "Canceled"
		j.ExitCode = nil
		j.Spec = nil
		j.Placement = nil
		return &store.Event{Time: t0, From: "Failed", To: "Canceled"}, errTest
	})
	if err != errTest {
		t.Errorf("UpdateJob with a failing fn: got error %v, want fn's error as is", err)
	}
	if d := diff(want, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("job changed by an update whose fn failed (-want +got):\n%s", d)
	}
	if d := diff([]store.Event{firstEvent("j1")}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("event stored by an update whose fn failed (-want +got):\n%s", d)
	}
}

// UpdateJobs writes each job as UpdateJobWith would, its token included,
// in one transaction; a job whose fn fails, or that is missing, is left as
// it was, token and all, and only its entry of errs says so.
func testJobUpdateMany(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	failing := mustCreateJob(t, s, fullJob("j2"))
	mustCreateJob(t, s, testJob("j3"))
	var seen []string
	jobs, errs, err := s.UpdateJobs(ctx, []string{"j1", "j2", "nope", "j3"}, func(j *store.Job) (store.JobChange, error) {
		seen = append(seen, j.Name)
		j.Status, j.Handle = "Queued", "h-"+j.Name
		tok := token("tok-"+j.Name, "run", j.Name, 1)
		if j.Name == "j2" {
			return store.JobChange{Events: []store.Event{{Time: t0, From: "Queued", To: "Queued"}}, CreateToken: &tok}, errTest
		}
		return store.JobChange{Events: []store.Event{{Time: t0, From: "Queued", To: "Queued", Reason: "handed " + j.Name}}, CreateToken: &tok}, nil
	})
	if err != nil {
		t.Fatalf("UpdateJobs: %v", err)
	}
	if d := diff([]string{"j1", "j2", "j3"}, seen); d != "" {
		t.Errorf("fn called for (-want +got):\n%s", d)
	}
	if len(jobs) != 4 || len(errs) != 4 {
		t.Fatalf("UpdateJobs returned %d jobs and %d errors for 4 names", len(jobs), len(errs))
	}
	if errs[0] != nil || errs[3] != nil || errs[1] != errTest {
		t.Errorf("errs %v: want nil for j1 and j3, fn's error as is for j2", errs)
	}
	wantErrIs(t, "UpdateJobs of a missing job", errs[2], store.ErrNotFound)
	for i, name := range []string{"j1", "j3"} {
		got := mustGetJob(t, s, name)
		if got.Handle != "h-"+name || jobs[i*3].Handle != "h-"+name {
			t.Errorf("%s: stored handle %q, returned %q; want h-%s", name, got.Handle, jobs[i*3].Handle, name)
		}
		want := []store.Event{firstEvent(name), {Job: name, Time: t0, From: "Queued", To: "Queued", Reason: "handed " + name}}
		if d := diff(want, mustListEvents(t, s, name)); d != "" {
			t.Errorf("%s's events (-want +got):\n%s", name, d)
		}
	}
	if d := diff(failing, mustGetJob(t, s, "j2")); d != "" {
		t.Errorf("j2 changed though its fn failed (-want +got):\n%s", d)
	}
	if d := diff([]store.Event{firstEvent("j2")}, mustListEvents(t, s, "j2")); d != "" {
		t.Errorf("j2's events though its fn failed (-want +got):\n%s", d)
	}
	for _, name := range []string{"j1", "j3"} {
		if got, err := s.TokenByHash(ctx, "tok-"+name); err != nil || got.Subject != name {
			t.Errorf("%s's token: %+v, %v; want it stored with the job", name, got, err)
		}
	}
	_, err = s.TokenByHash(ctx, "tok-j2")
	wantErrIs(t, "the token of a job whose fn failed", err, store.ErrNotFound)

	// Tokens deleted in the batch are not found from its return on, though
	// they were looked up (and could be cached) before.
	jobs, errs, err = s.UpdateJobs(ctx, []string{"j1", "j3"}, func(j *store.Job) (store.JobChange, error) {
		j.Status = "Failed"
		return store.JobChange{DeleteTokens: "run"}, nil
	})
	if err != nil || errs[0] != nil || errs[1] != nil || jobs[1].Status != "Failed" {
		t.Fatalf("UpdateJobs deleting tokens: %v %v %+v", err, errs, jobs)
	}
	for _, name := range []string{"j1", "j3"} {
		_, err := s.TokenByHash(ctx, "tok-"+name)
		wantErrIs(t, name+"'s token after the batch that deleted it", err, store.ErrNotFound)
	}
}

// A token UpdateJobs cannot create (its hash exists) fails the whole
// batch: no job of it is written, no token of it stored.
func testJobUpdateManyTokenConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	before := mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	mustCreateToken(t, s, token("taken", "owner", "alice", 0))
	_, _, err := s.UpdateJobs(ctx, []string{"j1", "j2"}, func(j *store.Job) (store.JobChange, error) {
		j.Handle = "h-" + j.Name
		hash := "new-" + j.Name
		if j.Name == "j2" {
			hash = "taken"
		}
		tok := token(hash, "run", j.Name, 1)
		return store.JobChange{Events: []store.Event{{Time: t0, From: "Queued", To: "Queued"}}, CreateToken: &tok}, nil
	})
	wantErrIs(t, "UpdateJobs with a token whose hash exists", err, store.ErrConflict)
	if d := diff(before, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("j1 written by a batch that failed (-want +got):\n%s", d)
	}
	_, err = s.TokenByHash(ctx, "new-j1")
	wantErrIs(t, "j1's token from a batch that failed", err, store.ErrNotFound)
}

func testJobUpdateNotFound(t *testing.T, s store.Store) {
	called := false
	_, err := s.UpdateJob(context.Background(), "nope", func(*store.Job) (*store.Event, error) {
		called = true
		return &store.Event{To: "Running"}, nil
	})
	wantErrIs(t, "UpdateJob of a missing job", err, store.ErrNotFound)
	if called {
		t.Error("UpdateJob called fn for a missing job")
	}
	_, err = s.ListEvents(context.Background(), "nope")
	wantErrIs(t, "ListEvents after UpdateJob of a missing job", err, store.ErrNotFound)
}

func testJobUpdateIgnoresNameAndSeq(t *testing.T, s store.Store) {
	created := mustCreateJob(t, s, testJob("j1"))
	other := mustCreateJob(t, s, testJob("j2"))
	want := created
	want.Status = "Running"
	got, err := s.UpdateJob(context.Background(), "j1", func(j *store.Job) (*store.Event, error) {
		j.Name = "renamed"
		j.Seq = other.Seq + 100
		j.Status = "Running"
		return nil, nil
	})
	if err != nil {
		t.Fatalf("UpdateJob: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("UpdateJob returned (-want +got):\n%s", d)
	}
	if d := diff([]store.Job{want, other}, mustListJobs(t, s, store.JobFilter{})); d != "" {
		t.Errorf("ListJobs (-want +got):\n%s", d)
	}
	_, err = s.GetJob(context.Background(), "renamed")
	wantErrIs(t, "GetJob of the name fn set", err, store.ErrNotFound)
}

func testJobUpdateConcurrent(t *testing.T, s store.Store) {
	const n = 20
	mustCreateJob(t, s, testJob("j1"))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.UpdateJob(context.Background(), "j1", func(j *store.Job) (*store.Event, error) {
				j.Attempt++
				return &store.Event{Time: t0, To: "Queued", Reason: fmt.Sprintf("attempt %d", j.Attempt)}, nil
			})
			if err != nil {
				t.Errorf("UpdateJob: %v", err)
			}
		})
	}
	wg.Wait()
	if got := mustGetJob(t, s, "j1").Attempt; got != n {
		t.Errorf("after %d concurrent increments Attempt = %d", n, got)
	}
	es := mustListEvents(t, s, "j1")
	if len(es) != n+1 {
		t.Fatalf("%d events, want %d", len(es), n+1)
	}
	// Serialised updates saw 0, 1, ... and stored their events in that order.
	for i, e := range es[1:] {
		if want := fmt.Sprintf("attempt %d", i+1); e.Reason != want {
			t.Errorf("event %d reason %q, want %q", i+1, e.Reason, want)
		}
	}
}

func testJobListEventsOrder(t *testing.T, s store.Store) {
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	want := []store.Event{firstEvent("j1")}
	// Times go backwards on purpose: the order is that of storing.
	for i, to := range []string{"Preparing", "Running", "Finalizing", "Completed"} {
		e := store.Event{Job: "j1", Time: t0.Add(-time.Duration(i) * time.Second), From: want[len(want)-1].To, To: to, Reason: to}
		want = append(want, e)
		if _, err := s.UpdateJob(context.Background(), "j1", func(*store.Job) (*store.Event, error) { return &e, nil }); err != nil {
			t.Fatalf("UpdateJob: %v", err)
		}
		if _, err := s.UpdateJob(context.Background(), "j2", func(*store.Job) (*store.Event, error) {
			return &store.Event{Time: t0, To: "x"}, nil
		}); err != nil {
			t.Fatalf("UpdateJob: %v", err)
		}
	}
	if d := diff(want, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("ListEvents (-want +got):\n%s", d)
	}
	if es := mustListEvents(t, s, "j2"); len(es) != 5 {
		t.Errorf("ListEvents(j2) returned %d events, want 5", len(es))
	}
}

func testJobListEventsNotFound(t *testing.T, s store.Store) {
	_, err := s.ListEvents(context.Background(), "nope")
	wantErrIs(t, "ListEvents of a missing job", err, store.ErrNotFound)
}

func testJobPreemptions(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	if ps, err := s.ListPreemptions(ctx, "j1"); err != nil || ps == nil || len(ps) != 0 {
		t.Fatalf("ListPreemptions of a job without any = %v, %v; want empty, not nil", ps, err)
	}
	p2 := store.Preemption{Job: "j1", Attempt: 2, Node: "n2", Time: t0.Add(time.Minute), Reason: "node n2 preempted"}
	p1 := store.Preemption{Job: "j1", Attempt: 1, Node: "n1", Time: t0, Reason: "node n1 preempted"}
	for _, p := range []store.Preemption{p2, p1, {Job: "j1", Attempt: 1, Node: "other", Time: t0, Reason: "again"}, {Job: "j2", Attempt: 1, Node: "x", Time: t0}} {
		if err := s.AddPreemption(ctx, p); err != nil {
			t.Fatalf("AddPreemption(%+v): %v", p, err)
		}
	}
	ps, err := s.ListPreemptions(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	// By attempt, and the second record of attempt 1 changed nothing.
	if d := diff([]store.Preemption{p1, p2}, ps); d != "" {
		t.Errorf("ListPreemptions (-want +got):\n%s", d)
	}
}

func testJobPreemptionsNotFound(t *testing.T, s store.Store) {
	_, err := s.ListPreemptions(context.Background(), "nope")
	wantErrIs(t, "ListPreemptions of a missing job", err, store.ErrNotFound)
	err = s.AddPreemption(context.Background(), store.Preemption{Job: "nope", Attempt: 1, Node: "n"})
	wantErrIs(t, "AddPreemption to a missing job", err, store.ErrNotFound)
}

// --- metrics ---

func metric(name string, v float64, step int64) store.Metric {
	return store.Metric{Name: name, Value: v, Step: step, Time: t0.Add(time.Duration(step) * time.Second)}
}

func testMetricsAddList(t *testing.T, s store.Store) {
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	batch1 := []store.Metric{metric("loss", 2.5, 0), metric("acc", 0.1, 0), metric("loss", 1.25, 1)}
	batch2 := []store.Metric{metric("acc", 0.5, 1), metric("loss", 0.625, 2)}
	mustAddMetrics(t, s, "j1", batch1...)
	mustAddMetrics(t, s, "j2", metric("loss", 99, 0))
	mustAddMetrics(t, s, "j1", batch2...)

	all := append(append([]store.Metric{}, batch1...), batch2...)
	if d := diff(all, mustListMetrics(t, s, "j1", "")); d != "" {
		t.Errorf("ListMetrics(all) (-want +got):\n%s", d)
	}
	wantLoss := []store.Metric{batch1[0], batch1[2], batch2[1]}
	if d := diff(wantLoss, mustListMetrics(t, s, "j1", "loss")); d != "" {
		t.Errorf("ListMetrics(loss) (-want +got):\n%s", d)
	}
	if d := diff([]store.Metric{metric("loss", 99, 0)}, mustListMetrics(t, s, "j2", "")); d != "" {
		t.Errorf("ListMetrics(j2) (-want +got):\n%s", d)
	}
	if ms := mustListMetrics(t, s, "j1", "f1"); ms == nil || len(ms) != 0 {
		t.Errorf("ListMetrics of a metric never logged = %#v, want an empty, non-nil slice", ms)
	}
}

// A runner that sends a numbered batch again (its answer was lost, the
// server restarted) gets each value stored once; attempts and the
// runners of an attempt's nodes number apart.
func testMetricsNumberedOnce(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	m := func(i int) store.Metric { return metric("loss", float64(i), int64(i)) }
	add := func(attempt, rank int, first int64, ms ...store.Metric) {
		t.Helper()
		high, err := s.AddNumberedMetrics(ctx, "j1", attempt, rank, first, ms)
		if err != nil {
			t.Fatalf("AddNumberedMetrics(attempt %d, first %d): %v", attempt, first, err)
		}
		if want := first + int64(len(ms)) - 1; high < want {
			t.Fatalf("AddNumberedMetrics(attempt %d, first %d) = %d, want at least %d", attempt, first, high, want)
		}
	}
	add(1, 0, 1, m(1), m(2))
	add(1, 0, 1, m(1), m(2))       // the same batch again
	add(1, 0, 2, m(2), m(3), m(4)) // overlapping the stored ones
	add(2, 0, 1, m(10))            // another attempt numbers from 1
	add(1, 1, 1, m(20))            // so does the runner of another node
	add(1, 0, 5, m(5))
	want := []store.Metric{m(1), m(2), m(3), m(4), m(10), m(20), m(5)}
	if d := diff(want, mustListMetrics(t, s, "j1", "")); d != "" {
		t.Errorf("ListMetrics (-want +got):\n%s", d)
	}
	if _, err := s.AddNumberedMetrics(ctx, "nope", 1, 0, 1, []store.Metric{m(1)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddNumberedMetrics of a missing job = %v, want ErrNotFound", err)
	}
}

func testMetricsLatest(t *testing.T, s store.Store) {
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	mustAddMetrics(t, s, "j1", metric("loss", 3, 10), metric("acc", 0.2, 10), metric("loss", 2, 11))
	mustAddMetrics(t, s, "j2", metric("loss", 99, 50))
	// Added last, with a lower step: "last" is the order of adding.
	mustAddMetrics(t, s, "j1", metric("loss", 1, 5))
	want := map[string]store.Metric{
		"loss": metric("loss", 1, 5),
		"acc":  metric("acc", 0.2, 10),
	}
	if d := diff(want, mustLatestMetrics(t, s, "j1")); d != "" {
		t.Errorf("LatestMetrics (-want +got):\n%s", d)
	}
}

func testMetricsLatestOf(t *testing.T, s store.Store) {
	ctx := context.Background()
	var names []string
	// More jobs than an implementation may bind into one query.
	for i := range 1200 {
		names = append(names, fmt.Sprintf("j%04d", i))
		mustCreateJob(t, s, testJob(names[i]))
	}
	mustAddMetrics(t, s, "j0000", metric("loss", 3, 10), metric("acc", 0.2, 10), metric("loss", 2, 11))
	mustAddMetrics(t, s, "j0007", metric("loss", 99, 50))
	mustAddMetrics(t, s, "j1100", metric("loss", math.NaN(), 1))
	mustAddMetrics(t, s, "j0000", metric("loss", 1, 5))
	got, err := s.LatestMetricsOf(ctx, append(names, "nope"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]store.Metric{}
	for _, n := range []string{"j0000", "j0007", "j1100"} {
		want[n] = mustLatestMetrics(t, s, n)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("LatestMetricsOf (-want +got):\n%s", d)
	}
	if got, err := s.LatestMetricsOf(ctx, nil); err != nil || got == nil || len(got) != 0 {
		t.Errorf("LatestMetricsOf(nil) = %#v, %v; want an empty, non-nil map", got, err)
	}
}

func testMetricsSpecialValues(t *testing.T, s store.Store) {
	mustCreateJob(t, s, testJob("j1"))
	want := []store.Metric{
		metric("loss", math.NaN(), 0),
		metric("loss", math.Inf(1), 1),
		metric("loss", math.Inf(-1), 2),
		metric("loss", 0, 3),
		metric("loss", -1e-300, 4),
		{Name: "loss", Value: math.MaxFloat64, Step: math.MaxInt64, Time: t0},
		{Name: "untimed", Value: 1, Step: -1},
	}
	mustAddMetrics(t, s, "j1", want...)
	got := mustListMetrics(t, s, "j1", "")
	if d := diff(want, got); d != "" {
		t.Errorf("ListMetrics (-want +got):\n%s", d)
	}
	for _, m := range got {
		if !m.Time.IsZero() && m.Time.Location() != time.UTC {
			t.Errorf("metric time %v is not in UTC", m.Time)
		}
	}
	if d := diff(want[len(want)-1], mustLatestMetrics(t, s, "j1")["untimed"]); d != "" {
		t.Errorf("LatestMetrics (-want +got):\n%s", d)
	}
}

func testMetricsEmpty(t *testing.T, s store.Store) {
	mustCreateJob(t, s, testJob("j1"))
	mustAddMetrics(t, s, "j1")
	if ms := mustListMetrics(t, s, "j1", ""); ms == nil || len(ms) != 0 {
		t.Errorf("ListMetrics of a job without metrics = %#v, want an empty, non-nil slice", ms)
	}
	if ms := mustLatestMetrics(t, s, "j1"); ms == nil || len(ms) != 0 {
		t.Errorf("LatestMetrics of a job without metrics = %#v, want an empty, non-nil map", ms)
	}
}

func testMetricsNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	wantErrIs(t, "AddMetrics to a missing job", s.AddMetrics(ctx, "nope", []store.Metric{metric("loss", 1, 0)}), store.ErrNotFound)
	wantErrIs(t, "AddMetrics of nothing to a missing job", s.AddMetrics(ctx, "nope", nil), store.ErrNotFound)
	_, err := s.ListMetrics(ctx, "nope", "")
	wantErrIs(t, "ListMetrics of a missing job", err, store.ErrNotFound)
	_, err = s.ListMetrics(ctx, "nope", "loss")
	wantErrIs(t, "ListMetrics(loss) of a missing job", err, store.ErrNotFound)
	_, err = s.LatestMetrics(ctx, "nope")
	wantErrIs(t, "LatestMetrics of a missing job", err, store.ErrNotFound)
}

// testRunValues: params and tags keep the last value per kind and key,
// per job, and a missing job is ErrNotFound.
func testRunValues(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	if vs, err := s.ListRunValues(ctx, "j1"); err != nil || vs == nil || len(vs) != 0 {
		t.Fatalf("ListRunValues of a job without any = %#v, %v; want an empty, non-nil slice", vs, err)
	}
	set := func(job string, vs ...store.RunValue) {
		t.Helper()
		if err := s.SetRunValues(ctx, job, vs); err != nil {
			t.Fatalf("SetRunValues(%s): %v", job, err)
		}
	}
	set("j1", store.RunValue{Kind: "param", Key: "lr", Value: "0.1"}, store.RunValue{Kind: "tag", Key: "lr", Value: "tagged"})
	set("j2", store.RunValue{Kind: "param", Key: "lr", Value: "9"})
	set("j1", store.RunValue{Kind: "param", Key: "lr", Value: "0.01"}, store.RunValue{Kind: "param", Key: "epochs", Value: "3"})
	want := []store.RunValue{{Kind: "param", Key: "epochs", Value: "3"}, {Kind: "param", Key: "lr", Value: "0.01"}, {Kind: "tag", Key: "lr", Value: "tagged"}}
	got, err := s.ListRunValues(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("ListRunValues (-want +got):\n%s", d)
	}
	wantErrIs(t, "SetRunValues of a missing job", s.SetRunValues(ctx, "nope", []store.RunValue{{Kind: "param", Key: "a", Value: "b"}}), store.ErrNotFound)
	_, err = s.ListRunValues(ctx, "nope")
	wantErrIs(t, "ListRunValues of a missing job", err, store.ErrNotFound)
}

// testJobCount: CountJobs counts per compute the jobs in the statuses
// asked for, as ListJobs would list them.
func testJobCount(t *testing.T, s store.Store) {
	ctx := context.Background()
	got, err := s.CountJobs(ctx, []string{"Running"})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || len(got) != 0 {
		t.Errorf("CountJobs of an empty store: %v, want an empty map", got)
	}
	for i, st := range []struct{ compute, status string }{
		{"local", "Running"}, {"local", "Preparing"}, {"local", "Queued"}, {"local", "Completed"},
		{"gpu", "Running"}, {"gpu", "Running"}, {"gpu", "Failed"}, {"cpu", "Queued"},
	} {
		j := testJob(fmt.Sprintf("j%d", i))
		j.Compute, j.Status = st.compute, st.status
		mustCreateJob(t, s, j)
	}
	// A job that changes status moves between the counts.
	if _, err := s.UpdateJob(ctx, "j2", func(j *store.Job) (*store.Event, error) {
		j.Status = "Running"
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		statuses []string
		want     map[string]int
	}{
		{[]string{"Preparing", "Running"}, map[string]int{"local": 3, "gpu": 2}},
		{[]string{"Queued"}, map[string]int{"cpu": 1}},
		{[]string{"Canceled"}, map[string]int{}},
		{nil, map[string]int{"local": 4, "gpu": 3, "cpu": 1}},
	} {
		got, err := s.CountJobs(ctx, tc.statuses)
		if err != nil {
			t.Fatalf("CountJobs(%v): %v", tc.statuses, err)
		}
		if d := diff(tc.want, got); d != "" {
			t.Errorf("CountJobs(%v) (-want +got):\n%s", tc.statuses, d)
		}
		var listed int
		for _, n := range got {
			listed += n
		}
		if js := mustListJobs(t, s, store.JobFilter{Statuses: tc.statuses}); len(js) != listed {
			t.Errorf("CountJobs(%v) counts %d jobs, ListJobs lists %d", tc.statuses, listed, len(js))
		}
	}
}

// --- tokens ---

func token(hash, kind, subject string, attempt int) store.Token {
	return store.Token{Hash: hash, Kind: kind, Subject: subject, Attempt: attempt, Created: t0}
}

func testTokenCreateLookup(t *testing.T, s store.Store) {
	want := token("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "run", "j1", 2)
	mustCreateToken(t, s, want)
	got, err := s.TokenByHash(context.Background(), want.Hash)
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("TokenByHash (-want +got):\n%s", d)
	}
}

func testTokenConflict(t *testing.T, s store.Store) {
	first := token("h1", "owner", "alice", 0)
	mustCreateToken(t, s, first)
	wantErrIs(t, "CreateToken of an existing hash", s.CreateToken(context.Background(), token("h1", "run", "j1", 1)), store.ErrConflict)
	got, err := s.TokenByHash(context.Background(), "h1")
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if d := diff(first, got); d != "" {
		t.Errorf("first token changed by a conflicting create (-want +got):\n%s", d)
	}
}

func testTokenNotFound(t *testing.T, s store.Store) {
	_, err := s.TokenByHash(context.Background(), "nope")
	wantErrIs(t, "TokenByHash of a missing hash", err, store.ErrNotFound)
}

func testTokenDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	toks := []store.Token{
		token("run-j1-a1", "run", "j1", 1),
		token("run-j1-a2", "run", "j1", 2),
		token("run-j2-a1", "run", "j2", 1),
		token("owner-j1", "owner", "j1", 0), // a user who happens to be called j1
	}
	for _, tok := range toks {
		mustCreateToken(t, s, tok)
		// Looked up before the delete, so that a store that caches
		// lookups has them cached: revocation must still win at once.
		if _, err := s.TokenByHash(ctx, tok.Hash); err != nil {
			t.Fatalf("TokenByHash(%q): %v", tok.Hash, err)
		}
	}
	if err := s.DeleteTokens(ctx, "run", "j1"); err != nil {
		t.Fatalf("DeleteTokens: %v", err)
	}
	for _, tok := range toks {
		_, err := s.TokenByHash(ctx, tok.Hash)
		gone := tok.Kind == "run" && tok.Subject == "j1"
		switch {
		case gone && !errors.Is(err, store.ErrNotFound):
			t.Errorf("TokenByHash(%q) after DeleteTokens(run, j1): got error %v, want ErrNotFound", tok.Hash, err)
		case !gone && err != nil:
			t.Errorf("TokenByHash(%q) after DeleteTokens(run, j1): %v; it should be kept", tok.Hash, err)
		}
	}
	if err := s.DeleteTokens(ctx, "run", "j1"); err != nil {
		t.Errorf("DeleteTokens with nothing to delete: %v", err)
	}
}

// testTokenWithJobUpdate: UpdateJobWith writes the job, its events and
// the token change together; a delete removes only the job's tokens of
// that kind, and wins over a cached lookup at once.
func testTokenWithJobUpdate(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateJob(t, s, testJob("j1"))
	mustCreateJob(t, s, testJob("j2"))
	tok := token("run-j1-a1", "run", "j1", 1)
	start := store.Event{Time: t0.Add(time.Second), From: "Queued", To: "Preparing", Reason: "started"}
	got, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
		j.Status, j.Attempt = "Preparing", 1
		return store.JobChange{Events: []store.Event{start}, CreateToken: &tok}, nil
	})
	if err != nil {
		t.Fatalf("UpdateJobWith creating a token: %v", err)
	}
	if got.Status != "Preparing" || got.Attempt != 1 {
		t.Errorf("UpdateJobWith returned status %q attempt %d, want Preparing 1", got.Status, got.Attempt)
	}
	if j := mustGetJob(t, s, "j1"); j.Status != "Preparing" {
		t.Errorf("job status after UpdateJobWith: %q, want Preparing", j.Status)
	}
	start.Job = "j1"
	if d := diff([]store.Event{firstEvent("j1"), start}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("events after UpdateJobWith (-want +got):\n%s", d)
	}
	gotTok, err := s.TokenByHash(ctx, tok.Hash)
	if err != nil {
		t.Fatalf("TokenByHash of the token UpdateJobWith created: %v", err)
	}
	if d := diff(tok, gotTok); d != "" {
		t.Errorf("created token (-want +got):\n%s", d)
	}

	kept := []store.Token{token("run-j2-a1", "run", "j2", 1), token("owner-j1", "owner", "j1", 0)}
	for _, k := range kept {
		mustCreateToken(t, s, k)
	}
	// Two events, stored in order, with the delete.
	fin := store.Event{Time: t0.Add(2 * time.Second), From: "Preparing", To: "Finalizing", Reason: "uploading"}
	end := store.Event{Time: t0.Add(2 * time.Second), From: "Finalizing", To: "Completed", Reason: "done"}
	if _, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
		j.Status = "Completed"
		return store.JobChange{Events: []store.Event{fin, end}, DeleteTokens: "run"}, nil
	}); err != nil {
		t.Fatalf("UpdateJobWith deleting tokens: %v", err)
	}
	if j := mustGetJob(t, s, "j1"); j.Status != "Completed" {
		t.Errorf("job status after the deleting UpdateJobWith: %q, want Completed", j.Status)
	}
	fin.Job, end.Job = "j1", "j1"
	if d := diff([]store.Event{firstEvent("j1"), start, fin, end}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("events after an UpdateJobWith of two events (-want +got):\n%s", d)
	}
	if _, err := s.TokenByHash(ctx, tok.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenByHash of the job's run token after UpdateJobWith deleted it: got error %v, want ErrNotFound", err)
	}
	for _, k := range kept {
		if _, err := s.TokenByHash(ctx, k.Hash); err != nil {
			t.Errorf("TokenByHash(%q) after deleting j1's run tokens: %v; it should be kept", k.Hash, err)
		}
	}

	// The delete is made even when fn leaves the job as it is (an end
	// reported again).
	again := token("run-j1-a1-again", "run", "j1", 1)
	mustCreateToken(t, s, again)
	if _, err := s.TokenByHash(ctx, again.Hash); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJobWith(ctx, "j1", func(*store.Job) (store.JobChange, error) { return store.JobChange{DeleteTokens: "run"}, nil }); err != nil {
		t.Fatalf("UpdateJobWith that changes no job: %v", err)
	}
	if _, err := s.TokenByHash(ctx, again.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenByHash after an UpdateJobWith whose fn changed nothing deleted it: got error %v, want ErrNotFound", err)
	}
}

// testTokenWithJobUpdateFnError: when fn fails, neither the job nor the
// tokens change.
func testTokenWithJobUpdateFnError(t *testing.T, s store.Store) {
	ctx := context.Background()
	want := mustCreateJob(t, s, fullJob("j1"))
	old := token("run-j1-a1", "run", "j1", 1)
	mustCreateToken(t, s, old)
	tok := token("run-j1-a2", "run", "j1", 2)
	for _, ch := range []store.JobChange{{CreateToken: &tok}, {DeleteTokens: "run"}} {
		_, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
			j.Status = "Canceled"
			ch.Events = []store.Event{{Time: t0, From: "Failed", To: "Canceled"}}
			return ch, errTest
		})
		if err != errTest {
			t.Errorf("UpdateJobWith with a failing fn: got error %v, want fn's error as is", err)
		}
	}
	if d := diff(want, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("job changed by an UpdateJobWith whose fn failed (-want +got):\n%s", d)
	}
	if _, err := s.TokenByHash(ctx, tok.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("token created by an UpdateJobWith whose fn failed: TokenByHash got %v, want ErrNotFound", err)
	}
	if _, err := s.TokenByHash(ctx, old.Hash); err != nil {
		t.Errorf("token deleted by an UpdateJobWith whose fn failed: %v", err)
	}
}

// testTokenWithJobUpdateConflict: a token that cannot be created leaves
// the job and its events as they were.
func testTokenWithJobUpdateConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	want := mustCreateJob(t, s, fullJob("j1"))
	first := token("h1", "owner", "alice", 0)
	mustCreateToken(t, s, first)
	dup := token("h1", "run", "j1", 1)
	_, err := s.UpdateJobWith(ctx, "j1", func(j *store.Job) (store.JobChange, error) {
		j.Status = "Preparing"
		return store.JobChange{Events: []store.Event{{Time: t0, From: "Queued", To: "Preparing"}}, CreateToken: &dup}, nil
	})
	wantErrIs(t, "UpdateJobWith creating an existing hash", err, store.ErrConflict)
	if d := diff(want, mustGetJob(t, s, "j1")); d != "" {
		t.Errorf("job changed by an UpdateJobWith whose token was refused (-want +got):\n%s", d)
	}
	if d := diff([]store.Event{firstEvent("j1")}, mustListEvents(t, s, "j1")); d != "" {
		t.Errorf("event stored by an UpdateJobWith whose token was refused (-want +got):\n%s", d)
	}
	if got, err := s.TokenByHash(ctx, "h1"); err != nil || got.Kind != "owner" {
		t.Errorf("first token after a conflicting UpdateJobWith: %+v, %v; want it unchanged", got, err)
	}
}

func testEnvironment(name, version string) store.Environment {
	return store.Environment{
		Name: name, Version: version, Description: "for " + name,
		Spec:    json.RawMessage(`{"kind": "image", "image": "ferry-base:bookworm"}`),
		Hash:    "3f" + name + version,
		Created: t0,
	}
}

func testEnvironmentCreateGet(t *testing.T, s store.Store) {
	ctx := context.Background()
	want := testEnvironment("torch", "1")
	if err := s.CreateEnvironment(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetEnvironment(ctx, "torch", "1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("GetEnvironment (-want +got):\n%s", d)
	}
}

func testEnvironmentConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateEnvironment(ctx, testEnvironment("torch", "1")); err != nil {
		t.Fatal(err)
	}
	other := testEnvironment("torch", "1")
	other.Description = "changed"
	if err := s.CreateEnvironment(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second torch:1: got %v, want ErrConflict", err)
	}
	got, err := s.GetEnvironment(ctx, "torch", "1")
	if err != nil || got.Description != "for torch" {
		t.Errorf("after the refused create: %+v, %v; want the first one unchanged", got, err)
	}
}

func testEnvironmentNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateEnvironment(ctx, testEnvironment("torch", "1")); err != nil {
		t.Fatal(err)
	}
	for _, v := range [][2]string{{"torch", "2"}, {"tf", "1"}} {
		if _, err := s.GetEnvironment(ctx, v[0], v[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetEnvironment(%s, %s): got %v, want ErrNotFound", v[0], v[1], err)
		}
	}
	got, err := s.ListEnvironments(ctx, "tf")
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListEnvironments(tf) = %v, %v; want an empty, non-nil list", got, err)
	}
}

// testEnvironmentListOrder registers versions out of their lexical order:
// the list keeps registration order within a name, so "latest" is the last.
func testEnvironmentListOrder(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, e := range []store.Environment{
		testEnvironment("torch", "10"), testEnvironment("sklearn", "1"),
		testEnvironment("torch", "9"), testEnvironment("torch", "11"),
	} {
		if err := s.CreateEnvironment(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	versions := func(es []store.Environment) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Name+":"+e.Version)
		}
		return out
	}
	all, err := s.ListEnvironments(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"sklearn:1", "torch:10", "torch:9", "torch:11"}, versions(all)); d != "" {
		t.Errorf("ListEnvironments() (-want +got):\n%s", d)
	}
	torch, err := s.ListEnvironments(ctx, "torch")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"torch:10", "torch:9", "torch:11"}, versions(torch)); d != "" {
		t.Errorf("ListEnvironments(torch) (-want +got):\n%s", d)
	}
}

// --- nodes ---

// fullNode has every field set to a value other than its zero value.
func fullNode(name, compute string, created time.Time) store.Node {
	return store.Node{
		Name:      name,
		Compute:   compute,
		State:     "Idle",
		Reason:    "no job for 4m ✓",
		Size:      "Standard_NC24ads_A100_v4",
		Machine:   "/subscriptions/x/vm-" + name,
		Address:   "10.0.0.7:7946",
		Facts:     json.RawMessage("{\"gpus\": [\"A100\", \"A100\"],\n  \"cores\": 24, \"b\": 1.50}"),
		Created:   created,
		Joined:    created.Add(90 * time.Second),
		Heartbeat: created.Add(time.Hour + time.Microsecond),
		IdleSince: time.Unix(0, 0), // the epoch is a time, not "busy"
	}
}

func mustCreateNode(t *testing.T, s store.Store, n store.Node) {
	t.Helper()
	if err := s.CreateNode(context.Background(), n); err != nil {
		t.Fatalf("CreateNode(%q): %v", n.Name, err)
	}
}

func mustGetNode(t *testing.T, s store.Store, name string) store.Node {
	t.Helper()
	n, err := s.GetNode(context.Background(), name)
	if err != nil {
		t.Fatalf("GetNode(%q): %v", name, err)
	}
	return n
}

func mustListNodes(t *testing.T, s store.Store, compute string) []store.Node {
	t.Helper()
	ns, err := s.ListNodes(context.Background(), compute)
	if err != nil {
		t.Fatalf("ListNodes(%q): %v", compute, err)
	}
	return ns
}

func testNodeRoundTrip(t *testing.T, s store.Store) {
	want := fullNode("gpu-1", "gpu-cluster", t0)
	mustCreateNode(t, s, want)
	got := mustGetNode(t, s, "gpu-1")
	if d := diff(want, got); d != "" {
		t.Errorf("GetNode (-want +got):\n%s", d)
	}
	for what, tm := range map[string]time.Time{"Created": got.Created, "Joined": got.Joined, "Heartbeat": got.Heartbeat, "IdleSince": got.IdleSince} {
		if tm.Location() != time.UTC {
			t.Errorf("GetNode: %s is in %v, want UTC", what, tm.Location())
		}
	}
	if got.IdleSince.IsZero() {
		t.Error("GetNode: an IdleSince at the Unix epoch read back as the zero time")
	}
	if ns := mustListNodes(t, s, ""); len(ns) != 1 || diff(want, ns[0]) != "" {
		t.Errorf("ListNodes = %+v, want just %+v", ns, want)
	}
}

func testNodeZeroValues(t *testing.T, s store.Store) {
	want := store.Node{Name: "n1"}
	mustCreateNode(t, s, want)
	got := mustGetNode(t, s, "n1")
	if d := diff(want, got); d != "" {
		t.Errorf("GetNode (-want +got):\n%s", d)
	}
	if got.Facts != nil {
		t.Errorf("Facts = %q, want nil", got.Facts)
	}
	for what, tm := range map[string]time.Time{"Created": got.Created, "Joined": got.Joined, "Heartbeat": got.Heartbeat, "IdleSince": got.IdleSince} {
		if !tm.IsZero() {
			t.Errorf("%s = %v, want the zero time", what, tm)
		}
	}
}

func testNodeCreateConflict(t *testing.T, s store.Store) {
	first := fullNode("n1", "cpu", t0)
	mustCreateNode(t, s, first)
	second := fullNode("n1", "gpu", t0.Add(time.Hour))
	second.Facts = json.RawMessage(`{}`)
	wantErrIs(t, "second CreateNode", s.CreateNode(context.Background(), second), store.ErrConflict)
	if d := diff(first, mustGetNode(t, s, "n1")); d != "" {
		t.Errorf("first node changed by a conflicting create (-want +got):\n%s", d)
	}
}

func testNodeGetNotFound(t *testing.T, s store.Store) {
	_, err := s.GetNode(context.Background(), "nope")
	wantErrIs(t, "GetNode of a missing node", err, store.ErrNotFound)
}

func testNodeList(t *testing.T, s store.Store) {
	if ns := mustListNodes(t, s, ""); ns == nil || len(ns) != 0 {
		t.Errorf("ListNodes on an empty store = %#v, want an empty, non-nil slice", ns)
	}
	all := map[string]store.Node{}
	// Created out of name order, with ties broken by name and a zero
	// Created, which sorts first.
	for _, n := range []struct {
		name, compute string
		created       time.Time
	}{
		{"d", "cpu", t0.Add(2 * time.Minute)},
		{"b", "gpu", t0.Add(time.Minute)},
		{"c", "cpu", t0},
		{"a", "cpu", t0.Add(time.Minute)},
		{"e", "gpu", time.Time{}},
	} {
		all[n.name] = fullNode(n.name, n.compute, n.created)
		mustCreateNode(t, s, all[n.name])
	}
	nodes := func(names ...string) []store.Node {
		ns := []store.Node{}
		for _, n := range names {
			ns = append(ns, all[n])
		}
		return ns
	}
	for _, tt := range []struct {
		compute string
		want    []store.Node
	}{
		{"", nodes("e", "c", "a", "b", "d")},
		{"cpu", nodes("c", "a", "d")},
		{"gpu", nodes("e", "b")},
		{"tpu", nodes()},
	} {
		if d := diff(tt.want, mustListNodes(t, s, tt.compute)); d != "" {
			t.Errorf("ListNodes(%q) (-want +got):\n%s", tt.compute, d)
		}
	}
}

func testNodeUpdate(t *testing.T, s store.Store) {
	before := store.Node{Name: "n1", Compute: "gpu", State: "Launching", Size: "Standard_NC6", Created: t0}
	mustCreateNode(t, s, before)
	want := before
	want.State = "Ready"
	want.Machine = "vm-123"
	want.Address = "10.0.0.8:7946"
	want.Facts = json.RawMessage(`{"gpus": 1}`)
	want.Joined = t0.Add(time.Minute)
	want.Heartbeat = t0.Add(2 * time.Minute)

	got, err := s.UpdateNode(context.Background(), "n1", func(n *store.Node) error {
		if d := diff(before, *n); d != "" {
			t.Errorf("fn got (-want +got):\n%s", d)
		}
		n.State, n.Machine, n.Address, n.Facts = want.State, want.Machine, want.Address, want.Facts
		n.Joined, n.Heartbeat = want.Joined, want.Heartbeat
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateNode: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("UpdateNode returned (-want +got):\n%s", d)
	}
	if d := diff(want, mustGetNode(t, s, "n1")); d != "" {
		t.Errorf("GetNode after UpdateNode (-want +got):\n%s", d)
	}

	// Back to zero: nil Facts and zero times are written too.
	want = before
	got, err = s.UpdateNode(context.Background(), "n1", func(n *store.Node) error {
		*n = before
		return nil
	})
	if err != nil {
		t.Fatalf("second UpdateNode: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("second UpdateNode returned (-want +got):\n%s", d)
	}
	if d := diff(want, mustGetNode(t, s, "n1")); d != "" {
		t.Errorf("GetNode after the second UpdateNode (-want +got):\n%s", d)
	}
}

func testNodeUpdateFnError(t *testing.T, s store.Store) {
	want := fullNode("n1", "gpu", t0)
	mustCreateNode(t, s, want)
	_, err := s.UpdateNode(context.Background(), "n1", func(n *store.Node) error {
		n.State = "Lost"
		n.Facts = nil
		n.Heartbeat = time.Time{}
		return errTest
	})
	if err != errTest {
		t.Errorf("UpdateNode with a failing fn: got error %v, want fn's error as is", err)
	}
	if d := diff(want, mustGetNode(t, s, "n1")); d != "" {
		t.Errorf("node changed by an update whose fn failed (-want +got):\n%s", d)
	}
}

func testNodeUpdateNotFound(t *testing.T, s store.Store) {
	called := false
	_, err := s.UpdateNode(context.Background(), "nope", func(*store.Node) error {
		called = true
		return nil
	})
	wantErrIs(t, "UpdateNode of a missing node", err, store.ErrNotFound)
	if called {
		t.Error("UpdateNode called fn for a missing node")
	}
}

func testNodeUpdateIgnoresName(t *testing.T, s store.Store) {
	mustCreateNode(t, s, fullNode("n1", "gpu", t0))
	want := fullNode("n1", "gpu", t0)
	want.State = "Draining"
	got, err := s.UpdateNode(context.Background(), "n1", func(n *store.Node) error {
		n.Name = "renamed"
		n.State = "Draining"
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateNode: %v", err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("UpdateNode returned (-want +got):\n%s", d)
	}
	if d := diff([]store.Node{want}, mustListNodes(t, s, "")); d != "" {
		t.Errorf("ListNodes (-want +got):\n%s", d)
	}
	_, err = s.GetNode(context.Background(), "renamed")
	wantErrIs(t, "GetNode of the name fn set", err, store.ErrNotFound)
}

func testNodeUpdateConcurrent(t *testing.T, s store.Store) {
	const n = 20
	mustCreateNode(t, s, store.Node{Name: "n1", Compute: "gpu"})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[int]int{}
	)
	for range n {
		wg.Go(func() {
			_, err := s.UpdateNode(context.Background(), "n1", func(node *store.Node) error {
				mu.Lock()
				seen[len(node.Reason)]++
				mu.Unlock()
				node.Reason += "+"
				return nil
			})
			if err != nil {
				t.Errorf("UpdateNode: %v", err)
			}
		})
	}
	wg.Wait()
	if got := mustGetNode(t, s, "n1").Reason; len(got) != n {
		t.Errorf("after %d concurrent appends Reason = %q (%d long)", n, got, len(got))
	}
	// Serialised updates each saw a different state: 0, 1, ..., n-1 appends.
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("%d updates saw %d earlier appends, want 1", seen[i], i)
		}
	}
}

func testNodeDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateNode(t, s, fullNode("a", "gpu", t0))
	mustCreateNode(t, s, fullNode("b", "gpu", t0))
	if err := s.DeleteNode(ctx, "a"); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	_, err := s.GetNode(ctx, "a")
	wantErrIs(t, "GetNode after DeleteNode", err, store.ErrNotFound)
	wantErrIs(t, "second DeleteNode", s.DeleteNode(ctx, "a"), store.ErrNotFound)
	mustGetNode(t, s, "b")
	// The name is free again.
	mustCreateNode(t, s, fullNode("a", "cpu", t0))
}

func testComputeDeleteKeepsNodesAndEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateCompute(t, s, testCompute("gpu"))
	node := fullNode("n1", "gpu", t0)
	mustCreateNode(t, s, node)
	ev := store.ComputeEvent{Compute: "gpu", Time: t0, Kind: "scale_up", Message: "1 node for 1 queued job"}
	if err := s.AddComputeEvent(ctx, ev); err != nil {
		t.Fatalf("AddComputeEvent: %v", err)
	}
	if err := s.DeleteCompute(ctx, "gpu"); err != nil {
		t.Fatalf("DeleteCompute: %v", err)
	}
	if d := diff([]store.Node{node}, mustListNodes(t, s, "gpu")); d != "" {
		t.Errorf("ListNodes after DeleteCompute (-want +got):\n%s", d)
	}
	if d := diff([]store.ComputeEvent{ev}, mustListComputeEvents(t, s, "gpu", 0)); d != "" {
		t.Errorf("ListComputeEvents after DeleteCompute (-want +got):\n%s", d)
	}
}

// --- compute events ---

func mustListComputeEvents(t *testing.T, s store.Store, compute string, limit int) []store.ComputeEvent {
	t.Helper()
	es, err := s.ListComputeEvents(context.Background(), compute, limit)
	if err != nil {
		t.Fatalf("ListComputeEvents(%q, %d): %v", compute, limit, err)
	}
	return es
}

// addComputeEvents adds events of compute at the given minutes after t0 (a
// negative minute is the zero time) and returns them in insertion order.
func addComputeEvents(t *testing.T, s store.Store, compute string, minutes ...int) []store.ComputeEvent {
	t.Helper()
	var out []store.ComputeEvent
	for i, m := range minutes {
		e := store.ComputeEvent{Compute: compute, Kind: "scale_up", Message: fmt.Sprintf("%s event %d\nsecond line ✓", compute, i)}
		if m >= 0 {
			e.Time = t0.Add(time.Duration(m) * time.Minute)
		}
		if err := s.AddComputeEvent(context.Background(), e); err != nil {
			t.Fatalf("AddComputeEvent: %v", err)
		}
		out = append(out, e)
	}
	return out
}

// pick returns es[i] for each index, in that order.
func pick(es []store.ComputeEvent, indexes ...int) []store.ComputeEvent {
	out := []store.ComputeEvent{}
	for _, i := range indexes {
		out = append(out, es[i])
	}
	return out
}

func testComputeEventOrder(t *testing.T, s store.Store) {
	// Times out of insertion order, two ties, and a zero time (the oldest).
	gpu := addComputeEvents(t, s, "gpu", 5, 1, 3, 1, -1, 5)
	cpu := addComputeEvents(t, s, "cpu", 2)
	if d := diff(pick(gpu, 4, 1, 3, 2, 0, 5), mustListComputeEvents(t, s, "gpu", 0)); d != "" {
		t.Errorf("ListComputeEvents(gpu) (-want +got):\n%s", d)
	}
	if d := diff(pick(cpu, 0), mustListComputeEvents(t, s, "cpu", -1)); d != "" {
		t.Errorf("ListComputeEvents(cpu, -1) (-want +got):\n%s", d)
	}
	for _, e := range mustListComputeEvents(t, s, "gpu", 0) {
		if e.Time.Location() != time.UTC {
			t.Errorf("ListComputeEvents: Time %v is not in UTC", e.Time)
		}
	}
}

func testComputeEventLimit(t *testing.T, s store.Store) {
	gpu := addComputeEvents(t, s, "gpu", 5, 1, 3, 1, -1, 5)
	addComputeEvents(t, s, "cpu", 9, 9, 9)
	for _, tt := range []struct {
		limit int
		want  []int
	}{
		{1, []int{5}},
		{2, []int{0, 5}},
		{3, []int{2, 0, 5}},
		{4, []int{3, 2, 0, 5}},
		{6, []int{4, 1, 3, 2, 0, 5}},
		{100, []int{4, 1, 3, 2, 0, 5}},
	} {
		if d := diff(pick(gpu, tt.want...), mustListComputeEvents(t, s, "gpu", tt.limit)); d != "" {
			t.Errorf("ListComputeEvents(gpu, %d) (-want +got):\n%s", tt.limit, d)
		}
	}
}

func testComputeEventEmpty(t *testing.T, s store.Store) {
	mustCreateCompute(t, s, testCompute("gpu"))
	addComputeEvents(t, s, "cpu", 1)
	for _, compute := range []string{"gpu", "nope"} {
		if es := mustListComputeEvents(t, s, compute, 10); es == nil || len(es) != 0 {
			t.Errorf("ListComputeEvents(%q) = %#v, want an empty, non-nil slice", compute, es)
		}
	}
}

// --- quotas and enabled sizes ---

func mustListQuotas(t *testing.T, s store.Store) map[string]int {
	t.Helper()
	qs, err := s.ListQuotas(context.Background())
	if err != nil {
		t.Fatalf("ListQuotas: %v", err)
	}
	return qs
}

func testQuotaSetListDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	if qs := mustListQuotas(t, s); qs == nil || len(qs) != 0 {
		t.Errorf("ListQuotas on an empty store = %#v, want an empty, non-nil map", qs)
	}
	for _, q := range []struct {
		family string
		cores  int
	}{{"NCadsA100v4", 96}, {"Dv5", 0}, {"NCadsA100v4", 48}, {"ESv5", 200}} {
		if err := s.SetQuota(ctx, q.family, q.cores); err != nil {
			t.Fatalf("SetQuota(%q, %d): %v", q.family, q.cores, err)
		}
	}
	if d := diff(map[string]int{"NCadsA100v4": 48, "Dv5": 0, "ESv5": 200}, mustListQuotas(t, s)); d != "" {
		t.Errorf("ListQuotas (-want +got):\n%s", d)
	}
	if err := s.DeleteQuota(ctx, "Dv5"); err != nil {
		t.Fatalf("DeleteQuota: %v", err)
	}
	wantErrIs(t, "second DeleteQuota", s.DeleteQuota(ctx, "Dv5"), store.ErrNotFound)
	wantErrIs(t, "DeleteQuota of a family never set", s.DeleteQuota(ctx, "nope"), store.ErrNotFound)
	if d := diff(map[string]int{"NCadsA100v4": 48, "ESv5": 200}, mustListQuotas(t, s)); d != "" {
		t.Errorf("ListQuotas after DeleteQuota (-want +got):\n%s", d)
	}
}

func testQuotaEnabledSizes(t *testing.T, s store.Store) {
	ctx := context.Background()
	list := func() []string {
		t.Helper()
		sizes, err := s.ListEnabledSizes(ctx)
		if err != nil {
			t.Fatalf("ListEnabledSizes: %v", err)
		}
		return sizes
	}
	if sizes := list(); sizes == nil || len(sizes) != 0 {
		t.Errorf("ListEnabledSizes on an empty store = %#v, want an empty, non-nil slice", sizes)
	}
	for _, op := range []struct {
		size    string
		enabled bool
	}{
		{"Standard_ND96asr_v4", true},
		{"Standard_NC6", false}, // never enabled
		{"Standard_M128", true},
		{"Standard_ND96asr_v4", true}, // twice
		{"Standard_HB120rs_v3", true},
		{"Standard_M128", false},
		{"Standard_M128", false}, // twice
		{"Standard_HB120rs_v2", true},
	} {
		if err := s.SetSizeEnabled(ctx, op.size, op.enabled); err != nil {
			t.Fatalf("SetSizeEnabled(%q, %t): %v", op.size, op.enabled, err)
		}
	}
	if d := cmp.Diff([]string{"Standard_HB120rs_v2", "Standard_HB120rs_v3", "Standard_ND96asr_v4"}, list()); d != "" {
		t.Errorf("ListEnabledSizes (-want +got):\n%s", d)
	}
}
