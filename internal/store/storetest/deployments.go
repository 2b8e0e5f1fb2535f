package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

func testDeployment(endpoint, name string) store.Deployment {
	return store.Deployment{
		Endpoint: endpoint,
		Name:     name,
		Spec:     json.RawMessage(`{"name": "` + name + `", "instance_count": 2}`),
		State:    "Creating",
		Replicas: json.RawMessage(`{"next": 3, "replicas": [{"job": "j1"}]}`),
		Created:  t0,
		Updated:  t0,
	}
}

// testDeploymentLifecycle: create, get, conflict, update, list per
// endpoint and in all, delete; and the errors of a missing one.
func testDeploymentLifecycle(t *testing.T, s store.Endpoints) {
	ctx := context.Background()
	blue := testDeployment("ep-one", "blue")
	for _, d := range []store.Deployment{blue, testDeployment("ep-one", "green"), testDeployment("ep-two", "blue")} {
		if err := s.CreateDeployment(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	again := testDeployment("ep-one", "blue")
	again.State = "Succeeded"
	if err := s.CreateDeployment(ctx, again); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second ep-one/blue: got %v, want ErrConflict", err)
	}
	got, err := s.GetDeployment(ctx, "ep-one", "blue")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(blue, got); d != "" {
		t.Errorf("GetDeployment (-want +got):\n%s", d)
	}

	changed := blue
	changed.State, changed.Reason = "Failed", "init() raised"
	changed.Spec = json.RawMessage(`{"name": "blue", "instance_count": 3}`)
	changed.Replicas = json.RawMessage(`{"next": 4, "replicas": []}`)
	changed.Updated = t0.Add(time.Hour)
	changed.Created = t0.Add(2 * time.Hour) // not stored: created stays
	if err := s.UpdateDeployment(ctx, changed); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetDeployment(ctx, "ep-one", "blue")
	if err != nil {
		t.Fatal(err)
	}
	changed.Created = t0
	if d := diff(changed, got); d != "" {
		t.Errorf("after UpdateDeployment (-want +got):\n%s", d)
	}

	names := func(ds []store.Deployment) (out []string) {
		for _, d := range ds {
			out = append(out, d.Endpoint+"/"+d.Name)
		}
		return out
	}
	one, err := s.ListDeployments(ctx, "ep-one")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]string{"ep-one/blue", "ep-one/green"}, names(one)); d != "" {
		t.Errorf("ListDeployments(ep-one) (-want +got):\n%s", d)
	}
	all, err := s.ListDeployments(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]string{"ep-one/blue", "ep-one/green", "ep-two/blue"}, names(all)); d != "" {
		t.Errorf("ListDeployments() (-want +got):\n%s", d)
	}

	if err := s.DeleteDeployment(ctx, "ep-one", "blue"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDeployment(ctx, "ep-one", "blue"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetDeployment after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteDeployment(ctx, "ep-one", "blue"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteDeployment: %v, want ErrNotFound", err)
	}
	if err := s.UpdateDeployment(ctx, testDeployment("ep-one", "nope")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateDeployment(nope): %v, want ErrNotFound", err)
	}
	if got, err := s.GetDeployment(ctx, "ep-two", "blue"); err != nil || got.Name != "blue" {
		t.Errorf("ep-two/blue after ep-one/blue was deleted: %+v, %v", got, err)
	}
}
