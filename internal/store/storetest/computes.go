package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunComputes runs the suite of store.Computes: compute targets, their nodes
// and their events. open is as for Run.
func RunComputes[S store.Computes](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.Computes { return open(t) }, []test[store.Computes]{
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
	})
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

func mustCreateCompute(t *testing.T, s store.Computes, c store.Compute) {
	t.Helper()
	if err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatalf("CreateCompute(%q): %v", c.Name, err)
	}
}

func mustGetCompute(t *testing.T, s store.Computes, name string) store.Compute {
	t.Helper()
	c, err := s.GetCompute(context.Background(), name)
	if err != nil {
		t.Fatalf("GetCompute(%q): %v", name, err)
	}
	return c
}

func testComputeCreateGet(t *testing.T, s store.Computes) {
	want := testCompute("gpu-cluster")
	mustCreateCompute(t, s, want)
	if d := diff(want, mustGetCompute(t, s, "gpu-cluster")); d != "" {
		t.Errorf("GetCompute after CreateCompute (-want +got):\n%s", d)
	}
}

func testComputeNilSpec(t *testing.T, s store.Computes) {
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

func testComputeCreateConflict(t *testing.T, s store.Computes) {
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

func testComputeGetNotFound(t *testing.T, s store.Computes) {
	_, err := s.GetCompute(context.Background(), "nope")
	wantErrIs(t, "GetCompute of a missing target", err, store.ErrNotFound)
}

func testComputeList(t *testing.T, s store.Computes) {
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

func testComputeUpdate(t *testing.T, s store.Computes) {
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

func testComputeUpdateFnError(t *testing.T, s store.Computes) {
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

func testComputeUpdateNotFound(t *testing.T, s store.Computes) {
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

func testComputeUpdateIgnoresName(t *testing.T, s store.Computes) {
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

func testComputeDelete(t *testing.T, s store.Computes) {
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

func testComputeDeleteKeepsNodesAndEvents(t *testing.T, s store.Computes) {
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

func mustListComputeEvents(t *testing.T, s store.Computes, compute string, limit int) []store.ComputeEvent {
	t.Helper()
	es, err := s.ListComputeEvents(context.Background(), compute, limit)
	if err != nil {
		t.Fatalf("ListComputeEvents(%q, %d): %v", compute, limit, err)
	}
	return es
}

// addComputeEvents adds events of compute at the given minutes after t0 (a
// negative minute is the zero time) and returns them in insertion order.
func addComputeEvents(t *testing.T, s store.Computes, compute string, minutes ...int) []store.ComputeEvent {
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

func testComputeEventOrder(t *testing.T, s store.Computes) {
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

func testComputeEventLimit(t *testing.T, s store.Computes) {
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

func testComputeEventEmpty(t *testing.T, s store.Computes) {
	mustCreateCompute(t, s, testCompute("gpu"))
	addComputeEvents(t, s, "cpu", 1)
	for _, compute := range []string{"gpu", "nope"} {
		if es := mustListComputeEvents(t, s, compute, 10); es == nil || len(es) != 0 {
			t.Errorf("ListComputeEvents(%q) = %#v, want an empty, non-nil slice", compute, es)
		}
	}
}
