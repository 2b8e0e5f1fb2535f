package pipelines

import (
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

func TestStepBindingAndReuseKey(t *testing.T) {
	data := []byte(`type: pipeline
inputs:
  n: 5
jobs:
  a:
    command: echo > ${{outputs.o}}/f
    outputs: {o: {type: uri_folder}}
  b:
    component:
      inputs:
        x: {type: uri_folder}
        n: {type: integer}
        k: {type: string, default: kay}
        opt: {type: string, optional: true}
      outputs:
        out: {type: uri_folder}
      command: run ${{inputs.x}} ${{inputs.n}} ${{inputs.k}} $[[--opt ${{inputs.opt}}]] ${{outputs.out}}
    inputs:
      x: ${{parent.jobs.a.outputs.o}}
      n: ${{parent.inputs.n}}
`)
	p, err := spec.ParsePipelineJob(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := store.Job{Name: "pipe"}
	states := map[string]*stepState{"a": {job: &store.Job{Name: "pipe-a", Outputs: []byte(`{"named":{"o":"aaaa"}}`)}, status: apitypes.StatusCompleted}}
	comp := p.StepComponent("b")
	in, err := bindStepInputs(p, nil, "b", comp, states)
	if err != nil {
		t.Fatal(err)
	}
	j := stepSpec(rec, p, "b", comp, in)
	if want := "run ${{inputs.x}} ${{inputs.n}} ${{inputs.k}}  ${{outputs.out}}"; j.Command != want {
		t.Errorf("command %q, want %q (the optional fragment dropped)", j.Command, want)
	}
	if j.Name != "pipe-b" || in.snaps["x"] != "aaaa" || *j.Inputs["n"].Value != "5" || *j.Inputs["k"].Value != "kay" {
		t.Errorf("step job %s: inputs %+v, snapshots %v", j.Name, j.Inputs, in.snaps)
	}
	if err := j.Validate(); err != nil {
		t.Errorf("the step's job does not validate: %v", err)
	}
	key := stepReuseKey(comp, j, in.snaps, nil)
	states["a"].job.Outputs = []byte(`{"named":{"o":"bbbb"}}`)
	in2, _ := bindStepInputs(p, nil, "b", comp, states)
	if stepReuseKey(comp, stepSpec(rec, p, "b", comp, in2), in2.snaps, nil) == key {
		t.Error("other input data kept the reuse key")
	}
	states["a"].job.Outputs = []byte(`{"named":{}}`)
	if _, err := bindStepInputs(p, nil, "b", comp, states); err == nil {
		t.Error("an output the step before did not write was bound")
	}
}

// TestPipelineSweepStepReuseNeedsSeed: a sweep step is reused only when
// it would run the same trials again: grid, or a seed the file gives
// (and then only that seed). One whose seed the server picks at submit
// runs again, as force_rerun would.
func TestPipelineSweepStepReuseNeedsSeed(t *testing.T) {
	doc := `type: pipeline
jobs:
  sw:
    type: sweep
    trial:
      type: command
      inputs: {lr: {type: number}}
      command: echo ${{inputs.lr}}
    SAMPLING
    search_space:
      lr: {type: uniform, min_value: 0.1, max_value: 0.5}
    objective: {goal: maximize, primary_metric: acc}
    limits: {max_total_trials: 2}
`
	step := func(sampling string) (*spec.PipelineJob, *spec.Job, *spec.Component) {
		t.Helper()
		p, err := spec.ParsePipelineJob([]byte(strings.Replace(doc, "SAMPLING", sampling, 1)), nil)
		if err != nil {
			t.Fatalf("%s: %v", sampling, err)
		}
		comp := p.StepComponent("sw")
		in, err := bindStepInputs(p, nil, "sw", comp, map[string]*stepState{})
		if err != nil {
			t.Fatal(err)
		}
		j, err := p.SweepStepJob("sw", stepSpec(store.Job{Name: "pipe"}, p, "sw", comp, in), comp)
		if err != nil {
			t.Fatal(err)
		}
		return p, j, comp
	}
	for sampling, want := range map[string]bool{
		"sampling_algorithm: random":                      false,
		"sampling_algorithm: {type: random, rule: sobol}": false,
		"sampling_algorithm: bayesian":                    false,
		"":                                                false, // no sampling_algorithm: random
		"sampling_algorithm: {type: random, seed: 7}":   true,
		"sampling_algorithm: {type: bayesian, seed: 7}": true,
	} {
		p, j, _ := step(sampling)
		if got := stepReusable(p, "sw", j); got != want {
			t.Errorf("%s: reusable %v, want %v", sampling, got, want)
		}
	}
	_, seven, comp := step("sampling_algorithm: {type: random, seed: 7}")
	_, eight, _ := step("sampling_algorithm: {type: random, seed: 8}")
	if stepReuseKey(comp, seven, nil, nil) == stepReuseKey(comp, eight, nil, nil) {
		t.Error("another seed kept the sweep step's reuse key")
	}
	p, forced, _ := step("sampling_algorithm: {type: random, seed: 7}")
	p.Jobs["sw"].ForceRerun = new(bool)
	*p.Jobs["sw"].ForceRerun = true
	if stepReusable(p, "sw", forced) {
		t.Error("force_rerun: true on a seeded sweep step: reusable")
	}
}
