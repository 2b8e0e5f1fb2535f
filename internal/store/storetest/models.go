package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/store"
)

func testModel(name, version string) store.Model {
	return store.Model{
		Name: name, Version: version, Type: "mlflow_model", Description: "for " + name,
		Spec:     json.RawMessage("{\"tags\": {\"a\": \"b\"},\n \"properties\": {\"acc\": \"0.90\"}}"),
		Snapshot: "5e" + name + version,
		Hash:     "3f" + name + version,
		Created:  t0,
	}
}

func testModelCreateGet(t *testing.T, s store.Assets) {
	ctx := context.Background()
	want := testModel("iris", "1")
	if err := s.CreateModel(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetModel(ctx, "iris", "1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("GetModel (-want +got):\n%s", d)
	}
	// A model stored archived reads back archived, and a nil spec as nil.
	arch := testModel("iris", "2")
	arch.Archived, arch.Spec = true, nil
	if err := s.CreateModel(ctx, arch); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetModel(ctx, "iris", "2")
	if err != nil || !got.Archived || got.Spec != nil {
		t.Errorf("GetModel(iris, 2) = %+v, %v; want it archived with a nil spec", got, err)
	}
}

func testModelConflict(t *testing.T, s store.Assets) {
	ctx := context.Background()
	if err := s.CreateModel(ctx, testModel("iris", "1")); err != nil {
		t.Fatal(err)
	}
	other := testModel("iris", "1")
	other.Snapshot, other.Hash = "other", "other"
	if err := s.CreateModel(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second iris:1: got %v, want ErrConflict", err)
	}
	got, err := s.GetModel(ctx, "iris", "1")
	if err != nil || got.Snapshot != "5eiris1" {
		t.Errorf("after the refused create: %+v, %v; want the first one unchanged", got, err)
	}
	// The same version of another model is another model.
	if err := s.CreateModel(ctx, testModel("wine", "1")); err != nil {
		t.Errorf("wine:1 beside iris:1: %v", err)
	}
}

func testModelNotFound(t *testing.T, s store.Assets) {
	ctx := context.Background()
	if err := s.CreateModel(ctx, testModel("iris", "1")); err != nil {
		t.Fatal(err)
	}
	for _, v := range [][2]string{{"iris", "2"}, {"wine", "1"}} {
		if _, err := s.GetModel(ctx, v[0], v[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetModel(%s, %s): got %v, want ErrNotFound", v[0], v[1], err)
		}
		if _, err := s.SetModelArchived(ctx, v[0], v[1], true); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("SetModelArchived(%s, %s): got %v, want ErrNotFound", v[0], v[1], err)
		}
	}
	got, err := s.ListModels(ctx, "wine")
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListModels(wine) = %v, %v; want an empty, non-nil list", got, err)
	}
}

func modelVersions(ms []store.Model) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name+":"+m.Version)
	}
	return out
}

// testModelListOrder registers versions out of their lexical order: the
// list keeps registration order within a name.
func testModelListOrder(t *testing.T, s store.Assets) {
	ctx := context.Background()
	for _, m := range []store.Model{
		testModel("iris", "10"), testModel("alpha", "1"),
		testModel("iris", "9"), testModel("iris", "11"),
	} {
		if err := s.CreateModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.ListModels(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"alpha:1", "iris:10", "iris:9", "iris:11"}, modelVersions(all)); d != "" {
		t.Errorf("ListModels() (-want +got):\n%s", d)
	}
	iris, err := s.ListModels(ctx, "iris")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"iris:10", "iris:9", "iris:11"}, modelVersions(iris)); d != "" {
		t.Errorf("ListModels(iris) (-want +got):\n%s", d)
	}
}

// testModelArchive archives and restores a version: only that version
// changes, it stays listed (hiding is the workspace's choice), and doing
// it twice is not an error.
func testModelArchive(t *testing.T, s store.Assets) {
	ctx := context.Background()
	for _, v := range []string{"1", "2"} {
		if err := s.CreateModel(ctx, testModel("iris", v)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		got, err := s.SetModelArchived(ctx, "iris", "2", true)
		if err != nil || !got.Archived || got.Snapshot != "5eiris2" {
			t.Fatalf("SetModelArchived(iris, 2, true) = %+v, %v", got, err)
		}
	}
	all, err := s.ListModels(ctx, "iris")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Archived || !all[1].Archived {
		t.Errorf("after archiving iris:2: %+v; want 1 not archived, 2 archived, both listed", all)
	}
	got, err := s.SetModelArchived(ctx, "iris", "2", false)
	if err != nil || got.Archived {
		t.Errorf("restore: %+v, %v", got, err)
	}
	want := testModel("iris", "2")
	if d := diff(want, got); d != "" {
		t.Errorf("restored iris:2 (-want +got):\n%s", d)
	}
}
