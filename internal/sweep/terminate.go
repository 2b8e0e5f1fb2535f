package sweep

import (
	"fmt"
	"math"
	"slices"

	"github.com/ferry-ml/ferry/internal/spec"
)

// Trial is what early termination knows of one trial: the values of the
// primary metric it logged, in order (each one is an interval), and
// whether it is still running (only running trials are cut).
type Trial struct {
	Name    string
	Running bool
	Values  []float64
}

// Cut is a running trial a policy cancels, and why, naming the policy.
type Cut struct {
	Trial  string
	Reason string
}

// Best returns the best of values for goal (maximize or minimize), and
// false when there are none.
func Best(values []float64, goal string) (float64, bool) {
	if len(values) == 0 {
		return 0, false
	}
	b := values[0]
	for _, v := range values[1:] {
		if better(v, b, goal) {
			b = v
		}
	}
	return b, true
}

// better reports whether a is strictly better than b for goal.
func better(a, b float64, goal string) bool {
	if goal == "maximize" {
		return a > b
	}
	return a < b
}

// Terminate returns the running trials that policy et cancels now, given
// every trial of the sweep. A trial is judged at its latest evaluation
// point: the number k of values it logged, once k ≥ delay_evaluation
// (and k ≥ 1) and k is a multiple of evaluation_interval (1 when 0).
//
//   - bandit: its value at interval k is worse than the best value any
//     trial logged at interval k by more than the slack (slack_amount, or
//     slack_factor as a ratio: best/(1+f) when maximizing, best·(1+f)
//     when minimizing);
//   - median_stopping: its best value in its first k is worse than the
//     median of the running averages, over their first k values, of the
//     trials that logged k values;
//   - truncation_selection: its value at interval k is among the worst
//     truncation_percentage per cent of the values at interval k of the
//     trials that logged k values.
func Terminate(et *spec.EarlyTermination, goal string, trials []Trial) []Cut {
	if et == nil {
		return nil
	}
	interval := max(et.EvaluationInterval, 1)
	var cuts []Cut
	for _, t := range trials {
		k := len(t.Values)
		if !t.Running || k == 0 || k < et.DelayEvaluation || k%interval != 0 {
			continue
		}
		// The values at interval k, of every trial that got there.
		var at []float64
		for _, o := range trials {
			if len(o.Values) >= k {
				at = append(at, o.Values[k-1])
			}
		}
		v := t.Values[k-1]
		if why := judge(et, goal, t, k, v, at, trials); why != "" {
			cuts = append(cuts, Cut{Trial: t.Name, Reason: why})
		}
	}
	return cuts
}

func judge(et *spec.EarlyTermination, goal string, t Trial, k int, v float64, at []float64, trials []Trial) string {
	switch et.Type {
	case "bandit":
		best, _ := Best(at, goal)
		var limit float64
		var slack string
		switch {
		case et.SlackAmount != nil:
			slack = fmt.Sprintf("slack_amount %g", *et.SlackAmount)
			limit = best - *et.SlackAmount
			if goal != "maximize" {
				limit = best + *et.SlackAmount
			}
		case et.SlackFactor != nil:
			slack = fmt.Sprintf("slack_factor %g", *et.SlackFactor)
			limit = best / (1 + *et.SlackFactor)
			if goal != "maximize" {
				limit = best * (1 + *et.SlackFactor)
			}
		default:
			return ""
		}
		if better(limit, v, goal) {
			return fmt.Sprintf("early termination (bandit policy): at interval %d its value %.6g is outside %s of the best %.6g", k, v, slack, best)
		}
	case "median_stopping":
		var avgs []float64
		for _, o := range trials {
			if len(o.Values) >= k {
				sum := 0.0
				for _, x := range o.Values[:k] {
					sum += x
				}
				avgs = append(avgs, sum/float64(k))
			}
		}
		slices.Sort(avgs)
		median := avgs[len(avgs)/2]
		if len(avgs)%2 == 0 {
			median = (avgs[len(avgs)/2-1] + avgs[len(avgs)/2]) / 2
		}
		best, _ := Best(t.Values[:k], goal)
		if len(avgs) > 1 && better(median, best, goal) {
			return fmt.Sprintf("early termination (median_stopping policy): at interval %d its best value %.6g is worse than the median %.6g of the trials' running averages", k, best, median)
		}
	case "truncation_selection":
		n := int(math.Floor(float64(et.TruncationPercentage) / 100 * float64(len(at))))
		if n == 0 {
			return ""
		}
		sorted := slices.Clone(at)
		slices.SortFunc(sorted, func(a, b float64) int {
			switch {
			case better(a, b, goal):
				return 1
			case better(b, a, goal):
				return -1
			}
			return 0
		})
		// sorted is worst first; v is cut if it is no better than the
		// n-th worst.
		if !better(v, sorted[n-1], goal) {
			return fmt.Sprintf("early termination (truncation_selection policy): at interval %d its value %.6g is among the worst %d%% of %d trials", k, v, et.TruncationPercentage, len(at))
		}
	}
	return ""
}
