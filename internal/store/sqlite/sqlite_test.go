package sqlite_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/store/storetest"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := open(t, filepath.Join(t.TempDir(), "ferry.db"))
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	// The '?' and '#' check that the path is not taken for URI syntax.
	path := filepath.Join(t.TempDir(), "a dir?x=1#frag", "ferry.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)

	s := open(t, path)
	c := store.Compute{Name: "cpu", Type: "amlcompute", Spec: json.RawMessage(`{"a": 1}`), State: "Succeeded", Created: when}
	if err := s.CreateCompute(ctx, c); err != nil {
		t.Fatal(err)
	}
	j, err := s.CreateJob(ctx, store.Job{Name: "j1", Status: "Queued", Created: when}, store.Event{Time: when, To: "Queued"})
	if err != nil {
		t.Fatal(err)
	}
	j, err = s.UpdateJob(ctx, "j1", func(j *store.Job) (*store.Event, error) {
		j.Status = "Running"
		return &store.Event{Time: when, From: "Queued", To: "Running"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := store.Metric{Name: "loss", Value: 0.5, Step: 1, Time: when}
	if err := s.AddMetrics(ctx, "j1", []store.Metric{m}); err != nil {
		t.Fatal(err)
	}
	tok := store.Token{Hash: "h", Kind: "run", Subject: "j1", Attempt: 1, Created: when}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = open(t, path)
	defer s.Close()
	if got, err := s.GetCompute(ctx, "cpu"); err != nil || cmp.Diff(c, got) != "" {
		t.Errorf("GetCompute after reopening = %+v, %v; want %+v", got, err, c)
	}
	if got, err := s.GetJob(ctx, "j1"); err != nil || cmp.Diff(j, got) != "" {
		t.Errorf("GetJob after reopening = %+v, %v; want %+v", got, err, j)
	}
	if es, err := s.ListEvents(ctx, "j1"); err != nil || len(es) != 2 {
		t.Errorf("ListEvents after reopening = %+v, %v; want 2 events", es, err)
	}
	if ms, err := s.ListMetrics(ctx, "j1", ""); err != nil || cmp.Diff([]store.Metric{m}, ms) != "" {
		t.Errorf("ListMetrics after reopening = %+v, %v; want %+v", ms, err, m)
	}
	if got, err := s.TokenByHash(ctx, "h"); err != nil || cmp.Diff(tok, got) != "" {
		t.Errorf("TokenByHash after reopening = %+v, %v; want %+v", got, err, tok)
	}
	// Seq keeps growing across restarts.
	j2, err := s.CreateJob(ctx, store.Job{Name: "j2"}, store.Event{})
	if err != nil {
		t.Fatal(err)
	}
	if j2.Seq <= j.Seq {
		t.Errorf("Seq after reopening = %d, want more than %d", j2.Seq, j.Seq)
	}
}

func TestOpenEmptyPath(t *testing.T) {
	if s, err := sqlite.Open(""); err == nil {
		s.Close()
		t.Error("Open(\"\") succeeded")
	}
}
