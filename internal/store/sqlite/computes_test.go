package sqlite

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// names are the names of cs, in order.
func names(cs []store.Compute) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func listComputes(t *testing.T, s *Store) []store.Compute {
	t.Helper()
	cs, err := s.ListComputes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// ListComputes answers from its cache until a compute is written through
// the store, or the cache's time is up: a second handle's write (which the
// server's lock on its data dir rules out) is seen only then. Every write
// of this store is seen at once, and what a caller does to the list it was
// given does not reach the cache.
func TestListComputesIsCachedUntilAWrite(t *testing.T) {
	ctx := context.Background()
	s, other := openTwice(t)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.computes.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := store.Compute{Name: "a", Type: "local", Spec: json.RawMessage(`{"name":"a"}`), State: "Succeeded"}

	if err := s.CreateCompute(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := listComputes(t, s)
	if len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("after a create: %v", names(got))
	}
	got[0].Spec[2] = 'X' // the caller's copy
	if again := listComputes(t, s); string(again[0].Spec) != `{"name":"a"}` {
		t.Errorf("a caller's change reached the cache: %s", again[0].Spec)
	}

	c.Name = "b"
	if err := other.CreateCompute(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := names(listComputes(t, s)); len(got) != 1 {
		t.Errorf("the list was read again, not cached: %v", got)
	}
	mu.Lock()
	now = now.Add(computeCacheTTL)
	mu.Unlock()
	if got := names(listComputes(t, s)); len(got) != 2 {
		t.Errorf("after the cache's time: %v, want a and b", got)
	}

	if _, err := s.UpdateCompute(ctx, "a", func(c *store.Compute) error { c.State = "Failed"; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := listComputes(t, s); got[0].State != "Failed" {
		t.Errorf("after an update: state %s, want Failed", got[0].State)
	}
	if err := s.DeleteCompute(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := names(listComputes(t, s)); len(got) != 1 || got[0] != "b" {
		t.Errorf("after a delete: %v, want b", got)
	}
	c.Name = "c"
	if err := s.CreateCompute(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := names(listComputes(t, s)); len(got) != 2 {
		t.Errorf("after a create: %v, want b and c", got)
	}
}

// A list read before a compute's write is not put into the cache after it.
func TestComputeCacheRefusesAListOlderThanAWrite(t *testing.T) {
	var c computeCache
	_, gen, ok := c.get()
	if ok {
		t.Fatal("an empty cache had a list")
	}
	c.changed() // a write commits meanwhile
	c.put([]store.Compute{{Name: "old"}}, gen)
	if _, _, ok := c.get(); ok {
		t.Error("a list read before a write was cached after it")
	}
	_, gen, _ = c.get()
	c.put([]store.Compute{{Name: "new"}}, gen)
	if got, _, ok := c.get(); !ok || got[0].Name != "new" {
		t.Errorf("a list read after the last write was not cached: %v %v", got, ok)
	}
}
