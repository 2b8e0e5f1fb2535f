package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/sweep"
)

func submitSweep(t *testing.T, s *Service, doc string) *apitypes.Job {
	t.Helper()
	j, err := spec.ParseJob([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.SubmitJob(context.Background(), owner, Submission{Spec: j})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sweepPass(t *testing.T, s *Service) {
	t.Helper()
	if err := s.reconcileSweeps(context.Background()); err != nil {
		t.Fatal(err)
	}
}

const gridSweep = `name: sw
type: sweep
trial:
  command: echo ${{search_space.x}}
  environment: {user_managed: true}
sampling_algorithm: grid
search_space:
  x: {type: choice, values: [10, 20, 30]}
objective: {primary_metric: y, goal: maximize}
limits: {max_concurrent_trials: 2, timeout: 60}
`

// A trial stored without its job (the server was killed between the two
// writes) gets its job at the next pass, once, with the stored
// parameters; no trial is added beyond the limits.
func TestSweepTrialStoredWithoutJobIsCreatedOnce(t *testing.T) {
	s, _ := newService(t, &fakeTarget{capacity: 4})
	ctx := context.Background()
	v := submitSweep(t, s, gridSweep)
	if v.Status != apitypes.StatusRunning || v.Compute != "" {
		t.Fatalf("sweep submitted as %s on %q; want Running on no compute", v.Status, v.Compute)
	}
	sweepPass(t, s)
	for _, n := range []string{"sw_0", "sw_1"} {
		if j := status(t, s, n); j.Status != apitypes.StatusQueued || !strings.HasPrefix(j.Spec.Command, "echo ") {
			t.Fatalf("trial %s: %s %q", n, j.Status, j.Spec.Command)
		}
	}
	// Trial 0 ends; the next pass would store trial 2 and create its
	// job. Store it as that pass would, then "crash" before the job.
	if _, err := s.CancelJob(ctx, owner, "sw_0"); err != nil {
		t.Fatal(err)
	}
	p, err := json.Marshal(sweep.Params{"x": 30.0})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.st.AddSweepTrial(ctx, store.SweepTrial{Sweep: "sw", Index: 2, Job: "sw_2", Params: p}); err != nil {
		t.Fatal(err)
	}
	sweepPass(t, s)
	sweepPass(t, s)
	if j := status(t, s, "sw_2"); j.Spec.Command != "echo 30" || j.Status != apitypes.StatusQueued {
		t.Fatalf("trial 2: %s %q; want Queued, echo 30", j.Status, j.Spec.Command)
	}
	rows, err := s.st.ListSweepTrials(ctx, "sw")
	if err != nil || len(rows) != 3 {
		t.Fatalf("trials %v, %v; want the 3 combinations", rows, err)
	}
	jobs, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 4 {
		t.Fatalf("%d jobs; want the sweep and its 3 trials", len(jobs))
	}
}

// The sweep's limits.timeout cancels its trials and then the sweep,
// and a pass renews the sweep's lease, as a runner would.
func TestSweepTimeoutCancelsTrials(t *testing.T) {
	s, clk := newService(t, &fakeTarget{capacity: 4})
	ctx := context.Background()
	submitSweep(t, s, gridSweep)
	sweepPass(t, s)
	clk.advance(61 * time.Second)
	sweepPass(t, s)
	if err := s.expireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sw_0", "sw_1"} {
		if j := status(t, s, n); j.Status != apitypes.StatusCanceled || !strings.Contains(j.StatusReason, "limits.timeout of 60s reached") {
			t.Fatalf("trial %s: %s (%s)", n, j.Status, j.StatusReason)
		}
	}
	sweepPass(t, s)
	j := status(t, s, "sw")
	if j.Status != apitypes.StatusCanceled || !strings.Contains(j.StatusReason, "limits.timeout of 60s reached; 2 trials (2 canceled)") {
		t.Fatalf("sweep: %s (%s)", j.Status, j.StatusReason)
	}
	if open, _ := s.st.ListOpenSweeps(ctx); len(open) != 0 {
		t.Fatalf("open sweeps after the end: %v", open)
	}
}

// A job of the user's that has a trial's name is not taken for the
// trial: the sweep fails, saying so.
func TestSweepTrialNameTakenFailsTheSweep(t *testing.T) {
	s, _ := newService(t, &fakeTarget{capacity: 4})
	submit(t, s, "sw_1")
	submitSweep(t, s, gridSweep)
	sweepPass(t, s)
	j := status(t, s, "sw")
	if j.Status != apitypes.StatusFailed || !strings.Contains(j.StatusReason, "would be job sw_1, but a job of that name exists already") {
		t.Fatalf("sweep: %s (%s)", j.Status, j.StatusReason)
	}
	if tr := status(t, s, "sw_0"); tr.Status != apitypes.StatusCanceled || !strings.Contains(tr.StatusReason, "sweep sw failed") {
		t.Fatalf("trial 0: %s (%s); want Canceled by the failed sweep", tr.Status, tr.StatusReason)
	}
	if own := status(t, s, "sw_1"); own.Spec.Command != "true" || own.Status != apitypes.StatusQueued {
		t.Fatalf("the user's job sw_1 changed: %s %q", own.Status, own.Spec.Command)
	}
}
