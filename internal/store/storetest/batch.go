package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunBatchEndpoints runs the suite of store.BatchEndpoints: batch endpoints
// and their deployments. open is as for Run.
func RunBatchEndpoints[S store.BatchEndpoints](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.BatchEndpoints { return open(t) }, []test[store.BatchEndpoints]{
		{"BatchEndpoint/Lifecycle", testBatchEndpointLifecycle},
	})
}

// testBatchEndpointLifecycle: batch endpoints and their deployments are
// created, read, listed, changed and deleted; deleting an endpoint takes
// its deployments with it; missing ones are ErrNotFound and taken names
// ErrConflict.
func testBatchEndpointLifecycle(t *testing.T, s store.BatchEndpoints) {
	ctx := context.Background()
	ep := store.BatchEndpoint{Name: "scorer", Spec: json.RawMessage(`{"name": "scorer"}`), Jobs: json.RawMessage(`[]`), Created: t0, Updated: t0}
	if err := s.CreateBatchEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBatchEndpoint(ctx, store.BatchEndpoint{Name: "other", Spec: json.RawMessage(`{}`), Created: t0, Updated: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBatchEndpoint(ctx, ep); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second scorer: %v, want ErrConflict", err)
	}
	got, err := s.GetBatchEndpoint(ctx, "scorer")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(ep, got); d != "" {
		t.Errorf("GetBatchEndpoint (-want +got):\n%s", d)
	}
	changed := ep
	changed.Jobs = json.RawMessage(`["scorer-1"]`)
	changed.Updated = t0.Add(time.Hour)
	changed.Created = t0.Add(2 * time.Hour) // not stored
	if err := s.UpdateBatchEndpoint(ctx, changed); err != nil {
		t.Fatal(err)
	}
	changed.Created = t0
	if got, err = s.GetBatchEndpoint(ctx, "scorer"); err != nil || diff(changed, got) != "" {
		t.Errorf("after UpdateBatchEndpoint: %v (-want +got):\n%s", err, diff(changed, got))
	}
	all, err := s.ListBatchEndpoints(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "other" || all[1].Name != "scorer" {
		t.Errorf("ListBatchEndpoints: %v %+v", err, all)
	}

	d1 := store.BatchDeployment{Endpoint: "scorer", Name: "blue", Spec: json.RawMessage(`{"mini_batch_size": 10}`), Created: t0, Updated: t0}
	for _, d := range []store.BatchDeployment{d1, {Endpoint: "scorer", Name: "green", Spec: json.RawMessage(`{}`), Created: t0, Updated: t0},
		{Endpoint: "other", Name: "blue", Spec: json.RawMessage(`{}`), Created: t0, Updated: t0}} {
		if err := s.CreateBatchDeployment(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateBatchDeployment(ctx, d1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second scorer/blue: %v, want ErrConflict", err)
	}
	d1.Spec, d1.Updated = json.RawMessage(`{"mini_batch_size": 20}`), t0.Add(time.Minute)
	if err := s.UpdateBatchDeployment(ctx, d1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetBatchDeployment(ctx, "scorer", "blue"); err != nil || diff(d1, got) != "" {
		t.Errorf("GetBatchDeployment after update: %v (-want +got):\n%s", err, diff(d1, got))
	}
	ds, err := s.ListBatchDeployments(ctx, "scorer")
	if err != nil || len(ds) != 2 || ds[0].Name != "blue" || ds[1].Name != "green" {
		t.Errorf("ListBatchDeployments(scorer): %v %+v", err, ds)
	}
	if err := s.DeleteBatchDeployment(ctx, "scorer", "green"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBatchDeployment(ctx, "scorer", "green"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting green twice: %v, want ErrNotFound", err)
	}
	if err := s.DeleteBatchEndpoint(ctx, "scorer"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBatchDeployment(ctx, "scorer", "blue"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a deleted endpoint's deployment: %v, want ErrNotFound", err)
	}
	if _, err := s.GetBatchDeployment(ctx, "other", "blue"); err != nil {
		t.Errorf("another endpoint's deployment went with it: %v", err)
	}
	for _, err := range []error{
		s.DeleteBatchEndpoint(ctx, "scorer"),
		s.UpdateBatchEndpoint(ctx, ep),
		s.UpdateBatchDeployment(ctx, store.BatchDeployment{Endpoint: "nope", Name: "x"}),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("on a missing one: %v, want ErrNotFound", err)
		}
	}
	if _, err := s.GetBatchEndpoint(ctx, "scorer"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetBatchEndpoint of a deleted one: %v", err)
	}
}
