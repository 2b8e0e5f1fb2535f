package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

func testComponentCreateGetList(t *testing.T, s store.Assets) {
	ctx := context.Background()
	c := store.Component{Name: "train", Version: "1", Description: "trains", Spec: json.RawMessage(`{"command":"x"}`),
		CodeSnapshot: "ab", Hash: "cd", Created: t0}
	if err := s.CreateComponent(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateComponent(ctx, c); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second CreateComponent: %v, want ErrConflict", err)
	}
	c2 := c
	c2.Version, c2.Spec = "2", nil
	if err := s.CreateComponent(ctx, c2); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetComponent(ctx, "train", "1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(c, got); d != "" {
		t.Errorf("GetComponent (-want +got):\n%s", d)
	}
	if _, err := s.GetComponent(ctx, "train", "3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetComponent of a missing version: %v, want ErrNotFound", err)
	}
	all, err := s.ListComponents(ctx, "train")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Version != "1" || all[1].Version != "2" {
		t.Errorf("ListComponents = %+v", all)
	}
}
