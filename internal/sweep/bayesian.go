package sweep

import (
	"math"
	"slices"
)

// Bayesian sampling is a Tree-structured Parzen Estimator (TPE, Bergstra
// et al. 2011) on the unit cube, written with the standard library alone:
//
//   - the first startupTrials trials (and any while fewer trials have ended
//     with a value) are random;
//   - after that, the trials that ended are split into the best quarter
//     ("good") and the rest ("bad"); each side is a density over the
//     cube: per parameter a mixture of Gaussians centred on its trials'
//     quantiles plus a uniform prior (choice: counts plus one);
//   - candidates random points are drawn, and the one where good/bad is
//     highest becomes the trial.
//
// Every draw comes from the sweep's seed and the trial's index, and the
// history is what was stored when the trial was made, so the choice is the
// same whenever it is made again.
const (
	startupTrials = 5
	candidates    = 64
	goodFraction  = 0.25
)

func (s *Sampler) bayesian(index int, history []Observation) Params {
	r := s.rng(index, 0)
	if index < startupTrials || len(history) < 2 {
		return s.fromUnit(s.uniform(r))
	}
	obs := slices.Clone(history)
	slices.SortStableFunc(obs, func(a, b Observation) int {
		if s.goal == "maximize" {
			a, b = b, a
		}
		switch {
		case a.Value < b.Value:
			return -1
		case a.Value > b.Value:
			return 1
		}
		return 0
	})
	nGood := max(1, int(math.Ceil(goodFraction*float64(len(obs)))))
	good, bad := obs[:nGood], obs[nGood:]
	best, bestScore := []float64(nil), math.Inf(-1)
	for range candidates {
		u := s.uniform(r)
		score := 0.0
		for d, name := range s.names {
			score += math.Log(s.density(name, u[d], good)) - math.Log(s.density(name, u[d], bad))
		}
		if score > bestScore {
			best, bestScore = u, score
		}
	}
	return s.fromUnit(best)
}

// density is the Parzen estimate at quantile u of parameter name from the
// trials obs, with a uniform prior weighing as one trial.
func (s *Sampler) density(name string, u float64, obs []Observation) float64 {
	sp := s.space[name]
	n := float64(len(obs))
	if sp.Type == "choice" {
		k := len(sp.Values)
		c := min(int(u*float64(k)), k-1)
		count := 0.0
		for _, o := range obs {
			if o.Params[name] == canonicalValue(sp.Values[c]) {
				count++
			}
		}
		return (count + 1) / (n + float64(k)) * float64(k)
	}
	// Scott's rule for the bandwidth, kept from collapsing on few trials.
	h := math.Max(0.1, math.Pow(n+1, -0.2))
	sum := 1.0 // the prior: the uniform density on [0, 1]
	for _, o := range obs {
		z := (u - unit(sp, o.Params[name])) / h
		sum += math.Exp(-z*z/2) / (h * math.Sqrt(2*math.Pi))
	}
	return sum / (n + 1)
}
