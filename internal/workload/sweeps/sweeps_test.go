package sweeps

import (
	"log/slog"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"

	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/sweep"
)

// newHarness is a workspace of four slots with the sweep loop
// registered.
func newHarness(t *testing.T) *workloadtest.Harness {
	t.Helper()
	h := workloadtest.New(t, 4)
	Register(h.WS, New(h.WS, h.Store, slog.New(slog.DiscardHandler)))
	return h
}

func sweepPass(t *testing.T, h *workloadtest.Harness) {
	t.Helper()
	h.Pass(t, "sweeps")
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
	h := newHarness(t)
	ctx := context.Background()
	v := h.Submit(t, gridSweep)
	if v.Status != apitypes.StatusRunning || v.Compute != "" {
		t.Fatalf("sweep submitted as %s on %q; want Running on no compute", v.Status, v.Compute)
	}
	sweepPass(t, h)
	for _, n := range []string{"sw_0", "sw_1"} {
		if j := h.Job(t, n); j.Status != apitypes.StatusQueued || !strings.HasPrefix(j.Spec.Command, "echo ") {
			t.Fatalf("trial %s: %s %q", n, j.Status, j.Spec.Command)
		}
	}
	// Trial 0 ends; the next pass would store trial 2 and create its
	// job. Store it as that pass would, then "crash" before the job.
	if _, err := h.WS.CancelJob(ctx, workloadtest.Owner, "sw_0"); err != nil {
		t.Fatal(err)
	}
	p, err := json.Marshal(sweep.Params{"x": 30.0})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.AddSweepTrial(ctx, store.SweepTrial{Sweep: "sw", Index: 2, Job: "sw_2", Params: p}); err != nil {
		t.Fatal(err)
	}
	sweepPass(t, h)
	sweepPass(t, h)
	if j := h.Job(t, "sw_2"); j.Spec.Command != "echo 30" || j.Status != apitypes.StatusQueued {
		t.Fatalf("trial 2: %s %q; want Queued, echo 30", j.Status, j.Spec.Command)
	}
	rows, err := h.Store.ListSweepTrials(ctx, "sw")
	if err != nil || len(rows) != 3 {
		t.Fatalf("trials %v, %v; want the 3 combinations", rows, err)
	}
	jobs, err := h.WS.ListJobs(ctx, store.JobFilter{})
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
	h := newHarness(t)
	ctx := context.Background()
	h.Submit(t, gridSweep)
	sweepPass(t, h)
	h.Clock.Advance(61 * time.Second)
	sweepPass(t, h)
	if err := h.WS.RunPass(ctx, "lease check"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sw_0", "sw_1"} {
		if j := h.Job(t, n); j.Status != apitypes.StatusCanceled || !strings.Contains(j.StatusReason, "limits.timeout of 60s reached") {
			t.Fatalf("trial %s: %s (%s)", n, j.Status, j.StatusReason)
		}
	}
	sweepPass(t, h)
	j := h.Job(t, "sw")
	if j.Status != apitypes.StatusCanceled || !strings.Contains(j.StatusReason, "limits.timeout of 60s reached; 2 trials (2 canceled)") {
		t.Fatalf("sweep: %s (%s)", j.Status, j.StatusReason)
	}
	if open, _ := h.Store.ListOpenSweeps(ctx); len(open) != 0 {
		t.Fatalf("open sweeps after the end: %v", open)
	}
}

// A job of the user's that has a trial's name is not taken for the
// trial: the sweep fails, saying so.
func TestSweepTrialNameTakenFailsTheSweep(t *testing.T) {
	h := newHarness(t)
	h.Submit(t, "name: sw_1\ncommand: \"true\"\n")
	h.Submit(t, gridSweep)
	sweepPass(t, h)
	j := h.Job(t, "sw")
	if j.Status != apitypes.StatusFailed || !strings.Contains(j.StatusReason, "would be job sw_1, but a job of that name exists already") {
		t.Fatalf("sweep: %s (%s)", j.Status, j.StatusReason)
	}
	if tr := h.Job(t, "sw_0"); tr.Status != apitypes.StatusCanceled || !strings.Contains(tr.StatusReason, "sweep sw failed") {
		t.Fatalf("trial 0: %s (%s); want Canceled by the failed sweep", tr.Status, tr.StatusReason)
	}
	if own := h.Job(t, "sw_1"); own.Spec.Command != "true" || own.Status != apitypes.StatusQueued {
		t.Fatalf("the user's job sw_1 changed: %s %q", own.Status, own.Spec.Command)
	}
}
