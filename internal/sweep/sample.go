// Package sweep holds the pure decisions of a sweep job: which parameters
// trial i gets (random, grid or bayesian sampling of the search space) and
// which running trials an early termination policy cancels. The workspace
// keeps the state (internal/workspace/sweeps.go) and calls these with a
// snapshot of it; nothing here reads a clock, a store or a random source
// that is not seeded, so a server that restarts makes the same choices.
package sweep

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ferry-ml/ferry/internal/spec"
)

// Params are one trial's parameter values by name: float64 for numbers
// (whole for randint and choice's whole numbers), or the string or bool
// a choice lists, so that they read back unchanged from JSON.
type Params = map[string]any

// Observation is a trial that ended with a value of the objective: its
// parameters and the best value of the primary metric it logged.
type Observation struct {
	Params Params
	Value  float64
}

// Sampler picks trials' parameters for one sweep.
type Sampler struct {
	space map[string]spec.SearchParam
	names []string // sorted: the order of dimensions
	alg   spec.SamplingAlgorithm
	seed  uint64
	goal  string
}

// NewSampler returns the sampler of sweep job j (which must be valid).
// seed is the sweep's seed: sampling_algorithm.seed when the file gives
// one; the workspace picks one at submit otherwise and stores it in the
// spec, so that the same trials come again after a restart.
func NewSampler(j *spec.Job) *Sampler {
	s := &Sampler{space: j.SearchSpace, names: slices.Sorted(maps.Keys(j.SearchSpace)), alg: j.Sampling()}
	if s.alg.Seed != nil {
		s.seed = uint64(*s.alg.Seed)
	}
	if j.Objective != nil {
		s.goal = j.Objective.Goal
	}
	return s
}

// Sample returns the parameters of trial index (from 0). history are the
// trials that ended with a value, which only bayesian sampling reads.
// Grid sampling returns an error past the last combination.
func (s *Sampler) Sample(index int, history []Observation) (Params, error) {
	switch s.alg.Type {
	case "grid":
		return s.grid(index)
	case "bayesian":
		return s.bayesian(index, history), nil
	}
	if s.alg.Rule == "sobol" {
		return s.fromUnit(s.halton(index)), nil
	}
	return s.fromUnit(s.uniform(s.rng(index, 0))), nil
}

// rng is the random stream of trial index; stream tells apart the uses
// one trial makes of randomness.
func (s *Sampler) rng(index int, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.seed, uint64(index)<<8|stream))
}

// uniform draws one point of the unit cube, a coordinate per parameter.
func (s *Sampler) uniform(r *rand.Rand) []float64 {
	u := make([]float64, len(s.names))
	for i := range u {
		u[i] = r.Float64()
	}
	return u
}

// fromUnit maps a point of the unit cube to parameter values, each
// coordinate through its parameter's inverse distribution.
func (s *Sampler) fromUnit(u []float64) Params {
	p := Params{}
	for i, name := range s.names {
		p[name] = value(s.space[name], u[i])
	}
	return p
}

// value is the value of parameter sp at quantile u in [0, 1).
func value(sp spec.SearchParam, u float64) any {
	u = math.Min(math.Max(u, 0), math.Nextafter(1, 0))
	f := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	lo, hi, mu, sigma := f(sp.MinValue), f(sp.MaxValue), f(sp.Mu), f(sp.Sigma)
	normal := func() float64 {
		// Quantiles this close to 0 or 1 are infinite; a trial gets a
		// value six sigmas out at most.
		uu := math.Min(math.Max(u, 1e-9), 1-1e-9)
		return mu + sigma*math.Sqrt2*math.Erfinv(2*uu-1)
	}
	var x float64
	switch sp.Type {
	case "choice":
		return canonicalValue(sp.Values[int(u*float64(len(sp.Values)))])
	case "randint":
		return math.Floor(u * float64(*sp.Upper))
	case "uniform", "quniform":
		x = lo + u*(hi-lo)
	case "loguniform", "qloguniform":
		x = math.Exp(lo + u*(hi-lo))
	case "normal", "qnormal":
		x = normal()
	case "lognormal", "qlognormal":
		x = math.Exp(normal())
	}
	if sp.Q != nil {
		x = math.Round(x / *sp.Q) * *sp.Q
	}
	return x
}

// canonicalValue is a choice value as it reads back from JSON.
func canonicalValue(v any) any {
	switch v := v.(type) {
	case int:
		return float64(v)
	case int64:
		return float64(v)
	}
	return v
}

// unit maps a value of parameter sp back to its quantile, the inverse of
// value, for the parameter types bayesian sampling takes; choice is
// handled apart (its index).
func unit(sp spec.SearchParam, v any) float64 {
	x, _ := v.(float64)
	lo, hi := 0.0, 1.0
	if sp.MinValue != nil && sp.MaxValue != nil {
		lo, hi = *sp.MinValue, *sp.MaxValue
	}
	if sp.Type == "loguniform" || sp.Type == "qloguniform" {
		x = math.Log(math.Max(x, math.SmallestNonzeroFloat64))
	}
	if hi == lo {
		return 0.5
	}
	return math.Min(math.Max((x-lo)/(hi-lo), 0), 1)
}

// grid returns combination index of the choice values: the parameters in
// name order, the last one changing fastest.
func (s *Sampler) grid(index int) (Params, error) {
	if index < 0 || index >= spec.GridSize(s.space) {
		return nil, fmt.Errorf("grid sampling has %d combinations; there is no trial %d", spec.GridSize(s.space), index)
	}
	p := Params{}
	for i := len(s.names) - 1; i >= 0; i-- {
		vals := s.space[s.names[i]].Values
		p[s.names[i]] = canonicalValue(vals[index%len(vals)])
		index /= len(vals)
	}
	return p, nil
}

// primes are the bases of the Halton sequence's dimensions.
var primes = []int{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173, 179, 181, 191, 193, 197, 199, 211, 223, 227, 229, 233, 239, 241, 251, 257, 263, 269, 271, 277, 281, 283, 293, 307, 311, 313, 317, 331, 337, 347, 349, 353, 359, 367, 373, 379, 383, 389, 397, 401, 409, 419, 421, 431, 433, 439, 443, 449, 457, 461, 463, 467, 479, 487, 491, 499, 503, 509, 521, 523, 541}

// halton is point index+1 of the Halton sequence, shifted modulo 1 by a
// random vector of the seed (a Cranley-Patterson rotation): a
// low-discrepancy sequence that covers the cube more evenly than random
// points, which is what rule: sobol asks for.
func (s *Sampler) halton(index int) []float64 {
	shift := s.uniform(rand.New(rand.NewPCG(s.seed, 1<<62)))
	u := make([]float64, len(s.names))
	for d := range u {
		b := primes[d%len(primes)]
		f, r := 1.0, 0.0
		for i := index + 1; i > 0; i /= b {
			f /= float64(b)
			r += f * float64(i%b)
		}
		u[d] = math.Mod(r+shift[d], 1)
	}
	return u
}
