package workspace

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
)

// A cancel, the runner's final report and the server's own end of the
// attempt (a lost lease) hit one running job at the same moment, many
// times over. Whatever the order, the job ends once: one terminal status,
// one terminal transition in its history and nothing after it, and a
// cancel is either taken or refused as too late.
func TestCancelRacingCompletionEndsTheJobOnce(t *testing.T) {
	ctx := context.Background()
	const n = 40
	s, _ := newService(t, &fakeTarget{capacity: n})
	for i := range n {
		submit(t, s, fmt.Sprintf("r%02d", i))
	}
	dispatch(t, s)
	zero := 0
	for i := range n {
		name := fmt.Sprintf("r%02d", i)
		who := runPrincipal(name, 1)
		if err := s.ReportStatus(ctx, who, name, 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var cancelErr, reportErr, lostErr error
		wg.Go(func() { _, cancelErr = s.CancelJob(ctx, owner, name) })
		wg.Go(func() {
			reportErr = s.ReportStatus(ctx, who, name, 1, apitypes.Report{Status: apitypes.StatusCompleted, ExitCode: &zero})
		})
		if i%2 == 0 {
			wg.Go(func() { lostErr = s.finish(ctx, name, 1, apitypes.StatusFailed, "runner lost", nil, "runner lost") })
		}
		wg.Wait()
		if reportErr != nil || lostErr != nil {
			t.Fatalf("%s: report %v, lease end %v", name, reportErr, lostErr)
		}
		if cancelErr != nil && apperr.CodeOf(cancelErr) != apperr.CodeConflict {
			t.Fatalf("%s: cancel neither taken nor refused as too late: %v", name, cancelErr)
		}
		j := status(t, s, name)
		if !apitypes.IsTerminal(j.Status) {
			t.Fatalf("%s is %s after its final report", name, j.Status)
		}
		ends := 0
		for k, e := range j.History {
			if apitypes.IsTerminal(e.From) {
				t.Errorf("%s: transition %d leaves the end state %s: %+v", name, k, e.From, j.History)
			}
			if apitypes.IsTerminal(e.To) {
				ends++
				if e.To != j.Status {
					t.Errorf("%s: history ends in %s, the job says %s", name, e.To, j.Status)
				}
			}
		}
		if ends != 1 {
			t.Errorf("%s: %d terminal transitions, want 1: %+v", name, ends, j.History)
		}
		if j.Status == apitypes.StatusCompleted && (j.ExitCode == nil || *j.ExitCode != 0) {
			t.Errorf("%s: Completed without the runner's exit code: %+v", name, j)
		}
		// A report that comes after the end changes nothing.
		if err := s.ReportStatus(ctx, who, name, 1, apitypes.Report{Status: apitypes.StatusCanceled}); err != nil {
			t.Fatal(err)
		}
		if again := status(t, s, name); again.Status != j.Status || len(again.History) != len(j.History) {
			t.Errorf("%s: a late report changed %s to %s", name, j.Status, again.Status)
		}
	}
}
