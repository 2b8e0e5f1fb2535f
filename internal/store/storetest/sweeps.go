package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunSweeps runs the suite of store.Sweeps. open is as for Run.
func RunSweeps[S store.Sweeps](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.Sweeps { return open(t) }, []test[store.Sweeps]{
		{"Sweep/Lifecycle", testSweepLifecycle},
		{"Sweep/Trials", testSweepTrials},
	})
}

func testSweepLifecycle(t *testing.T, s store.Sweeps) {
	ctx := context.Background()
	for _, n := range []string{"s1", "s2", "s3"} {
		if err := s.CreateSweep(ctx, n, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSweep(ctx, "s2", t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateSweep twice = %v, want ErrConflict", err)
	}
	if err := s.SweepDone(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if err := s.SweepDone(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SweepDone of no sweep = %v, want ErrNotFound", err)
	}
	open, err := s.ListOpenSweeps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]string{"s1", "s3"}, open); d != "" {
		t.Errorf("ListOpenSweeps (-want +got):\n%s", d)
	}
}

func testSweepTrials(t *testing.T, s store.Sweeps) {
	ctx := context.Background()
	none, err := s.ListSweepTrials(ctx, "s1")
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("ListSweepTrials of none = %v, %v; want empty, not nil", none, err)
	}
	want := []store.SweepTrial{
		{Sweep: "s1", Index: 0, Job: "s1_0", Params: json.RawMessage(`{"lr":0.1,"opt":"sgd"}`), Created: t0},
		{Sweep: "s1", Index: 1, Job: "s1_1", Params: json.RawMessage(`{"lr":0.01,"opt":"adam"}`), Created: t0},
	}
	// Added out of order, listed by index.
	for _, i := range []int{1, 0} {
		if err := s.AddSweepTrial(ctx, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddSweepTrial(ctx, store.SweepTrial{Sweep: "s2", Index: 0, Job: "s2_0", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	again := want[1]
	again.Job = "other"
	if err := s.AddSweepTrial(ctx, again); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AddSweepTrial of a taken index = %v, want ErrConflict", err)
	}
	got, err := s.ListSweepTrials(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("ListSweepTrials (-want +got):\n%s", d)
	}
}
