package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// showSweep prints a sweep job's objective, its best trial and its trials
// ranked by the objective.
func showSweep(w *tabwriter.Writer, j *apitypes.Job) {
	sw := j.Sweep
	if j.Spec != nil && j.Spec.Trial != nil {
		fmt.Fprintf(w, "trial command:\t%s\n", strings.TrimSpace(j.Spec.Trial.Command))
	}
	if sw.TrialCompute != "" {
		fmt.Fprintf(w, "trials' compute:\t%s\n", sw.TrialCompute)
	}
	fmt.Fprintf(w, "objective:\t%s %s\n", sw.Goal, sw.PrimaryMetric)
	fmt.Fprintf(w, "sampling:\t%s\n", sw.Sampling)
	fmt.Fprintf(w, "trials:\t%d of %d (%d at once)\n", len(sw.Trials), sw.MaxTotalTrials, sw.MaxConcurrentTrials)
	if sw.Best != "" {
		for _, t := range sw.Trials {
			if t.Name == sw.Best {
				fmt.Fprintf(w, "best trial:\t%s (%s = %s; %s)\n", t.Name, sw.PrimaryMetric, short(*t.Objective), paramsLine(t.Params))
			}
		}
	} else {
		fmt.Fprintf(w, "best trial:\tnone yet (no trial has logged %s)\n", sw.PrimaryMetric)
	}
	if len(sw.Trials) == 0 {
		return
	}
	// The table is aligned on its own and written without tabs, so the
	// fields around it keep their own alignment.
	fmt.Fprintf(w, "trials by %s, best first:\n", sw.PrimaryMetric)
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  RANK\tTRIAL\tSTATUS\t%s\tPARAMETERS\n", strings.ToUpper(sw.PrimaryMetric))
	for _, t := range sw.Trials {
		rank, obj := "-", "-"
		if t.Objective != nil {
			rank, obj = fmt.Sprint(t.Rank), short(*t.Objective)
		}
		status := t.Status
		if t.Status == apitypes.StatusCanceled && strings.Contains(t.StatusReason, "early termination") {
			status += " (early termination)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", rank, t.Name, status, obj, paramsLine(t.Params))
	}
	_ = tw.Flush()
	_, _ = w.Write(b.Bytes())
}

func paramsLine(p map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		v := spec.FormatParam(p[k])
		if f, ok := p[k].(float64); ok {
			v = short(f)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

// short writes a number to 6 significant digits.
func short(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

// followSweep prints a sweep's progress, a line per trial that starts or
// ends, until the sweep ends; a sweep has no log of its own.
func (a *app) followSweep(ctx context.Context, c *client.Client, name string) error {
	seen := map[string]string{} // trial -> the status last printed
	wait := 200 * time.Millisecond
	for {
		j, err := c.GetJob(ctx, name)
		if ctx.Err() != nil {
			fmt.Fprintf(a.stderr, "\nstopped following; sweep %s goes on (`%s job stream %s` to follow it again)\n", name, a.self, name)
			return &exitError{code: 130}
		}
		if s := client.StatusOf(err); s >= 400 && s < 500 {
			return err
		}
		if err == nil && j.Sweep != nil {
			trials := slices.Clone(j.Sweep.Trials)
			slices.SortFunc(trials, func(x, y apitypes.SweepTrialView) int { return x.Index - y.Index })
			for _, t := range trials {
				if seen[t.Name] == t.Status {
					continue
				}
				first := seen[t.Name] == ""
				switch {
				case apitypes.IsTerminal(t.Status):
					value := ""
					if t.Objective != nil {
						value = fmt.Sprintf(", %s = %s", j.Sweep.PrimaryMetric, short(*t.Objective))
					}
					if first {
						value += "; " + paramsLine(t.Params)
					}
					fmt.Fprintf(a.stdout, "trial %s: %s%s (%s)\n", t.Name, t.Status, value, t.StatusReason)
				case first:
					fmt.Fprintf(a.stdout, "trial %s: %s (%s)\n", t.Name, t.Status, paramsLine(t.Params))
				case t.Status == apitypes.StatusRunning:
					fmt.Fprintf(a.stdout, "trial %s: Running\n", t.Name)
				}
				seen[t.Name] = t.Status
			}
			if apitypes.IsTerminal(j.Status) {
				return a.finalSummary(j)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, time.Second)
	}
}
