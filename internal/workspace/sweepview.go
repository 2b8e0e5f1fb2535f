package workspace

import (
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
func (s *Service) sweepSummary(j *spec.Job, trials []trialState) string {
	counts := map[string]int{}
	for _, t := range trials {
		counts[t.status]++
	}
	var parts []string
	for _, st := range []string{StatusCompleted, StatusFailed, StatusCanceled} {
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

// SweepView is what `job show` adds for a sweep job: its objective and
// its trials ranked by it.
type SweepView struct {
	PrimaryMetric       string `json:"primary_metric"`
	Goal                string `json:"goal"`
	Sampling            string `json:"sampling_algorithm"`
	MaxTotalTrials      int    `json:"max_total_trials"`
	MaxConcurrentTrials int    `json:"max_concurrent_trials"`
	// TrialCompute is the compute the trials run on ("" before the first).
	TrialCompute string `json:"trial_compute,omitempty"`
	// Best is the name of the trial with the best value of the primary
	// metric, "" while none has logged it.
	Best string `json:"best_trial,omitempty"`
	// Trials are ranked: those with a value best first (the best value
	// each logged), then the others by index.
	Trials []SweepTrialView `json:"trials"`
}

// SweepTrialView is one trial of a sweep.
type SweepTrialView struct {
	Name         string         `json:"name"`
	Index        int            `json:"index"`
	Status       string         `json:"status"`
	StatusReason string         `json:"status_reason,omitempty"`
	Params       map[string]any `json:"params"`
	Objective    *float64       `json:"objective,omitempty"`
	Rank         int            `json:"rank,omitempty"` // 1 for the best; 0 without a value
}

func rankTrials(j *spec.Job, trials []trialState) []SweepTrialView {
	out := make([]SweepTrialView, 0, len(trials))
	for _, t := range trials {
		v := SweepTrialView{Name: t.row.Job, Index: t.row.Index, Status: t.status, StatusReason: t.reason, Params: t.params}
		if b, ok := sweep.Best(t.values, j.Objective.Goal); ok {
			v.Objective = &b
		}
		out = append(out, v)
	}
	slices.SortStableFunc(out, func(a, b SweepTrialView) int {
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
func (s *Service) sweepView(ctx context.Context, rec store.Job, j *spec.Job) (*SweepView, error) {
	rows, err := s.st.ListSweepTrials(ctx, rec.Name)
	if err != nil {
		return nil, err
	}
	var trials []trialState
	computeName := ""
	for _, row := range rows {
		t := trialState{row: row, status: StatusQueued, reason: "being created"}
		_ = json.Unmarshal(row.Params, &t.params)
		tr, err := s.st.GetJob(ctx, row.Job)
		if err == nil {
			computeName = firstOf(computeName, tr.Compute)
			t.status, t.reason = tr.Status, tr.StatusReason
			ms, err := s.st.ListMetrics(ctx, row.Job, j.Objective.PrimaryMetric)
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
	v := &SweepView{
		PrimaryMetric: j.Objective.PrimaryMetric, Goal: j.Objective.Goal, Sampling: j.Sampling().Type,
		MaxTotalTrials: total, MaxConcurrentTrials: conc, Trials: rankTrials(j, trials),
		TrialCompute: computeName,
	}
	if len(v.Trials) > 0 && v.Trials[0].Objective != nil {
		v.Best = v.Trials[0].Name
	}
	return v, nil
}
