package spec

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A step that runs a pipeline component written inline becomes the
// component's steps, each bound to what the outer step gave, and the
// step after it takes the inner step's output.
func TestExpandInlinePipelineComponent(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
inputs:
  rows: {type: uri_folder, path: ./rows}
  rate: 0.5
outputs:
  final: {mode: upload}
settings: {default_compute: azureml:cpu-cluster}
jobs:
  fit:
    type: pipeline
    compute: local
    inputs:
      raw: ${{parent.inputs.rows}}
      lr: ${{parent.inputs.rate}}
    component:
      type: pipeline
      inputs:
        raw: {type: uri_folder}
        lr: {type: number}
        epochs: {type: integer, default: 3}
        extra: {type: string, optional: true}
      outputs:
        weights: {type: uri_folder}
      jobs:
        clean:
          command: tidy ${{inputs.src}} ${{outputs.tidy}}
          inputs:
            src: ${{parent.inputs.raw}}
          outputs:
            tidy: {type: uri_folder}
        train:
          command: learn ${{inputs.d}} ${{inputs.lr}} ${{inputs.n}} ${{outputs.w}}
          inputs:
            d: ${{parent.jobs.clean.outputs.tidy}}
            lr: ${{parent.inputs.lr}}
            n: ${{parent.inputs.epochs}}
            x: ${{parent.inputs.extra}}
          outputs:
            w: ${{parent.outputs.weights}}
  report:
    command: show ${{inputs.m}} ${{outputs.out}}
    inputs:
      m: ${{parent.jobs.fit.outputs.weights}}
    outputs:
      out: ${{parent.outputs.final}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ExpandPipelineSteps(); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("the expanded pipeline: %v", err)
	}
	var names []string
	for n := range p.Jobs {
		names = append(names, n)
	}
	if diff := cmp.Diff([]string{"fit-clean", "fit-train", "report"}, slices.Sorted(slices.Values(names))); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	three := "3"
	want := map[string]StepInput{
		"d":  {Binding: &Binding{Kind: BindStepOutput, Step: "fit-clean", Name: "tidy"}},
		"lr": {Binding: &Binding{Kind: BindParentInput, Name: "rate"}},
		"n":  {Value: &three},
	}
	if diff := cmp.Diff(want, p.Jobs["fit-train"].Inputs); diff != "" {
		t.Errorf("fit-train inputs (-want +got):\n%s", diff)
	}
	if got := p.Jobs["fit-clean"].Inputs["src"].Binding; got == nil || got.Name != "rows" {
		t.Errorf("fit-clean's src = %+v, want bound to the pipeline's input rows", got)
	}
	if got := p.Jobs["report"].Inputs["m"].Binding; got == nil || got.Step != "fit-train" || got.Name != "w" {
		t.Errorf("report's m = %+v, want fit-train's output w", got)
	}
	if got := p.StepCompute("fit-train"); got != "local" {
		t.Errorf("fit-train runs on %q, want the outer step's compute local", got)
	}
	if diff := cmp.Diff([]string{"fit-clean"}, p.Jobs["fit-train"].Dependencies()); diff != "" {
		t.Errorf("fit-train's dependencies (-want +got):\n%s", diff)
	}
}

// What the outer step gives that the pipeline component does not
// declare, or takes that no inner step gives, is named.
func TestExpandPipelineComponentErrors(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
jobs:
  fit:
    type: pipeline
    inputs:
      nope: 1
    component:
      type: pipeline
      outputs:
        weights: {type: uri_folder}
      jobs:
        only:
          command: echo hi
  after:
    command: cat ${{inputs.w}}
    inputs:
      w: ${{parent.jobs.fit.outputs.weights}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = p.ExpandPipelineSteps()
	if err == nil || !strings.Contains(err.Error(), "jobs.fit.inputs.nope") {
		t.Fatalf("err = %v, want one naming jobs.fit.inputs.nope", err)
	}
	delete(p.Jobs["fit"].Inputs, "nope")
	err = p.ExpandPipelineSteps()
	if err == nil || !strings.Contains(err.Error(), "jobs.after.inputs.w") || !strings.Contains(err.Error(), "weights") {
		t.Fatalf("err = %v, want one naming jobs.after.inputs.w and the output weights", err)
	}
}

// A pipeline sent to the workspace has its pipeline components expanded;
// one that still has a type: pipeline step is refused, saying so.
func TestUnexpandedPipelineStepRefusedByWorkspace(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
jobs:
  fit:
    type: pipeline
    component: ./inner.yml
`), nil)
	if err != nil {
		t.Fatalf("a file's pipeline step is expanded by the client, not refused: %v", err)
	}
	err = p.Validate()
	if err == nil || !strings.Contains(err.Error(), "jobs.fit.component") {
		t.Fatalf("err = %v, want one naming jobs.fit.component", err)
	}
}

// A registered pipeline component cannot be named: Ferry registers none.
func TestRegisteredPipelineComponentRefused(t *testing.T) {
	_, err := ParsePipelineJob([]byte(`
type: pipeline
jobs:
  fit:
    type: pipeline
    component: azureml:trainer:1
`), nil)
	if err == nil || !strings.Contains(err.Error(), "registers no pipeline components") {
		t.Fatalf("err = %v, want one saying Ferry registers no pipeline components", err)
	}
}

// A step's compute may be a pipeline input's value, at the top level and
// inside a pipeline component, where it is what the outer step gave.
func TestComputeFromPipelineInput(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
inputs:
  big: gpu-cluster
  small: local
  rows: {type: uri_folder, path: ./rows}
jobs:
  first:
    command: echo one
    compute: ${{parent.inputs.small}}
  nest:
    type: pipeline
    inputs:
      where: ${{parent.inputs.big}}
    component:
      type: pipeline
      inputs:
        where: {type: string}
        fixed: {type: string, default: cpu-cluster}
      jobs:
        a:
          command: echo a
          compute: ${{parent.inputs.where}}
        b:
          command: echo b
          compute: ${{parent.inputs.fixed}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ExpandPipelineSteps(); err != nil {
		t.Fatal(err)
	}
	for step, want := range map[string]string{"first": "local", "nest-a": "gpu-cluster", "nest-b": "cpu-cluster"} {
		if got := p.StepCompute(step); got != want {
			t.Errorf("%s runs on %q, want %q", step, got, want)
		}
	}

	_, err = ParsePipelineJob([]byte(`
type: pipeline
inputs:
  rows: {type: uri_folder, path: ./rows}
jobs:
  first:
    command: echo one
    compute: ${{parent.inputs.rows}}
`), nil)
	if err == nil || !strings.Contains(err.Error(), "jobs.first.compute") || !strings.Contains(err.Error(), "is data") {
		t.Fatalf("err = %v, want one naming jobs.first.compute and saying the input is data", err)
	}
}

// A binding may name a step with '-' where the step's name has '_' (or
// the reverse), as Azure's files do; it is refused when two steps match.
func TestStepBindingHyphenUnderscore(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
jobs:
  train_model:
    command: fit ${{outputs.m}}
    outputs: {m: {type: uri_folder}}
  use:
    command: cat ${{inputs.m}}
    inputs:
      m: ${{parent.jobs.train-model.outputs.m}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Jobs["use"].Inputs["m"].Binding; got == nil || got.Step != "train_model" {
		t.Errorf("use's m = %+v, want bound to train_model", got)
	}
	_, err = ParsePipelineJob([]byte(`
type: pipeline
jobs:
  a-b_c:
    command: fit ${{outputs.m}}
    outputs: {m: {type: uri_folder}}
  a_b-c:
    command: fit ${{outputs.m}}
    outputs: {m: {type: uri_folder}}
  use:
    command: cat ${{inputs.m}}
    inputs:
      m: ${{parent.jobs.a_b_c.outputs.m}}
`), nil)
	if err == nil || !strings.Contains(err.Error(), "jobs.use.inputs.m") {
		t.Fatalf("err = %v, want one naming jobs.use.inputs.m", err)
	}
}

// A pipeline job may be one pipeline component run whole (component:
// instead of jobs:): its inputs and outputs are the component's, and its
// steps the component's, under their own names.
func TestPipelineJobOfOneComponent(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
compute: cpu-cluster
inputs:
  rows: {type: uri_folder, path: ./rows}
outputs:
  scores: {mode: upload}
component:
  type: pipeline
  inputs:
    rows: {type: uri_folder}
    how: {type: string, default: append}
  outputs:
    scores: {type: uri_folder}
  jobs:
    prep:
      command: prep ${{inputs.d}} ${{outputs.p}}
      inputs: {d: '${{parent.inputs.rows}}'}
      outputs: {p: {type: uri_folder}}
    score:
      command: score ${{inputs.p}} ${{inputs.how}} ${{outputs.s}}
      inputs:
        p: ${{parent.jobs.prep.outputs.p}}
        how: ${{parent.inputs.how}}
      outputs:
        s: ${{parent.outputs.scores}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ExpandPipelineSteps(); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("the expanded pipeline: %v", err)
	}
	if got := slices.Sorted(maps.Keys(p.Jobs)); !slices.Equal(got, []string{"prep", "score"}) {
		t.Fatalf("steps = %v, want prep and score", got)
	}
	if b := p.Jobs["prep"].Inputs["d"].Binding; b == nil || b.Kind != BindParentInput || b.Name != "rows" {
		t.Errorf("prep's d = %+v, want the pipeline's input rows", b)
	}
	if v := p.Jobs["score"].Inputs["how"].Value; v == nil || *v != "append" {
		t.Errorf("score's how = %v, want the component's default append", v)
	}
	if b := p.Jobs["score"].Outputs["s"].Binding; b == nil || b.Kind != BindParentOutput || b.Name != "scores" {
		t.Errorf("score's s = %+v, want the pipeline's output scores", b)
	}
	if got := p.StepCompute("score"); got != "cpu-cluster" {
		t.Errorf("score runs on %q, want the job's compute cpu-cluster", got)
	}

	_, err = ParsePipelineJob([]byte(`
type: pipeline
component: ./whole.yml
jobs:
  a: {command: echo a}
`), nil)
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("err = %v, want one saying jobs and component do not go together", err)
	}
}

// A literal inside a pipeline component that holds the component's inputs
// holds, once expanded, what the step gave them.
func TestExpandLiteralHoldingComponentInputs(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
inputs:
  version: v7
jobs:
  outer:
    type: pipeline
    inputs:
      tag: ${{parent.inputs.version}}
      size: "3"
    component:
      type: pipeline
      inputs:
        tag: {type: string}
        size: {type: integer}
        kind: {type: string, default: plain}
      jobs:
        s:
          command: echo ${{inputs.label}}
          inputs:
            label: run_${{parent.inputs.tag}}_${{parent.inputs.size}}_${{parent.inputs.kind}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ExpandPipelineSteps(); err != nil {
		t.Fatal(err)
	}
	v := p.Jobs["outer-s"].Inputs["label"].Value
	if v == nil || *v != "run_${{parent.inputs.version}}_3_plain" {
		t.Fatalf("label = %v, want run_${{parent.inputs.version}}_3_plain (the outer input left for the workspace)", v)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}
