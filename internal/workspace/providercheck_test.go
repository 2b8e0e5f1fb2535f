package workspace

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/provider"
	dockerprov "github.com/ferry-ml/ferry/internal/provider/docker"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// newCheckedPoolService is newPoolService with the docker provider's
// parse as its CheckProvider, as the server wires a compute of type docker.
func newCheckedPoolService(t *testing.T, st store.Store, dir string, prov *schedProvider, clk *clock) *Service {
	t.Helper()
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Config{
		PoolTypes: testPoolTypes,
		Store:     st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
		Targets:       func(*spec.Compute) (compute.Target, error) { return &fakeTarget{capacity: 1}, nil },
		Providers:     func(*spec.Compute) (provider.Provider, error) { return prov, nil },
		CheckProvider: func(c *spec.Compute) error { _, err := dockerprov.ParseSettings(c.Provider); return err },
		Now:           clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A provider block its provider refuses is refused at create, as invalid
// input naming the key, and nothing is stored.
func TestCreateRefusesABadProviderBlock(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := newCheckedPoolService(t, st, dir, &schedProvider{}, clk)
	one := 1
	_, err := s.CreateCompute(context.Background(), &spec.Compute{Name: "typo", Type: "amlcompute", Size: "Standard_DS1_v2", MaxInstances: &one,
		Provider: map[string]any{"type": "docker", "imgae": "x"}})
	var werr *apperr.Error
	if !errors.As(err, &werr) || werr.Code != apperr.CodeInvalid || !strings.Contains(err.Error(), "provider.imgae: unknown key; did you mean image?") {
		t.Fatalf("create: %v, want invalid input naming provider.imgae", err)
	}
	if _, err := st.GetCompute(context.Background(), "typo"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused compute was stored (get: %v)", err)
	}
}

// A cluster stored with a provider block its provider refuses (by an older
// server that ignored unknown keys) is Failed with the reason when it is
// loaded, launches nothing, and leaves the other clusters working.
func TestStoredBadProviderBlockFailsTheCompute(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	prov := &schedProvider{}
	s := newCheckedPoolService(t, st, dir, prov, clk)
	one := 1
	storeRawCompute(t, s, &spec.Compute{Name: "typo", Type: "amlcompute", Size: "Standard_DS1_v2", MaxInstances: &one,
		Provider: map[string]any{"type": "docker", "imgae": "x"}})
	storeRawJob(t, s, "on-typo", "typo", &spec.Job{Type: "command", Command: "true"})
	mustCreate(t, s, "good", 1)
	submitTo(t, s, "on-good", "good")

	s = newCheckedPoolService(t, st, dir, prov, clk)
	pass(t, s)

	if got := computeState(t, s, "typo"); got != StateFailed {
		t.Errorf("cluster with provider.imgae: state %s, want %s", got, StateFailed)
	}
	events, err := s.Nodes().ComputeEvents(ctx, "typo", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || !strings.Contains(events[len(events)-1].Message, "provider.imgae: unknown key; did you mean image?") {
		t.Errorf("the cluster's events do not name provider.imgae: %+v", events)
	}
	nodes, err := st.ListNodes(ctx, "typo")
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 0 {
		t.Errorf("nodes launched for the failed cluster: %+v", nodes)
	}
	joinAll(t, s)
	pass(t, s)
	if j := status(t, s, "on-good"); j.Status != apitypes.StatusPreparing {
		t.Errorf("job on the good cluster: %s (%s), want Preparing", j.Status, j.StatusReason)
	}
}
