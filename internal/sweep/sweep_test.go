package sweep

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/google/go-cmp/cmp"
)

func parse(t testing.TB, doc string) *spec.Job {
	t.Helper()
	j, err := spec.ParseJob([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return j
}

const allTypes = `type: sweep
trial:
  command: echo
  environment: {image: python:3.12}
objective: {primary_metric: loss, goal: minimize}
search_space:
  a: {type: choice, values: [x, 2, true]}
  b: {type: randint, upper: 5}
  c: {type: uniform, min_value: -1, max_value: 2}
  d: {type: loguniform, min_value: -5, max_value: 0}
  e: {type: normal, mu: 10, sigma: 2}
  f: {type: lognormal, mu: 0, sigma: 1}
  g: {type: quniform, min_value: 0, max_value: 100, q: 5}
  h: {type: qloguniform, min_value: 0, max_value: 5, q: 2}
  i: {type: qnormal, mu: 0, sigma: 10, q: 3}
  k: {type: qlognormal, mu: 1, sigma: 1, q: 0.5}
`

// inRange fails unless every value of p lies where its parameter's
// distribution puts it.
func inRange(t *testing.T, j *spec.Job, p Params) {
	t.Helper()
	for name, sp := range j.SearchSpace {
		v, ok := p[name]
		if !ok {
			t.Fatalf("no value for %s in %v", name, p)
		}
		if sp.Type == "choice" {
			found := false
			for _, c := range sp.Values {
				found = found || canonicalValue(c) == v
			}
			if !found {
				t.Errorf("%s = %v, not one of %v", name, v, sp.Values)
			}
			continue
		}
		x, ok := v.(float64)
		if !ok || math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("%s = %v (%T)", name, v, v)
		}
		lo, hi := math.Inf(-1), math.Inf(1)
		switch sp.Type {
		case "randint":
			lo, hi = 0, float64(*sp.Upper-1)
			if x != math.Floor(x) {
				t.Errorf("%s = %v is not whole", name, x)
			}
		case "uniform":
			lo, hi = *sp.MinValue, *sp.MaxValue
		case "loguniform":
			lo, hi = math.Exp(*sp.MinValue), math.Exp(*sp.MaxValue)
		case "lognormal":
			lo = 0
		case "quniform":
			lo, hi = *sp.MinValue-*sp.Q, *sp.MaxValue+*sp.Q
		}
		if sp.Q != nil && math.Abs(math.Remainder(x, *sp.Q)) > 1e-9 {
			t.Errorf("%s = %v is not a multiple of %v", name, x, *sp.Q)
		}
		if x < lo*(1+1e-12)-1e-12 || x > hi*(1+1e-12)+1e-12 {
			t.Errorf("%s = %v outside [%v, %v]", name, x, lo, hi)
		}
	}
}

// Random sampling with a seed gives the same trials every time, each
// value within its distribution; another seed gives others.
func TestRandomSeedReproducible(t *testing.T) {
	for _, rule := range []string{"random", "sobol"} {
		t.Run(rule, func(t *testing.T) {
			doc := func(seed int) string {
				return allTypes + fmt.Sprintf("sampling_algorithm: {type: random, seed: %d, rule: %s}\n", seed, rule)
			}
			j := parse(t, doc(42))
			s1, s2 := NewSampler(j), NewSampler(parse(t, doc(42)))
			other := NewSampler(parse(t, doc(43)))
			same := 0
			for i := range 50 {
				a, err := s1.Sample(i, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := s2.Sample(i, nil)
				if diff := cmp.Diff(a, b); diff != "" {
					t.Fatalf("trial %d differs for one seed:\n%s", i, diff)
				}
				inRange(t, j, a)
				c, _ := other.Sample(i, nil)
				if cmp.Equal(a, c) {
					same++
				}
			}
			if same > 0 {
				t.Errorf("seeds 42 and 43 gave %d equal trials of 50", same)
			}
		})
	}
}

// Grid sampling gives every combination once, then stops.
func TestGridCoversAll(t *testing.T) {
	j := parse(t, `type: sweep
trial: {command: echo, environment: {image: python:3.12}}
objective: {primary_metric: loss, goal: minimize}
sampling_algorithm: grid
search_space:
  lr: {type: choice, values: [0.1, 0.01, 0.001]}
  opt: {type: choice, values: [sgd, adam]}
  layers: {type: choice, values: [1, 2]}
`)
	s := NewSampler(j)
	seen := map[string]bool{}
	for i := range 12 {
		p, err := s.Sample(i, nil)
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprint(p["lr"], p["opt"], p["layers"])
		if seen[k] {
			t.Fatalf("trial %d repeats %s", i, k)
		}
		seen[k] = true
	}
	if _, err := s.Sample(12, nil); err == nil {
		t.Fatal("a 13th combination of 12")
	}
}

// Bayesian sampling is deterministic for one history, and after its
// random start it samples nearer the optimum than random sampling does.
func TestBayesianLearns(t *testing.T) {
	doc := `type: sweep
trial: {command: echo, environment: {image: python:3.12}}
objective: {primary_metric: loss, goal: minimize}
sampling_algorithm: {type: bayesian, seed: 3}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
  y: {type: uniform, min_value: 0, max_value: 1}
  opt: {type: choice, values: [sgd, adam, rmsprop]}
`
	loss := func(p Params) float64 {
		x, y := p["x"].(float64), p["y"].(float64)
		l := (x-0.3)*(x-0.3) + (y-0.7)*(y-0.7)
		if p["opt"] != "adam" {
			l += 0.2
		}
		return l
	}
	run := func(alg string) (late float64, hist []Observation) {
		j := parse(t, strings.Replace(doc, "type: bayesian", "type: "+alg, 1))
		s := NewSampler(j)
		for i := range 40 {
			p, err := s.Sample(i, hist)
			if err != nil {
				t.Fatal(err)
			}
			inRange(t, j, p)
			if i >= 20 {
				late += loss(p) / 20
			}
			hist = append(hist, Observation{Params: p, Value: loss(p)})
		}
		return late, hist
	}
	bayes, hist := run("bayesian")
	random, _ := run("random")
	if bayes >= random/2 {
		t.Fatalf("mean loss of trials 20-39: bayesian %.4f, random %.4f; want bayesian below half of random", bayes, random)
	}
	a, _ := NewSampler(parse(t, doc)).Sample(30, hist[:30])
	b, _ := NewSampler(parse(t, doc)).Sample(30, hist[:30])
	if !cmp.Equal(a, b) {
		t.Fatalf("one history, two choices: %v, %v", a, b)
	}
}

func et(doc string) *spec.EarlyTermination {
	j, err := spec.ParseJob([]byte(`type: sweep
trial: {command: echo, environment: {image: python:3.12}}
objective: {primary_metric: loss, goal: minimize}
search_space: {x: {type: uniform, min_value: 0, max_value: 1}}
early_termination: ` + doc + "\n"))
	if err != nil {
		panic(err)
	}
	return j.EarlyTermination
}

func cutNames(cs []Cut) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Trial)
	}
	return out
}

func TestTerminate(t *testing.T) {
	trials := []Trial{
		{Name: "good", Running: true, Values: []float64{1.0, 0.5, 0.4}},
		{Name: "ok", Running: true, Values: []float64{1.1, 0.55, 0.45}},
		{Name: "bad", Running: true, Values: []float64{5, 4, 3.9}},
		{Name: "bad-ended", Values: []float64{6, 6, 6}},
		{Name: "young", Running: true, Values: []float64{9}},
	}
	for _, c := range []struct {
		policy, goal string
		trials       []Trial
		want         []string
		reason       string
	}{
		{"{type: bandit, slack_factor: 0.2}", "minimize", trials, []string{"bad", "young"}, "bandit policy"},
		{"{type: bandit, slack_amount: 0.1, delay_evaluation: 2}", "minimize", trials, []string{"bad"}, "slack_amount 0.1 of the best 0.4"},
		{"{type: bandit, slack_factor: 0.2, evaluation_interval: 2}", "minimize", trials, nil, ""},
		{"{type: median_stopping}", "minimize", trials, []string{"bad", "young"}, "median_stopping policy"},
		{"{type: truncation_selection, truncation_percentage: 50}", "minimize", trials, []string{"bad", "young"}, "worst 50%"},
		{"{type: bandit, slack_factor: 0.1}", "maximize", []Trial{{Name: "hi", Running: true, Values: []float64{0.9}}, {Name: "lo", Running: true, Values: []float64{0.5}}}, []string{"lo"}, "outside slack_factor 0.1 of the best 0.9"},
	} {
		t.Run(c.policy, func(t *testing.T) {
			cuts := Terminate(et(c.policy), c.goal, c.trials)
			if diff := cmp.Diff(c.want, cutNames(cuts)); diff != "" {
				t.Fatalf("cut (-want +got):\n%s\n%v", diff, cuts)
			}
			if len(cuts) > 0 && !strings.Contains(cuts[0].Reason, c.reason) {
				t.Fatalf("reason %q lacks %q", cuts[0].Reason, c.reason)
			}
		})
	}
}

// FuzzSearchSpace parses a sweep whose search space, sampling and early
// termination come from the fuzzer. Whatever is accepted must sample
// values within each distribution for random, sobol and bayesian, and
// grid must give each combination; whatever is refused must be an
// spec.Errors naming a field.
func FuzzSearchSpace(f *testing.F) {
	f.Add("search_space:\n  a: {type: choice, values: [1, x]}\n  b: {type: qlognormal, mu: 1, sigma: 2, q: 3}\n", "random", 1)
	f.Add("search_space:\n  a: {type: loguniform, min_value: -700, max_value: 700}\n", "bayesian", 2)
	f.Add("search_space:\n  a: {type: choice, values: [[1]]}\n", "grid", 0)
	f.Add("search_space: {a: {type: randint, upper: 1}}\nearly_termination: {type: bandit, slack_amount: 0}\n", "random", 3)
	f.Add("search_space: {a: {type: normal, mu: 1e308, sigma: 1e308}}\n", "random", 3)
	f.Fuzz(func(t *testing.T, tail, alg string, seed int) {
		doc := "type: sweep\ntrial: {command: echo, environment: {image: python:3.12}}\nobjective: {primary_metric: m, goal: maximize}\n" +
			fmt.Sprintf("sampling_algorithm: {type: %q, seed: %d}\n", alg, seed) + tail
		if alg == "grid" {
			doc = strings.Replace(doc, fmt.Sprintf(", seed: %d}", seed), "}", 1)
		}
		j, err := spec.ParseJob([]byte(doc))
		if err != nil {
			var es spec.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not a spec.Errors", err, err)
			}
			return
		}
		if j.Type != "sweep" {
			return
		}
		total, _ := j.TrialLimits()
		s := NewSampler(j)
		var hist []Observation
		for i := range min(total, 12) {
			p, err := s.Sample(i, hist)
			if err != nil {
				t.Fatalf("trial %d of %d: %v", i, total, err)
			}
			for name := range j.SearchSpace {
				if x, ok := p[name].(float64); ok && (math.IsNaN(x) || math.IsInf(x, 0)) {
					t.Fatalf("%s is %v", name, x)
				}
			}
			_ = j.TrialJob(p)
			hist = append(hist, Observation{Params: p, Value: float64(i % 3)})
		}
	})
}
