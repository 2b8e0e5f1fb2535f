package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/google/go-cmp/cmp"
)

func testEnvironment(name, version string) store.Environment {
	return store.Environment{
		Name: name, Version: version, Description: "for " + name,
		Spec:    json.RawMessage(`{"kind": "image", "image": "ferry-base:bookworm"}`),
		Hash:    "3f" + name + version,
		Created: t0,
	}
}

func testEnvironmentCreateGet(t *testing.T, s store.Assets) {
	ctx := context.Background()
	want := testEnvironment("torch", "1")
	if err := s.CreateEnvironment(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetEnvironment(ctx, "torch", "1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Errorf("GetEnvironment (-want +got):\n%s", d)
	}
}

func testEnvironmentConflict(t *testing.T, s store.Assets) {
	ctx := context.Background()
	if err := s.CreateEnvironment(ctx, testEnvironment("torch", "1")); err != nil {
		t.Fatal(err)
	}
	other := testEnvironment("torch", "1")
	other.Description = "changed"
	if err := s.CreateEnvironment(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second torch:1: got %v, want ErrConflict", err)
	}
	got, err := s.GetEnvironment(ctx, "torch", "1")
	if err != nil || got.Description != "for torch" {
		t.Errorf("after the refused create: %+v, %v; want the first one unchanged", got, err)
	}
}

func testEnvironmentNotFound(t *testing.T, s store.Assets) {
	ctx := context.Background()
	if err := s.CreateEnvironment(ctx, testEnvironment("torch", "1")); err != nil {
		t.Fatal(err)
	}
	for _, v := range [][2]string{{"torch", "2"}, {"tf", "1"}} {
		if _, err := s.GetEnvironment(ctx, v[0], v[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetEnvironment(%s, %s): got %v, want ErrNotFound", v[0], v[1], err)
		}
	}
	got, err := s.ListEnvironments(ctx, "tf")
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListEnvironments(tf) = %v, %v; want an empty, non-nil list", got, err)
	}
}

// testEnvironmentListOrder registers versions out of their lexical order:
// the list keeps registration order within a name, so "latest" is the last.
func testEnvironmentListOrder(t *testing.T, s store.Assets) {
	ctx := context.Background()
	for _, e := range []store.Environment{
		testEnvironment("torch", "10"), testEnvironment("sklearn", "1"),
		testEnvironment("torch", "9"), testEnvironment("torch", "11"),
	} {
		if err := s.CreateEnvironment(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	versions := func(es []store.Environment) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Name+":"+e.Version)
		}
		return out
	}
	all, err := s.ListEnvironments(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"sklearn:1", "torch:10", "torch:9", "torch:11"}, versions(all)); d != "" {
		t.Errorf("ListEnvironments() (-want +got):\n%s", d)
	}
	torch, err := s.ListEnvironments(ctx, "torch")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"torch:10", "torch:9", "torch:11"}, versions(torch)); d != "" {
		t.Errorf("ListEnvironments(torch) (-want +got):\n%s", d)
	}
}
