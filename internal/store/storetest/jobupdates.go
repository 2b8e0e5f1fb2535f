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

func testJobUpdate(t *testing.T, s jobStore) {
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

func testJobUpdateNilEvent(t *testing.T, s jobStore) {
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

func testJobUpdateFnError(t *testing.T, s jobStore) {
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
func testJobUpdateMany(t *testing.T, s jobStore) {
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
func testJobUpdateManyTokenConflict(t *testing.T, s jobStore) {
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

func testJobUpdateNotFound(t *testing.T, s jobStore) {
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

func testJobUpdateIgnoresNameAndSeq(t *testing.T, s jobStore) {
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

func testJobUpdateConcurrent(t *testing.T, s jobStore) {
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
