package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunSchedules runs the suite of store.Schedules. It needs store.Jobs and
// store.Pipelines too, to read the job and the steps a firing stores. open is
// as for Run.
func RunSchedules[S scheduleStore](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) scheduleStore { return open(t) }, []test[scheduleStore]{
		{"Schedule/CRUD", testScheduleCRUD},
		{"Schedule/FireOnce", testScheduleFireOnce},
		{"Schedule/FirePipeline", testScheduleFirePipeline},
	})
}

// scheduleStore is what RunSchedules needs: the schedules, and the jobs and
// pipeline steps their firings store.
type scheduleStore interface {
	store.Schedules
	store.Jobs
	store.Pipelines
}

func testSchedule(name string) store.Schedule {
	return store.Schedule{
		Name: name, Spec: json.RawMessage(`{"name": "` + name + `"}`), Job: json.RawMessage(`{"spec": {}}`),
		Enabled: true, NextFire: t0.Add(time.Hour), CreatedBy: "owner", Created: t0, Updated: t0,
	}
}

func testScheduleCRUD(t *testing.T, s scheduleStore) {
	ctx := context.Background()
	want := testSchedule("nightly")
	if err := s.CreateSchedule(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSchedule(ctx, want); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second CreateSchedule: %v, want ErrConflict", err)
	}
	got, err := s.GetSchedule(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	want.NextFire, want.Created, want.Updated = want.NextFire.UTC().Truncate(time.Microsecond), want.Created.UTC().Truncate(time.Microsecond), want.Updated.UTC().Truncate(time.Microsecond)
	if d := diff(want, got); d != "" {
		t.Errorf("GetSchedule (-want +got):\n%s", d)
	}
	if _, err := s.GetSchedule(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSchedule(nope): %v, want ErrNotFound", err)
	}
	if err := s.CreateSchedule(ctx, testSchedule("hourly")); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSchedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "hourly" || list[1].Name != "nightly" {
		t.Errorf("ListSchedules = %v, want hourly and nightly in that order", list)
	}
	up, err := s.UpdateSchedule(ctx, "nightly", func(sc *store.Schedule) error {
		sc.Enabled, sc.NextFire, sc.Name = false, time.Time{}, "renamed"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if up.Name != "nightly" || up.Enabled || !up.NextFire.IsZero() || !up.Created.Equal(t0) {
		t.Errorf("UpdateSchedule = %+v, want nightly disabled, no next fire, created kept", up)
	}
	fnErr := errors.New("no")
	if _, err := s.UpdateSchedule(ctx, "nightly", func(*store.Schedule) error { return fnErr }); err != fnErr {
		t.Errorf("UpdateSchedule with failing fn: %v, want fn's error", err)
	}
	if _, err := s.UpdateSchedule(ctx, "nope", func(*store.Schedule) error { t.Error("fn called for a missing schedule"); return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSchedule(nope): %v, want ErrNotFound", err)
	}
	if err := s.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSchedule(ctx, "nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteSchedule: %v, want ErrNotFound", err)
	}
}

// testScheduleFireOnce checks that an occurrence fires one job however
// many firings of it race, that LastFired only moves forward, and that a
// disabled schedule does not fire.
func testScheduleFireOnce(t *testing.T, s scheduleStore) {
	ctx := context.Background()
	if err := s.CreateSchedule(ctx, testSchedule("hourly")); err != nil {
		t.Fatal(err)
	}
	occ := t0.Add(time.Hour)
	fire := func(name string, occ time.Time) error {
		j := store.Job{Name: name, Status: "Queued", Compute: "local", Created: t0}
		_, err := s.FireSchedule(ctx, "hourly", occ, occ.Add(time.Hour), j, store.Event{Time: t0, To: "Queued"}, nil)
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for i := range 8 {
		wg.Go(func() {
			err := fire("hourly-"+string(rune('a'+i)), occ)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("FireSchedule: %v, want nil or ErrConflict", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d of 8 concurrent firings of one occurrence stored a job, want 1", wins)
	}
	sc, err := s.GetSchedule(ctx, "hourly")
	if err != nil {
		t.Fatal(err)
	}
	if !sc.LastFired.Equal(occ) || !sc.NextFire.Equal(occ.Add(time.Hour)) || sc.LastJob == "" {
		t.Errorf("after firing: last fired %v, next %v, last job %q; want %v, %v and the job", sc.LastFired, sc.NextFire, sc.LastJob, occ, occ.Add(time.Hour))
	}
	if _, err := s.GetJob(ctx, sc.LastJob); err != nil {
		t.Errorf("the fired job: %v", err)
	}
	if err := fire("earlier", occ.Add(-time.Hour)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("firing an earlier occurrence: %v, want ErrConflict", err)
	}
	if _, err := s.GetJob(ctx, "earlier"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused firing stored its job: %v", err)
	}
	if _, err := s.UpdateSchedule(ctx, "hourly", func(sc *store.Schedule) error { sc.LastFired = t0; return nil }); !errors.Is(err, store.ErrConflict) {
		t.Errorf("moving LastFired back: %v, want ErrConflict", err)
	}
	if _, err := s.UpdateSchedule(ctx, "hourly", func(sc *store.Schedule) error { sc.Enabled = false; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := fire("disabled", occ.Add(time.Hour)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("firing a disabled schedule: %v, want ErrConflict", err)
	}
	if _, err := s.FireSchedule(ctx, "nope", occ, occ, store.Job{Name: "x"}, store.Event{}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("firing a missing schedule: %v, want ErrNotFound", err)
	}
}

// testScheduleFirePipeline checks that a firing of a pipeline job stores
// its steps with it, and that a refused firing stores none.
func testScheduleFirePipeline(t *testing.T, s scheduleStore) {
	ctx := context.Background()
	if err := s.CreateSchedule(ctx, testSchedule("daily")); err != nil {
		t.Fatal(err)
	}
	occ := t0.Add(time.Hour)
	steps := []store.PipelineStep{{Step: "prep"}, {Step: "train"}}
	j := store.Job{Name: "daily-1", Status: "NotStarted", Created: t0}
	if _, err := s.FireSchedule(ctx, "daily", occ, occ.Add(24*time.Hour), j, store.Event{Time: t0, To: "NotStarted"}, steps); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListPipelineSteps(ctx, "daily-1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range got {
		names = append(names, st.Step)
		if st.Pipeline != "daily-1" {
			t.Errorf("step %s: pipeline %q, want daily-1", st.Step, st.Pipeline)
		}
	}
	if diff := cmp.Diff([]string{"prep", "train"}, names); diff != "" {
		t.Errorf("steps of the fired pipeline (-want +got):\n%s", diff)
	}
	j.Name = "daily-again"
	if _, err := s.FireSchedule(ctx, "daily", occ, occ.Add(24*time.Hour), j, store.Event{Time: t0, To: "NotStarted"}, steps); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("firing the occurrence again: %v, want ErrConflict", err)
	}
	if got, err := s.ListPipelineSteps(ctx, "daily-again"); err != nil || len(got) != 0 {
		t.Errorf("a refused firing stored steps: %v, %v", got, err)
	}
}
