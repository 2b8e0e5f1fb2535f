package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunEndpoints runs the suite of store.Endpoints: online endpoints and their
// deployments. open is as for Run.
func RunEndpoints[S store.Endpoints](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.Endpoints { return open(t) }, []test[store.Endpoints]{
		{"Endpoint/CreateGet", testEndpointCreateGet},
		{"Endpoint/Conflict", testEndpointConflict},
		{"Endpoint/NotFound", testEndpointNotFound},
		{"Endpoint/Update", testEndpointUpdate},
		{"Endpoint/ListDelete", testEndpointListDelete},

		{"Deployment/Lifecycle", testDeploymentLifecycle},
	})
}

func testEndpoint(name string) store.Endpoint {
	return store.Endpoint{
		Name:         name,
		Spec:         json.RawMessage(`{"name": "` + name + `", "auth_mode": "key", "tags": {"a": "b"}}`),
		State:        "Succeeded",
		PrimaryKey:   "sealed-primary-" + name,
		SecondaryKey: "sealed-secondary-" + name,
		Created:      t0,
		Updated:      t0,
	}
}

func testEndpointCreateGet(t *testing.T, s store.Endpoints) {
	ctx := context.Background()
	want := testEndpoint("iris-ep")
	if err := s.CreateEndpoint(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetEndpoint(ctx, "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("GetEndpoint (-want +got):\n%s", d)
	}
}

func testEndpointConflict(t *testing.T, s store.Endpoints) {
	ctx := context.Background()
	if err := s.CreateEndpoint(ctx, testEndpoint("iris-ep")); err != nil {
		t.Fatal(err)
	}
	other := testEndpoint("iris-ep")
	other.PrimaryKey = "other"
	if err := s.CreateEndpoint(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second iris-ep: got %v, want ErrConflict", err)
	}
	if got, err := s.GetEndpoint(ctx, "iris-ep"); err != nil || got.PrimaryKey != "sealed-primary-iris-ep" {
		t.Errorf("after the conflict: %+v, %v; want the first one kept", got, err)
	}
}

func testEndpointNotFound(t *testing.T, s store.Endpoints) {
	ctx := context.Background()
	if _, err := s.GetEndpoint(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetEndpoint(nope) = %v, want ErrNotFound", err)
	}
	if err := s.UpdateEndpoint(ctx, testEndpoint("nope")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateEndpoint(nope) = %v, want ErrNotFound", err)
	}
	if err := s.DeleteEndpoint(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteEndpoint(nope) = %v, want ErrNotFound", err)
	}
}

// An update replaces spec, state, keys and updated time, and keeps the
// created time whatever the record says.
func testEndpointUpdate(t *testing.T, s store.Endpoints) {
	ctx := context.Background()
	if err := s.CreateEndpoint(ctx, testEndpoint("iris-ep")); err != nil {
		t.Fatal(err)
	}
	upd := testEndpoint("iris-ep")
	upd.Spec = json.RawMessage(`{"name": "iris-ep", "description": "new"}`)
	upd.State, upd.PrimaryKey, upd.SecondaryKey = "Updating", "p2", "s2"
	upd.Created, upd.Updated = t0.Add(time.Hour), t0.Add(time.Minute)
	if err := s.UpdateEndpoint(ctx, upd); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetEndpoint(ctx, "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	want := upd
	want.Created = t0
	if d := diff(want, got); d != "" {
		t.Errorf("after UpdateEndpoint (-want +got):\n%s", d)
	}
}

func testEndpointListDelete(t *testing.T, s store.Endpoints) {
	ctx := context.Background()
	if got, err := s.ListEndpoints(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListEndpoints on an empty store = %v, %v; want none", got, err)
	}
	for _, n := range []string{"zeta", "alpha", "mid"} {
		if err := s.CreateEndpoint(ctx, testEndpoint(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteEndpoint(ctx, "mid"); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListEndpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, e.Name)
	}
	if d := diff([]string{"alpha", "zeta"}, names); d != "" {
		t.Errorf("ListEndpoints after deleting mid (-want +got):\n%s", d)
	}
	if _, err := s.GetEndpoint(ctx, "mid"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetEndpoint(mid) after delete = %v, want ErrNotFound", err)
	}
	// The name is free again.
	if err := s.CreateEndpoint(ctx, testEndpoint("mid")); err != nil {
		t.Errorf("re-create mid after delete: %v", err)
	}
}
