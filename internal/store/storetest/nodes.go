package storetest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

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

func mustCreateNode(t *testing.T, s store.Computes, n store.Node) {
	t.Helper()
	if err := s.CreateNode(context.Background(), n); err != nil {
		t.Fatalf("CreateNode(%q): %v", n.Name, err)
	}
}

func mustGetNode(t *testing.T, s store.Computes, name string) store.Node {
	t.Helper()
	n, err := s.GetNode(context.Background(), name)
	if err != nil {
		t.Fatalf("GetNode(%q): %v", name, err)
	}
	return n
}

func mustListNodes(t *testing.T, s store.Computes, compute string) []store.Node {
	t.Helper()
	ns, err := s.ListNodes(context.Background(), compute)
	if err != nil {
		t.Fatalf("ListNodes(%q): %v", compute, err)
	}
	return ns
}

func testNodeRoundTrip(t *testing.T, s store.Computes) {
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

func testNodeZeroValues(t *testing.T, s store.Computes) {
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

func testNodeCreateConflict(t *testing.T, s store.Computes) {
	first := fullNode("n1", "cpu", t0)
	mustCreateNode(t, s, first)
	second := fullNode("n1", "gpu", t0.Add(time.Hour))
	second.Facts = json.RawMessage(`{}`)
	wantErrIs(t, "second CreateNode", s.CreateNode(context.Background(), second), store.ErrConflict)
	if d := diff(first, mustGetNode(t, s, "n1")); d != "" {
		t.Errorf("first node changed by a conflicting create (-want +got):\n%s", d)
	}
}

func testNodeGetNotFound(t *testing.T, s store.Computes) {
	_, err := s.GetNode(context.Background(), "nope")
	wantErrIs(t, "GetNode of a missing node", err, store.ErrNotFound)
}

func testNodeList(t *testing.T, s store.Computes) {
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

func testNodeUpdate(t *testing.T, s store.Computes) {
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

func testNodeUpdateFnError(t *testing.T, s store.Computes) {
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

func testNodeUpdateNotFound(t *testing.T, s store.Computes) {
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

func testNodeUpdateIgnoresName(t *testing.T, s store.Computes) {
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

func testNodeUpdateConcurrent(t *testing.T, s store.Computes) {
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

func testNodeDelete(t *testing.T, s store.Computes) {
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
