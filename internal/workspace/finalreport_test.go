package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// seenByUser is what a user sees of a job's end: its history (without
// times) and its outputs.
type seenByUser struct {
	Status, Reason string
	History        []apitypes.Event
	Outputs        *apitypes.Outputs
}

func seen(t *testing.T, s *Service, name string) seenByUser {
	t.Helper()
	j := status(t, s, name)
	h := make([]apitypes.Event, len(j.History))
	for i, e := range j.History {
		h[i] = apitypes.Event{From: e.From, To: e.To, Reason: e.Reason}
	}
	return seenByUser{Status: j.Status, Reason: j.StatusReason, History: h, Outputs: j.Outputs}
}

// runToken is the run token the target was given for job's latest launch.
func (f *fakeTarget) runToken(job string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.launched) - 1; i >= 0; i-- {
		if f.launched[i].Job == job {
			return f.launched[i].RunToken
		}
	}
	return ""
}

// A final report that carries the outputs and the Finalizing step leaves
// the job as the separate calls of an older runner do: the same history,
// the same outputs, and the run token gone.
func TestFinalReportWithOutputsMatchesSeparateCalls(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 2}
	s, _ := newService(t, target)
	submit(t, s, "old")
	submit(t, s, "new")
	dispatch(t, s)
	for _, name := range []string{"old", "new"} {
		a, err := s.Assignment(ctx, runPrincipal(name, 1), name, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !a.FinalOutputs {
			t.Fatalf("assignment of %s does not offer FinalOutputs", name)
		}
		if _, err := s.st.TokenByHash(ctx, auth.Hash(target.runToken(name))); err != nil {
			t.Fatalf("run token of %s after its start: %v", name, err)
		}
	}
	out := apitypes.Outputs{Skipped: []apitypes.SkippedOutput{{Output: "outputs", Path: "link", Reason: "a symlink out of the directory"}}}
	zero := 0
	end := apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero}

	old := runPrincipal("old", 1)
	for _, r := range []apitypes.Report{{Status: apitypes.StatusRunning, Reason: "command started"}, {Status: apitypes.StatusFinalizing, Reason: "uploading outputs"}} {
		if err := s.ReportStatus(ctx, old, "old", 1, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetOutputs(ctx, old, "old", 1, out); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportStatus(ctx, old, "old", 1, end); err != nil {
		t.Fatal(err)
	}

	nw := runPrincipal("new", 1)
	if err := s.ReportStatus(ctx, nw, "new", 1, apitypes.Report{Status: apitypes.StatusRunning, Reason: "command started"}); err != nil {
		t.Fatal(err)
	}
	merged := end
	merged.Outputs, merged.Finalizing = &out, "uploading outputs"
	if err := s.ReportStatus(ctx, nw, "new", 1, merged); err != nil {
		t.Fatal(err)
	}

	want := seen(t, s, "old")
	if want.Status != apitypes.StatusCompleted || want.Outputs == nil || len(want.History) != 5 {
		t.Fatalf("the job reported with separate calls: %+v", want)
	}
	if d := cmp.Diff(want, seen(t, s, "new")); d != "" {
		t.Errorf("a final report with outputs and Finalizing (-separate calls +final report):\n%s", d)
	}
	for _, name := range []string{"old", "new"} {
		if _, err := s.st.TokenByHash(ctx, auth.Hash(target.runToken(name))); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("run token of %s after its end: %v, want ErrNotFound", name, err)
		}
	}
	// Resent (its reply was lost), the report changes nothing.
	if err := s.ReportStatus(ctx, nw, "new", 1, merged); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, seen(t, s, "new")); d != "" {
		t.Errorf("after the final report was resent (-want +got):\n%s", d)
	}
}

// Outputs the server refuses, carried by a final report, fail a completed
// attempt as a refused outputs call does, and are not recorded.
func TestFinalReportWithRefusedOutputsFailsTheJob(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "a")
	dispatch(t, s)
	zero := 0
	r := apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero, Outputs: &apitypes.Outputs{Named: map[string]string{"nope": "abc"}}}
	if err := s.ReportStatus(ctx, runPrincipal("a", 1), "a", 1, r); err != nil {
		t.Fatalf("a final report with refused outputs is still taken: %v", err)
	}
	j := status(t, s, "a")
	if j.Status != apitypes.StatusFailed || j.StatusReason != "uploading outputs failed" || !strings.Contains(j.Error, "named.nope") || j.Outputs != nil {
		t.Errorf("job after refused outputs: status %s, reason %q, error %q, outputs %+v", j.Status, j.StatusReason, j.Error, j.Outputs)
	}
}

// A cancel requested while the command ran is not followed by a Finalizing
// step a final report carries, as a late Finalizing report is not.
func TestFinalReportFinalizingAfterCancelRequest(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "a")
	dispatch(t, s)
	who := runPrincipal("a", 1)
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelJob(ctx, owner, "a"); err != nil {
		t.Fatal(err)
	}
	code := 143
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusCanceled, Reason: "canceled on request", ExitCode: &code, Outputs: &apitypes.Outputs{}, Finalizing: "uploading outputs"}); err != nil {
		t.Fatal(err)
	}
	var tos []string
	for _, e := range status(t, s, "a").History {
		tos = append(tos, e.To)
	}
	if got := strings.Join(tos, ","); got != "Queued,Preparing,Running,CancelRequested,Canceled" {
		t.Errorf("history = %s", got)
	}
}

// The final report a runner kept on its target (it gave up on the server)
// is collected with the outputs and Finalizing step it carries.
func TestKeptFinalReportCarriesItsOutputs(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1, kept: map[string][]byte{
		"a/1": []byte(`{"status": "Failed", "reason": "runner gave up on the server", "exit_code": 0,
			"outputs": {"skipped": [{"output": "outputs", "path": "p", "reason": "r"}]}, "finalizing": "uploading outputs"}`),
	}}
	s, clk := newService(t, target)
	submit(t, s, "a")
	dispatch(t, s)
	if err := s.ReportStatus(ctx, runPrincipal("a", 1), "a", 1, apitypes.Report{Status: apitypes.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	clk.advance(11 * time.Second)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	j := status(t, s, "a")
	var tos []string
	for _, e := range j.History {
		tos = append(tos, e.To)
	}
	if got := strings.Join(tos, ","); got != "Queued,Preparing,Running,Finalizing,Failed" {
		t.Errorf("history = %s", got)
	}
	if j.Outputs == nil || len(j.Outputs.Skipped) != 1 || j.Outputs.Skipped[0].Path != "p" {
		t.Errorf("outputs collected from the kept report: %+v", j.Outputs)
	}
}

// Rank 0's final report of a multi-node attempt that other ranks still
// run records its outputs and Finalizing step at once, as its own calls
// would have; another rank's outputs are not recorded.
func TestRankFinalReportOfAMultiNodeAttempt(t *testing.T) {
	// Rank 0's outputs are checked against the record read first; with no
	// outputs its end is fenced in the end's transaction, which finds the
	// ranks and leaves the end to the ranks' bookkeeping all the same.
	for _, rank0 := range []apitypes.Outputs{{Skipped: []apitypes.SkippedOutput{{Output: "outputs", Path: "rank0", Reason: "r"}}}, {}} {
		t.Run(fmt.Sprintf("skipped=%d", len(rank0.Skipped)), func(t *testing.T) { rankFinalReportOfAMultiNodeAttempt(t, rank0) })
	}
}

func rankFinalReportOfAMultiNodeAttempt(t *testing.T, rank0 apitypes.Outputs) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	submit(t, s, "a")
	dispatch(t, s)
	raw, err := json.Marshal(Placement{Ranks: make([]RankPlacement, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.UpdateJob(ctx, "a", func(j *store.Job) (*store.Event, error) {
		j.Placement = raw
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	who := runPrincipal("a", 1)
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusRunning, Reason: "command started"}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero, Outputs: &rank0, Finalizing: "uploading outputs"}); err != nil {
		t.Fatal(err)
	}
	j := status(t, s, "a")
	if j.Status != apitypes.StatusFinalizing || j.Outputs == nil || !cmp.Equal(*j.Outputs, rank0, cmpopts.EquateEmpty()) {
		t.Fatalf("after rank 0's end, with rank 1 running: status %s, outputs %+v; want Finalizing with rank 0's outputs", j.Status, j.Outputs)
	}
	rank1 := apitypes.Outputs{Skipped: []apitypes.SkippedOutput{{Output: "outputs", Path: "rank1", Reason: "r"}}}
	if err := s.ReportStatus(ctx, who, "a", 1, apitypes.Report{Rank: 1, Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero, Outputs: &rank1, Finalizing: "uploading outputs"}); err != nil {
		t.Fatal(err)
	}
	j = status(t, s, "a")
	var tos []string
	for _, e := range j.History {
		tos = append(tos, e.To)
	}
	if got := strings.Join(tos, ","); j.Status != apitypes.StatusCompleted || got != "Queued,Preparing,Running,Finalizing,Completed" {
		t.Errorf("after both ranks ended: status %s, history %s", j.Status, got)
	}
	if j.Outputs == nil || !cmp.Equal(*j.Outputs, rank0, cmpopts.EquateEmpty()) {
		t.Errorf("outputs after rank 1's end: %+v; want rank 0's", j.Outputs)
	}
}

// The assignment a target that carries it gets with the launch is the one
// the runner would have fetched; a target that does not gets none.
func TestHandedAssignmentIsTheFetchedOne(t *testing.T) {
	ctx := context.Background()
	seven := "7"
	for _, carries := range []bool{true, false} {
		target := &fakeTarget{capacity: 1, carries: carries}
		s, _ := newService(t, target)
		if _, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Name: "a", Command: "echo ${{inputs.n}}", Inputs: map[string]spec.Input{"n": {Value: &seven}}}}); err != nil {
			t.Fatal(err)
		}
		dispatch(t, s)
		handed := target.launched[0].Assignment
		if !carries {
			if handed != nil {
				t.Errorf("a target that does not carry the assignment got one: %s", handed)
			}
			continue
		}
		var got apitypes.Assignment
		if err := json.Unmarshal(handed, &got); err != nil {
			t.Fatalf("handed assignment %q: %v", handed, err)
		}
		want, err := s.Assignment(ctx, runPrincipal("a", 1), "a", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(*want, got); d != "" {
			t.Errorf("handed assignment (-fetched +handed):\n%s", d)
		}
	}
}

// A final report that carries the Running step (the command ended before
// its Running report was sent) leaves the job as the separate report
// does, with Running recorded when the command started: the report's
// claim, bounded by the attempt's start and the end.
func TestFinalReportCarriesRunning(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t, &fakeTarget{capacity: 4})
	names := []string{"old", "new", "early", "absurd"}
	for _, name := range names {
		submit(t, s, name)
	}
	dispatch(t, s)
	startedAt := clk.Now()
	a, err := s.Assignment(ctx, runPrincipal("new", 1), "new", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !a.FinalRunning {
		t.Fatal("the assignment does not offer FinalRunning")
	}
	zero := 0
	end := apitypes.Report{Status: apitypes.StatusCompleted, Reason: "exit code 0", ExitCode: &zero, Outputs: &apitypes.Outputs{}, Finalizing: "uploading outputs"}

	clk.advance(10 * time.Millisecond)
	if err := s.ReportStatus(ctx, runPrincipal("old", 1), "old", 1, apitypes.Report{Status: apitypes.StatusRunning, Reason: "command started"}); err != nil {
		t.Fatal(err)
	}
	clk.advance(3 * time.Millisecond)
	endAt := clk.Now()
	if err := s.ReportStatus(ctx, runPrincipal("old", 1), "old", 1, end); err != nil {
		t.Fatal(err)
	}
	claims := map[string]time.Duration{"new": 3 * time.Millisecond, "early": time.Second, "absurd": time.Hour}
	for _, name := range names[1:] {
		r := end
		r.Running, r.RunningForUS = "command started", claims[name].Microseconds()
		if err := s.ReportStatus(ctx, runPrincipal(name, 1), name, 1, r); err != nil {
			t.Fatal(err)
		}
	}
	want := seen(t, s, "old")
	if len(want.History) != 5 || want.History[2].To != apitypes.StatusRunning {
		t.Fatalf("the job reported Running apart: %+v", want)
	}
	wantRunning := map[string]time.Time{
		"new":    endAt.Add(-3 * time.Millisecond), // as the claim says
		"early":  startedAt,                        // not before the attempt started
		"absurd": endAt,                            // a claim over maxRunningFor is none
	}
	for _, name := range names[1:] {
		if d := cmp.Diff(want, seen(t, s, name)); d != "" {
			t.Errorf("%s: a final report carrying Running (-separate report +carried):\n%s", name, d)
		}
		j := status(t, s, name)
		if len(j.History) != 5 || !j.History[2].Time.Equal(wantRunning[name]) || j.Started == nil || !j.Started.Equal(wantRunning[name]) {
			t.Errorf("%s: Running at %v, started %v; want both %v", name, j.History[2].Time, j.Started, wantRunning[name])
		}
	}
}

// A kept final report (the runner gave up on the server) carrying Running
// has the step recorded when it is collected: its claimed age was the
// report's when it was kept.
func TestKeptFinalReportCarriesRunning(t *testing.T) {
	ctx := context.Background()
	target := &fakeTarget{capacity: 1, kept: map[string][]byte{
		"a/1": []byte(`{"status": "Completed", "reason": "exit code 0", "exit_code": 0, "running": "command started", "running_for_us": 2000}`),
	}}
	s, clk := newService(t, target)
	submit(t, s, "a")
	dispatch(t, s)
	clk.advance(11 * time.Second)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	j := status(t, s, "a")
	var tos []string
	for _, e := range j.History {
		tos = append(tos, e.To)
	}
	if got := strings.Join(tos, ","); got != "Queued,Preparing,Running,Completed" {
		t.Fatalf("history = %s", got)
	}
	if !j.History[2].Time.Equal(clk.Now()) {
		t.Errorf("Running at %v, want the collection's time %v", j.History[2].Time, clk.Now())
	}
}
