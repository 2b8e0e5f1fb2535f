package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// showSweep prints a sweep job's objective, its best trial and its trials
// ranked by the objective.
func showSweep(w *tabwriter.Writer, j *workspace.Job) {
	sw := j.Sweep
	if j.Spec != nil && j.Spec.Trial != nil {
		fmt.Fprintf(w, "trial command:\t%s\n", strings.TrimSpace(j.Spec.Trial.Command))
	}
	fmt.Fprintf(w, "objective:\t%s %s\n", sw.Goal, sw.PrimaryMetric)
	fmt.Fprintf(w, "sampling:\t%s\n", sw.Sampling)
	fmt.Fprintf(w, "trials:\t%d of %d (%d at once)\n", len(sw.Trials), sw.MaxTotalTrials, sw.MaxConcurrentTrials)
	if sw.Best != "" {
		for _, t := range sw.Trials {
			if t.Name == sw.Best {
				fmt.Fprintf(w, "best trial:\t%s (%s = %g; %s)\n", t.Name, sw.PrimaryMetric, *t.Objective, paramsLine(t.Params))
			}
		}
	} else {
		fmt.Fprintf(w, "best trial:\tnone yet (no trial has logged %s)\n", sw.PrimaryMetric)
	}
	if len(sw.Trials) == 0 {
		return
	}
	fmt.Fprintf(w, "  RANK\tTRIAL\tSTATUS\t%s\tPARAMETERS\n", strings.ToUpper(sw.PrimaryMetric))
	for _, t := range sw.Trials {
		rank, obj := "-", "-"
		if t.Objective != nil {
			rank, obj = fmt.Sprint(t.Rank), fmt.Sprintf("%g", *t.Objective)
		}
		status := t.Status
		if t.Status == workspace.StatusCanceled && strings.Contains(t.StatusReason, "early termination") {
			status += " (early termination)"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", rank, t.Name, status, obj, paramsLine(t.Params))
	}
}

func paramsLine(p map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, k+"="+spec.FormatParam(p[k]))
	}
	return strings.Join(parts, " ")
}
