package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/store"
)

func testData(name, version string) store.DataAsset {
	return store.DataAsset{
		Name: name, Version: version, Type: "uri_folder", Description: "for " + name,
		Spec:     json.RawMessage("{\"tags\": {\"a\": \"b\"}}"),
		Snapshot: "5e" + name + version,
		Hash:     "3f" + name + version,
		Created:  t0,
	}
}

func testDataCreateGet(t *testing.T, s store.Assets) {
	ctx := context.Background()
	want := testData("cifar", "1")
	if err := s.CreateData(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetData(ctx, "cifar", "1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("GetData (-want +got):\n%s", d)
	}
	arch := testData("cifar", "2")
	arch.Archived, arch.Spec, arch.Type = true, nil, "uri_file"
	if err := s.CreateData(ctx, arch); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetData(ctx, "cifar", "2")
	if err != nil || !got.Archived || got.Spec != nil || got.Type != "uri_file" {
		t.Errorf("GetData(cifar, 2) = %+v, %v; want it archived, uri_file, with a nil spec", got, err)
	}
	// A model of the same name and version is another thing.
	if _, err := s.GetModel(ctx, "cifar", "1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetModel(cifar, 1) after CreateData: %v, want ErrNotFound", err)
	}
}

func testDataConflictNotFound(t *testing.T, s store.Assets) {
	ctx := context.Background()
	if err := s.CreateData(ctx, testData("cifar", "1")); err != nil {
		t.Fatal(err)
	}
	other := testData("cifar", "1")
	other.Snapshot, other.Hash = "other", "other"
	if err := s.CreateData(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second cifar:1: got %v, want ErrConflict", err)
	}
	if got, err := s.GetData(ctx, "cifar", "1"); err != nil || got.Snapshot != "5ecifar1" {
		t.Errorf("after the refused create: %+v, %v; want the first one unchanged", got, err)
	}
	for _, v := range [][2]string{{"cifar", "2"}, {"mnist", "1"}} {
		if _, err := s.GetData(ctx, v[0], v[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetData(%s, %s): got %v, want ErrNotFound", v[0], v[1], err)
		}
		if _, err := s.SetDataArchived(ctx, v[0], v[1], true); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("SetDataArchived(%s, %s): got %v, want ErrNotFound", v[0], v[1], err)
		}
	}
	got, err := s.ListData(ctx, "mnist")
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListData(mnist) = %v, %v; want an empty, non-nil list", got, err)
	}
}

// testDataListArchive registers versions out of their lexical order (the
// list keeps registration order within a name) and archives and restores
// one: only that version changes and it stays listed.
func testDataListArchive(t *testing.T, s store.Assets) {
	ctx := context.Background()
	for _, d := range []store.DataAsset{testData("cifar", "10"), testData("alpha", "1"), testData("cifar", "9")} {
		if err := s.CreateData(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ds []store.DataAsset) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name+":"+d.Version)
		}
		return out
	}
	all, err := s.ListData(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"alpha:1", "cifar:10", "cifar:9"}, names(all)); d != "" {
		t.Errorf("ListData() (-want +got):\n%s", d)
	}
	for range 2 {
		got, err := s.SetDataArchived(ctx, "cifar", "9", true)
		if err != nil || !got.Archived || got.Snapshot != "5ecifar9" {
			t.Fatalf("SetDataArchived(cifar, 9, true) = %+v, %v", got, err)
		}
	}
	cifar, err := s.ListData(ctx, "cifar")
	if err != nil {
		t.Fatal(err)
	}
	if len(cifar) != 2 || cifar[0].Archived || !cifar[1].Archived {
		t.Errorf("after archiving cifar:9: %+v; want 10 not archived, 9 archived, both listed", cifar)
	}
	got, err := s.SetDataArchived(ctx, "cifar", "9", false)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(testData("cifar", "9"), got); d != "" {
		t.Errorf("restored cifar:9 (-want +got):\n%s", d)
	}
}
