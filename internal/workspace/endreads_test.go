package workspace

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

// countingStore counts the reads of one job record (GetJob) made through it.
type countingStore struct {
	store.Store
	gets atomic.Int64
}

func (c *countingStore) GetJob(ctx context.Context, name string) (store.Job, error) {
	c.gets.Add(1)
	return c.Store.GetJob(ctx, name)
}

// The final report of a job that declares no output to register as a
// data asset is one transaction: the registration's read of the record
// after it is skipped, as nothing is owed (bench/dispatch).
func TestFinalReportOwingNoRegistrationReadsNoRecord(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1}
	s, _ := newService(t, target)
	cs := &countingStore{Store: s.st}
	s.st = cs
	submit(t, s, "plain")
	dispatch(t, s)
	zero := 0
	before := cs.gets.Load()
	if err := s.ReportStatus(ctx, runPrincipal("plain", 1), "plain", 1, Report{Status: StatusCompleted, Reason: "exit code 0", ExitCode: &zero, Running: "command started"}); err != nil {
		t.Fatal(err)
	}
	if n := cs.gets.Load() - before; n != 0 {
		t.Errorf("the final report read the job's record %d times; want 0 (nothing is owed)", n)
	}
	if j := status(t, s, "plain"); j.Status != StatusCompleted {
		t.Fatalf("status %s, want Completed", j.Status)
	}
}
