package sweeps

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/sweep"
)

// What a sweep shows: its trials ranked by the objective, the best, and
// the summary its status reason carries.

// sweepSummary says how a sweep's trials ended and which is best.
func (sw *Controller) sweepSummary(j *spec.Job, trials []trialState) string {
	counts := map[string]int{}
	for _, t := range trials {
		counts[t.status]++
	}
	var parts []string
	for _, st := range []string{apitypes.StatusCompleted, apitypes.StatusFailed, apitypes.StatusCanceled} {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], strings.ToLower(st)))
		}
	}
	return fmt.Sprintf("%d trials (%s)", len(trials), strings.Join(parts, ", ")) + bestSoFar(j, trials)
}

// bestSoFar names the best trial ("; best trial NAME: METRIC = V"), or
// is "" while no trial has logged the primary metric.
func bestSoFar(j *spec.Job, trials []trialState) string {
	ranked := rankTrials(j, trials)
	if len(ranked) == 0 || ranked[0].Objective == nil {
		return ""
	}
	return fmt.Sprintf("; best trial %s: %s = %.6g", ranked[0].Name, j.Objective.PrimaryMetric, *ranked[0].Objective)
}

func rankTrials(j *spec.Job, trials []trialState) []apitypes.SweepTrialView {
	out := make([]apitypes.SweepTrialView, 0, len(trials))
	for _, t := range trials {
		v := apitypes.SweepTrialView{Name: t.row.Job, Index: t.row.Index, Status: t.status, StatusReason: t.reason, Params: t.params}
		if b, ok := sweep.Best(t.values, j.Objective.Goal); ok {
			v.Objective = &b
		}
		out = append(out, v)
	}
	slices.SortStableFunc(out, func(a, b apitypes.SweepTrialView) int {
		switch {
		case a.Objective != nil && b.Objective == nil:
			return -1
		case a.Objective == nil && b.Objective != nil:
			return 1
		case a.Objective == nil:
			return a.Index - b.Index
		case *a.Objective == *b.Objective:
			return a.Index - b.Index
		case (*a.Objective > *b.Objective) == (j.Objective.Goal == "maximize"):
			return -1
		}
		return 1
	})
	for i := range out {
		if out[i].Objective != nil {
			out[i].Rank = i + 1
		}
	}
	return out
}

// sweepView reads a sweep's trials for its view.
func (sw *Controller) sweepView(ctx context.Context, rec store.Job, j *spec.Job) (*apitypes.SweepView, error) {
	rows, err := sw.st.ListSweepTrials(ctx, rec.Name)
	if err != nil {
		return nil, err
	}
	var trials []trialState
	computeName := ""
	for _, row := range rows {
		t := trialState{row: row, status: apitypes.StatusQueued, reason: "being created"}
		_ = json.Unmarshal(row.Params, &t.params)
		tr, err := sw.st.GetJob(ctx, row.Job)
		if err == nil {
			computeName = firstOf(computeName, tr.Compute)
			t.status, t.reason = tr.Status, tr.StatusReason
			ms, err := sw.st.ListMetrics(ctx, row.Job, j.Objective.PrimaryMetric)
			if err != nil {
				return nil, err
			}
			t.values = finiteValues(ms)
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		trials = append(trials, t)
	}
	total, conc := j.TrialLimits()
	v := &apitypes.SweepView{
		PrimaryMetric: j.Objective.PrimaryMetric, Goal: j.Objective.Goal, Sampling: j.Sampling().Type,
		MaxTotalTrials: total, MaxConcurrentTrials: conc, Trials: rankTrials(j, trials),
		TrialCompute: computeName,
	}
	if len(v.Trials) > 0 && v.Trials[0].Objective != nil {
		v.Best = v.Trials[0].Name
	}
	return v, nil
}
