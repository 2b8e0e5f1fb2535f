package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Azure ML's own sweep example parses, and its trials are command jobs
// with the parameters in their command.
func TestParseSweepAzureExample(t *testing.T) {
	j, err := ParseJob(readFile(t, "testdata/sweep-azure-shape.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if j.Type != "sweep" || j.Sampling().Type != "random" || j.Objective.Goal != "maximize" {
		t.Fatalf("parsed %+v", j)
	}
	total, conc := j.TrialLimits()
	if total != 30 || conc != 6 {
		t.Fatalf("limits = %d, %d", total, conc)
	}
	tj := j.TrialJob(map[string]any{"alpha": 0.25, "solver": "saga", "depth": 7.0})
	if err := tj.Validate(); err != nil {
		t.Fatal(err)
	}
	want := "python fit.py --table ${{inputs.penguins}} --alpha 0.25 --solver saga --depth 7"
	if diff := cmp.Diff(want, tj.Command); diff != "" {
		t.Fatalf("trial command (-want +got):\n%s", diff)
	}
	if tj.Code != "src" || tj.Compute != "azureml:cpu-cluster" || tj.Inputs["penguins"].Path != "./penguins.csv" {
		t.Fatalf("trial job %+v", tj)
	}
	roundTrip(t, j)
}

func TestSweepSamplingObjectForm(t *testing.T) {
	j, err := ParseJob([]byte(sweepDoc("sampling_algorithm: {type: random, seed: 7, rule: sobol}\nsearch_space:\n  lr: {type: loguniform, min_value: -6, max_value: -1}\n  layers: {type: randint, upper: 4}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if a := j.Sampling(); a.Seed == nil || *a.Seed != 7 || a.Rule != "sobol" {
		t.Fatalf("sampling = %+v", a)
	}
	roundTrip(t, j)
}

// sweepDoc is a small valid sweep with extra appended (later keys may
// not repeat earlier ones).
func sweepDoc(extra string) string {
	return `type: sweep
trial:
  command: python3 train.py --lr ${{search_space.lr}} --layers ${{search_space.layers}}
  environment: {image: python:3.12}
objective: {primary_metric: loss, goal: minimize}
` + extra
}

func TestSweepRefusesBadSearchSpaces(t *testing.T) {
	space := func(s string) string { return "search_space:\n" + s }
	lr := "  lr: {type: uniform, min_value: 0.1, max_value: 1}\n"
	layers := "  layers: {type: choice, values: [1, 2, 3]}\n"
	for _, c := range []struct {
		name, doc, field, want string
	}{
		{"no search space", sweepDoc(""), "search_space", "is required"},
		{"unknown type", sweepDoc(space(lr + "  layers: {type: gaussian, mu: 1}\n")), "search_space.layers.type", "must be one of choice"},
		{"uniform without max", sweepDoc(space("  lr: {type: uniform, min_value: 0.1}\n" + layers)), "search_space.lr.max_value", "is required"},
		{"min above max", sweepDoc(space("  lr: {type: uniform, min_value: 2, max_value: 1}\n" + layers)), "search_space.lr.max_value", "greater than min_value"},
		{"choice with upper", sweepDoc(space(lr + "  layers: {type: choice, values: [1], upper: 3}\n")), "search_space.layers.upper", "does not apply to a choice"},
		{"empty choice", sweepDoc(space(lr + "  layers: {type: choice, values: []}\n")), "search_space.layers.values", "takes values"},
		{"nested choice", sweepDoc(space(lr + "  layers: {type: choice, values: [{a: 1}]}\n")), "search_space.layers.values[0]", "nested search spaces"},
		{"string bound", sweepDoc(space("  lr: {type: uniform, min_value: low, max_value: 1}\n" + layers)), "search_space.lr.min_value", "must be a number"},
		{"randint zero", sweepDoc(space(lr + "  layers: {type: randint, upper: 0}\n")), "search_space.layers.upper", "from 1"},
		{"sigma zero", sweepDoc(space(lr + "  layers: {type: normal, mu: 1, sigma: 0}\n")), "search_space.layers.sigma", "greater than 0"},
		{"q missing", sweepDoc(space(lr + "  layers: {type: quniform, min_value: 1, max_value: 9}\n")), "search_space.layers.q", "is required"},
		{"loguniform overflow", sweepDoc(space("  lr: {type: loguniform, min_value: 1, max_value: 900}\n" + layers)), "search_space.lr", "exponents"},
		{"undeclared parameter", sweepDoc(space(lr)), "trial.command", `parameter "layers"`},
		{"grid with uniform", sweepDoc("sampling_algorithm: grid\n" + space(lr+layers)), "search_space.lr.type", "grid sampling takes only choice"},
		{"bayesian with normal", sweepDoc("sampling_algorithm: bayesian\n" + space(lr+"  layers: {type: normal, mu: 1, sigma: 1}\n")), "search_space.layers.type", "bayesian sampling takes only"},
		{"bad sampling", sweepDoc("sampling_algorithm: hill_climb\n" + space(lr+layers)), "sampling_algorithm.type", "must be one of random"},
		{"bad goal", strings.Replace(sweepDoc(space(lr+layers)), "goal: minimize", "goal: lowest", 1), "objective.goal", "maximize or minimize"},
		{"bandit without slack", sweepDoc(space(lr+layers) + "early_termination: {type: bandit}\n"), "early_termination", "slack_factor"},
		{"truncation without percentage", sweepDoc(space(lr+layers) + "early_termination: {type: truncation_selection}\n"), "early_termination.truncation_percentage", "1 to 99"},
		{"too many trials", sweepDoc(space(lr+layers) + "limits: {max_total_trials: 5000}\n"), "limits.max_total_trials", "1 to 1000"},
		{"top-level command", sweepDoc(space(lr+layers) + "command: echo\n"), "command", "goes under trial"},
		{"trial component", "type: sweep\ntrial: ./component.yml\nobjective: {primary_metric: a, goal: maximize}\n" + space(lr), "trial", "component file"},
		{"trial env missing", "type: sweep\ntrial:\n  command: echo ${{search_space.lr}}\n  environment: \"azureml:\"\nobjective: {primary_metric: a, goal: maximize}\n" + space(lr), "trial.environment", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseJob([]byte(c.doc))
			wantProblem(t, err, c.field, c.want)
		})
	}
}

// A command job is refused the fields of a sweep.
func TestCommandJobRefusesSweepFields(t *testing.T) {
	_, err := ParseJob([]byte("command: echo\nlimits: {max_total_trials: 3}\nobjective: {primary_metric: a, goal: maximize}\n"))
	wantProblem(t, err, "limits.max_total_trials", "only to sweep jobs")
	wantProblem(t, err, "objective", "type: sweep")
}

func TestGridLimits(t *testing.T) {
	j, err := ParseJob([]byte(sweepDoc("sampling_algorithm: grid\nsearch_space:\n  lr: {type: choice, values: [0.1, 0.01]}\n  layers: {type: choice, values: [1, 2, 3]}\nlimits: {max_concurrent_trials: 2}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if total, conc := j.TrialLimits(); total != 6 || conc != 2 {
		t.Fatalf("limits = %d, %d; want every combination (6), 2 at once", total, conc)
	}
	j.Limits.TrialTimeout = 90
	if tj := j.TrialJob(map[string]any{"lr": 0.1, "layers": 2.0}); tj.Limits == nil || tj.Limits.Timeout != 90 || tj.Command != "python3 train.py --lr 0.1 --layers 2" {
		t.Fatalf("trial job %+v; want limits.timeout 90 from trial_timeout", tj)
	}
}

func TestFormatParam(t *testing.T) {
	for v, want := range map[any]string{3.0: "3", 0.001: "0.001", 1e-7: "1e-07", "rbf": "rbf", true: "True", int64(4): "4", 2.5e20: "2.5e+20"} {
		if got := FormatParam(v); got != want {
			t.Errorf("FormatParam(%v) = %q, want %q", v, got, want)
		}
	}
}

// FuzzParseSweepJob is FuzzParseJob seeded with sweep files: no input
// makes ParseJob panic, and every sweep it accepts is valid and comes back
// unchanged through the API's JSON and through YAML.
func FuzzParseSweepJob(f *testing.F) {
	f.Add(readFile(f, "testdata/sweep-azure-shape.yml"))
	f.Add([]byte(sweepDoc("sampling_algorithm: {type: random, seed: 7, rule: sobol}\nsearch_space:\n  lr: {type: qlognormal, mu: -3, sigma: 1, q: 0.001}\n  layers: {type: choice, values: [1, two, true]}\nearly_termination: {type: truncation_selection, truncation_percentage: 20, delay_evaluation: 2}\n")))
	f.Add([]byte(sweepDoc("sampling_algorithm: grid\nsearch_space:\n  lr: {type: choice, values: [0.1]}\n  layers: {type: choice, values: [1, 2]}\nlimits: {max_total_trials: 2, trial_timeout: 60}\n")))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := ParseJob(data)
		if err != nil {
			fieldErrors(t, err)
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("parsed job does not validate: %v", err)
		}
		roundTrip(t, j)
	})
}
