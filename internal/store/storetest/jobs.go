package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunJobs runs the suite of store.Jobs: job records, their status events and
// preemptions. It needs store.Tokens too, to see the run tokens UpdateJobs
// writes with them. open is as for Run.
func RunJobs[S jobStore](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) jobStore { return open(t) }, []test[jobStore]{
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
	})
}

// jobStore is what RunJobs and RunTokens need: the jobs, and the tokens
// that UpdateJobs and UpdateJobWith write with them.
type jobStore interface {
	store.Jobs
	store.Tokens
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

func mustCreateJob(t *testing.T, s store.Jobs, j store.Job) store.Job {
	t.Helper()
	got, err := s.CreateJob(context.Background(), j, firstEvent(j.Name))
	if err != nil {
		t.Fatalf("CreateJob(%q): %v", j.Name, err)
	}
	return got
}

func mustGetJob(t *testing.T, s store.Jobs, name string) store.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), name)
	if err != nil {
		t.Fatalf("GetJob(%q): %v", name, err)
	}
	return j
}

func mustListJobs(t *testing.T, s store.Jobs, f store.JobFilter) []store.Job {
	t.Helper()
	js, err := s.ListJobs(context.Background(), f)
	if err != nil {
		t.Fatalf("ListJobs(%+v): %v", f, err)
	}
	return js
}

func mustListEvents(t *testing.T, s store.Jobs, job string) []store.Event {
	t.Helper()
	es, err := s.ListEvents(context.Background(), job)
	if err != nil {
		t.Fatalf("ListEvents(%q): %v", job, err)
	}
	return es
}

func testJobCreateAssignsSeq(t *testing.T, s jobStore) {
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

func testJobCreateConcurrent(t *testing.T, s jobStore) {
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

func testJobCreateStoresFirstEvent(t *testing.T, s jobStore) {
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

func testJobCreateConflict(t *testing.T, s jobStore) {
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

func testJobRoundTrip(t *testing.T, s jobStore) {
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

func testJobZeroValues(t *testing.T, s jobStore) {
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

func testJobExitCodeZero(t *testing.T, s jobStore) {
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

func testJobTimePrecision(t *testing.T, s jobStore) {
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

func testJobGetNotFound(t *testing.T, s jobStore) {
	_, err := s.GetJob(context.Background(), "nope")
	wantErrIs(t, "GetJob of a missing job", err, store.ErrNotFound)
}

func testJobList(t *testing.T, s jobStore) {
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
func testJobListByHandle(t *testing.T, s jobStore) {
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

func testJobListEventsOrder(t *testing.T, s jobStore) {
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

func testJobListEventsNotFound(t *testing.T, s jobStore) {
	_, err := s.ListEvents(context.Background(), "nope")
	wantErrIs(t, "ListEvents of a missing job", err, store.ErrNotFound)
}

func testJobPreemptions(t *testing.T, s jobStore) {
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

func testJobPreemptionsNotFound(t *testing.T, s jobStore) {
	_, err := s.ListPreemptions(context.Background(), "nope")
	wantErrIs(t, "ListPreemptions of a missing job", err, store.ErrNotFound)
	err = s.AddPreemption(context.Background(), store.Preemption{Job: "nope", Attempt: 1, Node: "n"})
	wantErrIs(t, "AddPreemption to a missing job", err, store.ErrNotFound)
}

// testJobCount: CountJobs counts per compute the jobs in the statuses
// asked for, as ListJobs would list them.
func testJobCount(t *testing.T, s jobStore) {
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
