package sqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/store/storetest"
	"github.com/ferry-ml/ferry/internal/testutil"
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

// TestKilledProcessLosesNoCommit runs a child process that creates jobs and
// reports each one after CreateJob returns, kills it with SIGKILL, and checks
// that every reported job is in the database.
func TestKilledProcessLosesNoCommit(t *testing.T) {
	if path := os.Getenv("FERRY_SQLITE_KILL_CHILD"); path != "" {
		killChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "ferry.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledProcessLosesNoCommit$")
	cmd.Env = append(os.Environ(), "FERRY_SQLITE_KILL_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var reported []string
	lines := bufio.NewScanner(out)
	for len(reported) < 50 && lines.Scan() {
		reported = append(reported, lines.Text())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if len(reported) < 50 {
		t.Fatalf("child reported %d jobs before it ended, want 50", len(reported))
	}

	s := open(t, path)
	defer s.Close()
	for _, name := range reported {
		if _, err := s.GetJob(context.Background(), name); err != nil {
			t.Errorf("job %s, committed before the kill: %v", name, err)
		}
	}
}

// killChild creates jobs until it is killed, printing each name once
// CreateJob has returned.
func killChild(path string) {
	s, err := sqlite.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 0; ; i++ {
		name := fmt.Sprintf("job-%d", i)
		if _, err := s.CreateJob(context.Background(), store.Job{Name: name}, store.Event{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(name)
	}
}

// A write that fails because the disk under the store is full is marked
// store.ErrNoSpace (the API answers 507 and says so, not "internal
// error"), and the store works again once there is room.
func TestFullDiskIsErrNoSpace(t *testing.T) {
	dir := t.TempDir()
	testutil.MountTmpfs(t, dir, "1m")
	s := open(t, filepath.Join(dir, "ferry.db"))
	defer s.Close()
	ctx := context.Background()
	spec := json.RawMessage(`{"command": "` + strings.Repeat("x", 64<<10) + `"}`)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		name := fmt.Sprintf("j%d", i)
		_, err = s.CreateJob(ctx, store.Job{Name: name, Status: "Queued", Spec: spec, Created: time.Now()},
			store.Event{Job: name, Time: time.Now(), To: "Queued"})
	}
	if !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("filling a 1 MiB disk: %v, want store.ErrNoSpace", err)
	}
	if err := testutil.ResizeTmpfs(dir, "64m"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(ctx, store.Job{Name: "after", Status: "Queued", Spec: json.RawMessage(`{}`), Created: time.Now()},
		store.Event{Job: "after", Time: time.Now(), To: "Queued"}); err != nil {
		t.Fatalf("after there was room again: %v", err)
	}
}
