package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunDatastores runs the suite of store.Datastores. open is as for Run.
func RunDatastores[S store.Datastores](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.Datastores { return open(t) }, []test[store.Datastores]{
		{"Datastore/Lifecycle", testDatastoreLifecycle},
	})
}

func testDatastoreLifecycle(t *testing.T, s store.Datastores) {
	ctx := context.Background()
	if _, err := s.GetDatastore(ctx, "nfs"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetDatastore before any: %v, want ErrNotFound", err)
	}
	if got, err := s.ListDatastores(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListDatastores before any = %v, %v; want none", got, err)
	}
	nfs := store.Datastore{Name: "nfs", Type: "local_folder", Spec: json.RawMessage(`{"path": "/mnt/a"}`), Created: t0, Updated: t0}
	web := store.Datastore{Name: "aweb", Type: "http", Spec: json.RawMessage(`{"url": "https://x"}`), Created: t0, Updated: t0}
	for _, d := range []store.Datastore{nfs, web} {
		if err := s.PutDatastore(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetDatastore(ctx, "nfs")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(nfs, got); d != "" {
		t.Errorf("GetDatastore (-want +got):\n%s", d)
	}
	// Putting it again replaces type and spec, keeps Created.
	later := t0.Add(time.Hour)
	repl := store.Datastore{Name: "nfs", Type: "http", Spec: json.RawMessage(`{"url": "https://y"}`), Created: later, Updated: later}
	if err := s.PutDatastore(ctx, repl); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetDatastore(ctx, "nfs")
	want := repl
	want.Created = t0
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("GetDatastore after a second put (-want +got):\n%s", d)
	}
	list, err := s.ListDatastores(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "aweb" || list[1].Name != "nfs" {
		t.Fatalf("ListDatastores = %+v, %v; want aweb, nfs", list, err)
	}
	if err := s.DeleteDatastore(ctx, "nfs"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDatastore(ctx, "nfs"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteDatastore: %v, want ErrNotFound", err)
	}
	if _, err := s.GetDatastore(ctx, "nfs"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetDatastore after delete: %v, want ErrNotFound", err)
	}
}
