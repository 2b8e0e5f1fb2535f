package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// Query texts built from a client's filter prepare at most maxLazyStmts
// statements; past the bound they still run, unprepared, and answer the same.
func TestLazyStatementsAreBounded(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if _, err := s.CreateJob(ctx, store.Job{Name: "j1", Status: "Queued"}, store.Event{To: "Queued"}); err != nil {
		t.Fatal(err)
	}
	statuses := []string{"Queued"}
	for i := 0; i < maxLazyStmts+20; i++ {
		// One more status each time: a new query text (one more placeholder).
		statuses = append(statuses, fmt.Sprintf("Other%d", i))
		js, err := s.ListJobs(ctx, store.JobFilter{Statuses: statuses})
		if err != nil {
			t.Fatalf("ListJobs with %d statuses: %v", len(statuses), err)
		}
		if len(js) != 1 || js[0].Name != "j1" {
			t.Fatalf("ListJobs with %d statuses = %v, want j1 alone", len(statuses), js)
		}
	}
	s.stmts.mu.Lock()
	lazy := s.stmts.lazy
	s.stmts.mu.Unlock()
	if lazy > maxLazyStmts {
		t.Errorf("%d statements prepared on first use, want at most %d", lazy, maxLazyStmts)
	}
	if lazy < maxLazyStmts {
		t.Errorf("%d statements prepared on first use, want the bound %d reached (were they prepared at all?)", lazy, maxLazyStmts)
	}
}

// openStore opens a store on a fresh file, closed when the test ends.
func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "ferry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A submit's insert runs the statement prepared at open, not one parsed
// per call: with that statement swapped for one that writes the display
// name differently, the job gets the other display name.
func TestJobInsertIsPrepared(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	k := stmtKey{s.w, qInsertJob}
	s.stmts.mu.Lock()
	prepared := s.stmts.m[k]
	s.stmts.mu.Unlock()
	if prepared == nil {
		t.Fatal("the job insert is not prepared at open")
	}
	prepared.Close()
	other, err := s.w.PrepareContext(ctx, strings.Replace(qInsertJob, "VALUES (?, ?", "VALUES (?, ? || '-prepared'", 1))
	if err != nil {
		t.Fatal(err)
	}
	s.stmts.mu.Lock()
	s.stmts.m[k] = other
	s.stmts.mu.Unlock()
	if _, err := s.CreateJob(ctx, store.Job{Name: "j", DisplayName: "d", Status: "Queued"}, store.Event{To: "Queued"}); err != nil {
		t.Fatal(err)
	}
	j, err := s.GetJob(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if j.DisplayName != "d-prepared" {
		t.Errorf("display name %q: the job was not inserted by the prepared statement", j.DisplayName)
	}
}

// A job's update sets only the columns that change (SQLite rewrites the
// entries of every index with a column in the SET list), and the
// statement is prepared once the write is over, for the next one.
func TestJobUpdateSetsOnlyWhatChanges(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	for _, n := range []string{"a", "b"} {
		if _, err := s.CreateJob(ctx, store.Job{Name: n, Compute: "local", ExperimentName: "e", Status: "Queued"}, store.Event{To: "Queued"}); err != nil {
			t.Fatal(err)
		}
	}
	ended := time.Now()
	const q = "UPDATE jobs SET status = ?, ended = ? WHERE seq = ?"
	for _, n := range []string{"a", "b"} {
		if _, err := s.UpdateJob(ctx, n, func(j *store.Job) (*store.Event, error) {
			j.Status, j.Ended = "Completed", ended
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		if s.stmts.get(s.w, q) == nil {
			t.Errorf("after %s's update, %q is not prepared", n, q)
		}
		j, err := s.GetJob(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != "Completed" || !j.Ended.Equal(ended.Truncate(time.Microsecond)) || j.Compute != "local" || j.ExperimentName != "e" {
			t.Errorf("%s after the update: %+v", n, j)
		}
	}
}
