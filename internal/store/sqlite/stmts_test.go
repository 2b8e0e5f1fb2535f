package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

// Query texts built from a client's filter prepare at most maxLazyStmts
// statements; past the bound they still run, unprepared, and answer the same.
func TestLazyStatementsAreBounded(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "ferry.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
