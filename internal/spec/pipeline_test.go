package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePipelineAzureShapes(t *testing.T) {
	for _, name := range []string{"e2e_registered.yml", "inline_commands.yml", "components.yml"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "pipelines", name))
			if err != nil {
				t.Fatal(err)
			}
			if !IsPipelineFile(data) {
				t.Fatal("IsPipelineFile = false")
			}
			p, err := ParsePipelineJob(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Jobs) < 2 {
				t.Fatalf("jobs = %d", len(p.Jobs))
			}
		})
	}
}

func TestParsePipelineDetails(t *testing.T) {
	data, _ := os.ReadFile("testdata/pipelines/e2e_registered.yml")
	p, err := ParsePipelineJob(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Ignored, ","); got != "jobs.train_job.services" {
		t.Errorf("ignored = %q", got)
	}
	if got := p.DefaultCompute(); got != "cpu-cluster" {
		t.Errorf("default compute = %q", got)
	}
	if d := p.Jobs["evaluate_job"].Dependencies(); len(d) != 1 || d[0] != "score_job" {
		t.Errorf("deps = %v", d)
	}
	b := p.Jobs["train_job"].Inputs["max_epocs"].Binding
	if b == nil || b.Kind != BindParentInput || b.Name != "pipeline_job_training_max_epocs" {
		t.Errorf("binding = %+v", b)
	}
	if v := p.Inputs["pipeline_job_training_learning_rate"].Value; v == nil || *v != "1.8" {
		t.Errorf("literal input = %v", v)
	}
}

func TestParsePipelineErrors(t *testing.T) {
	cases := map[string]struct{ file, want string }{
		"unknown step": {`type: pipeline
jobs:
  a:
    command: echo ${{inputs.x}}
    inputs:
      x: ${{parent.jobs.nope.outputs.y}}
`, `jobs.a.inputs.x (line 6): ${{parent.jobs.nope.outputs.y}}: the pipeline has no step "nope"`},
		"cycle": {`type: pipeline
jobs:
  a:
    command: echo ${{inputs.x}} > ${{outputs.o}}/f
    inputs: {x: "${{parent.jobs.b.outputs.o}}"}
    outputs: {o: {type: uri_folder}}
  b:
    command: echo ${{inputs.x}} > ${{outputs.o}}/f
    inputs: {x: "${{parent.jobs.a.outputs.o}}"}
    outputs: {o: {type: uri_folder}}
`, "go round in a circle (a → b → a)"},
		"bad binding": {`type: pipeline
jobs:
  a:
    command: echo ${{inputs.x}}
    inputs: {x: "${{parent.foo}}"}
`, "is not a binding Ferry knows"},
		"no steps":                       {"type: pipeline\n", "jobs: is required"},
		"sweep step with a command":      {"type: pipeline\njobs:\n  a:\n    type: sweep\n    command: x\n", "jobs.a.command (line 5): a sweep step runs its trial's command"},
		"sweep step without trial":       {"type: pipeline\njobs:\n  a:\n    type: sweep\n    search_space: {lr: {type: choice, values: [1]}}\n    objective: {primary_metric: m, goal: maximize}\n", "jobs.a.trial (line 3): is required"},
		"sweep step without objective":   {"type: pipeline\njobs:\n  a:\n    type: sweep\n    trial: ./t.yml\n    search_space: {lr: {type: choice, values: [1]}}\n", "jobs.a.objective (line 3): is required"},
		"trial on a command step":        {"type: pipeline\njobs:\n  a:\n    trial: ./t.yml\n", "jobs.a.trial (line 4): applies only to sweep steps"},
		"search space on a command step": {"type: pipeline\njobs:\n  a:\n    command: echo\n    search_space: {lr: {type: choice, values: [1]}}\n", "jobs.a.search_space (line 5): applies only to sweep steps"},
		"registry label":                 {"type: pipeline\njobs:\n  a:\n    component: azureml://registries/azureml/components/train/labels/stable\n", "Ferry knows the label latest only"},
		"registry shape":                 {"type: pipeline\njobs:\n  a:\n    component: azureml://registries/azureml/environments/train/versions/1\n", "write azureml://registries/REGISTRY/components/NAME/versions/VERSION"},
		"missing required": {`type: pipeline
jobs:
  a:
    component:
      inputs: {x: {type: integer}}
      command: echo ${{inputs.x}}
`, "the component's input x is required"},
		"undeclared output binding": {`type: pipeline
jobs:
  a:
    command: echo > ${{outputs.o}}/f
    outputs: {o: "${{parent.outputs.nope}}"}
`, `the pipeline has no output "nope"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParsePipelineJob([]byte(c.file), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestParseComponent(t *testing.T) {
	data, _ := os.ReadFile("testdata/pipelines/train.yml")
	c, err := ParseComponent(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "my_train" || c.Version != "1" || c.Inputs["learning_rate"].Default == nil || *c.Inputs["learning_rate"].Default != "0.01" {
		t.Fatalf("component = %+v", c)
	}
	bad := `name: x
inputs:
  opt: {type: string, optional: true}
command: echo ${{inputs.opt}} ${{inputs.nope}}
`
	_, err = ParseComponent([]byte(bad))
	for _, want := range []string{"input opt is optional", `refers to input "nope"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

func TestExpandParentInputs(t *testing.T) {
	got := ExpandParentInputs("run_${{parent.inputs.tag}}_${{ parent.inputs.nope }}_${{parent.jobs.a.outputs.b}}", func(n string) (string, bool) {
		return "v1", n == "tag"
	})
	if want := "run_v1_${{ parent.inputs.nope }}_${{parent.jobs.a.outputs.b}}"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestExpandOptional(t *testing.T) {
	cmd := "run $[[--a ${{inputs.a}}]] $[[--b ${{inputs.b}}]] --c ${{inputs.c}}"
	got := ExpandOptional(cmd, func(n string) bool { return n != "b" })
	if want := "run --a ${{inputs.a}}  --c ${{inputs.c}}"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestParseBinding(t *testing.T) {
	cases := map[string]Binding{
		"${{parent.inputs.x}}":             {Kind: BindParentInput, Name: "x"},
		" ${{ parent.jobs.s1.outputs.o }}": {Kind: BindStepOutput, Step: "s1", Name: "o"},
		"${{parent.outputs.z}}":            {Kind: BindParentOutput, Name: "z"},
	}
	for in, want := range cases {
		b, ok, err := ParseBinding(in)
		if err != nil || !ok || b != want {
			t.Errorf("%q: %+v %v %v", in, b, ok, err)
		}
	}
	for in, want := range map[string]Binding{
		"${{inputs.x}}":                {Kind: BindParentInput, Name: "x"},
		"${{jobs.prep-job.outputs.o}}": {Kind: BindStepOutput, Step: "prep-job", Name: "o"},
		"${{outputs.z}}":               {Kind: BindParentOutput, Name: "z"},
	} {
		if b, ok, err := ParseBinding(in); err != nil || !ok || b != want {
			t.Errorf("older form %q: %+v %v %v", in, b, ok, err)
		}
	}
	for _, in := range []string{"${{parent.jobs.a.inputs.x}}", "${{parent.foo.x}}", "${{parent.inputs.}}", "${{parent.inputs.a-b}}"} {
		if _, ok, err := ParseBinding(in); !ok || err == nil {
			t.Errorf("%q: ok=%v err=%v, want an error", in, ok, err)
		}
	}
	for _, in := range []string{"plain", "${{parent.inputs.a}}_${{parent.inputs.b}}"} {
		if _, ok, err := ParseBinding(in); ok || err != nil {
			t.Errorf("%q read as a binding (%v)", in, err)
		}
	}
}

func FuzzParsePipelineJob(f *testing.F) {
	for _, name := range []string{"e2e_registered.yml", "inline_commands.yml", "components.yml"} {
		data, _ := os.ReadFile(filepath.Join("testdata", "pipelines", name))
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePipelineJob(data, nil)
		if err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("parsed pipeline fails Validate: %v", err)
			}
		}
	})
}

func FuzzParseComponent(f *testing.F) {
	data, _ := os.ReadFile("testdata/pipelines/train.yml")
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := ParseComponent(data); err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed component fails Validate: %v", err)
			}
		}
	})
}

func FuzzParseBinding(f *testing.F) {
	for _, s := range []string{"${{parent.inputs.x}}", "${{parent.jobs.a.outputs.b}}", "${{parent.outputs.z}}", "${{", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, ok, err := ParseBinding(s)
		if ok && err == nil {
			again, ok2, err2 := ParseBinding(b.String())
			if !ok2 || err2 != nil || again != b {
				t.Fatalf("%q → %+v → %q → %+v %v", s, b, b.String(), again, err2)
			}
		}
		_ = ExpandOptional(s, func(string) bool { return len(s)%2 == 0 })
	})
}

// The shapes of Azure's older pipeline files: steps of type component
// with inline components whose code and inputs use local_path and type
// path, pipeline inputs given as dataset:, bindings without parent., and
// step names with '-'.
func TestParsePipelineOlderForms(t *testing.T) {
	file := `type: pipeline
inputs:
  training_input:
    dataset:
      local_path: ./data
  epochs: 20
outputs:
  model:
    mode: rw_mount
jobs:
  train-job:
    type: component
    component:
      name: Train
      version: 10
      type: command
      inputs:
        training_data: {type: path}
        max_epochs: {type: integer}
      outputs:
        model_output: {type: path}
      code:
        local_path: ./train_src
      command: python train.py --data ${{inputs.training_data}} --epochs ${{inputs.max_epochs}} --out ${{outputs.model_output}}
    inputs:
      training_data: ${{inputs.training_input}}
      max_epochs: ${{inputs.epochs}}
    outputs:
      model_output: ${{outputs.model}}
  score-job:
    type: command
    component: file:./score.yml
    inputs:
      model_input: ${{jobs.train-job.outputs.model_output}}
`
	p, err := ParsePipelineJob([]byte(file), nil)
	if err != nil {
		t.Fatal(err)
	}
	if in := p.Inputs["training_input"]; in.Path != "./data" {
		t.Errorf("dataset: local_path read as %+v", in)
	}
	c := p.Jobs["train-job"].Component.Resolved
	if c.Code != "./train_src" || c.Inputs["training_data"].Type != "uri_folder" || c.Outputs["model_output"].Type != "uri_folder" {
		t.Errorf("older component read as code %q, inputs %+v, outputs %+v", c.Code, c.Inputs, c.Outputs)
	}
	if d := p.Jobs["score-job"].Dependencies(); len(d) != 1 || d[0] != "train-job" {
		t.Errorf("score-job depends on %v", d)
	}
	if b := p.Jobs["train-job"].Outputs["model_output"].Binding; b == nil || b.Kind != BindParentOutput {
		t.Errorf("older output binding read as %+v", b)
	}
}

func TestStepOrder(t *testing.T) {
	data, _ := os.ReadFile("testdata/pipelines/e2e_registered.yml")
	p, err := ParsePipelineJob(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := p.StepOrder()
	if !(o["train_job"] < o["score_job"] && o["score_job"] < o["evaluate_job"]) {
		t.Errorf("order %v: each step must come after the one it takes inputs from", o)
	}
}

func TestComponentRefRegistry(t *testing.T) {
	cases := map[string][3]string{ // ref -> name, version, registry
		"azureml:train:2":      {"train", "2", ""},
		"azureml:train@latest": {"train", "latest", ""},
		"azureml://registries/azureml/components/train/versions/3":   {"train", "3", "azureml"},
		"azureml://registries/my-reg/components/train/labels/latest": {"train", "latest", "my-reg"},
		"azureml://registries/azureml/components/train":              {"train", "latest", "azureml"},
	}
	for ref, want := range cases {
		name, version, err := ParseComponentRef(ref)
		if err != nil || name != want[0] || version != want[1] || ComponentRegistry(ref) != want[2] {
			t.Errorf("%s: %s %s %q, %v; want %v", ref, name, version, ComponentRegistry(ref), err, want)
		}
	}
	if note := RegistryNote("azureml://registries/r/components/c/versions/1"); !strings.Contains(note, "component c (version 1)") {
		t.Errorf("note: %q", note)
	}
}

// TestSweepStep reads a sweep step as Azure's
// pipeline_with_hyperparameter_sweep writes one, and makes its sweep job
// once its trial's component is known: search-space parameters bind to
// the component's inputs of their names, and its outputs bind onwards.
func TestSweepStep(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`type: pipeline
outputs:
  best: {type: uri_folder}
jobs:
  sweep_step:
    type: sweep
    trial: ./train.yml
    inputs:
      data: {type: uri_file, path: https://example.org/iris.csv}
      degree: 3
      rate: ${{search_space.lr}}
    outputs:
      model_output: ${{parent.outputs.best}}
    sampling_algorithm: random
    search_space:
      kernel: {type: choice, values: [rbf, linear]}
      lr: {type: uniform, min_value: 0.1, max_value: 0.9}
    objective: {goal: Minimize, primary_metric: f1}
    limits: {max_total_trials: 5, max_concurrent_trials: 3, timeout: 7200, trial_timeout: 720}
  predict:
    command: cat ${{inputs.model}}/m
    inputs:
      model: ${{parent.jobs.sweep_step.outputs.model_output}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Jobs["sweep_step"]
	if !st.IsSweep() || st.Component == nil || st.Component.Ref != "./train.yml" || st.Inputs["rate"].Value == nil {
		t.Fatalf("sweep step: %+v", st)
	}
	comp, err := ParseComponent([]byte(`name: fit
type: command
inputs:
  data: {type: uri_file}
  degree: {type: integer}
  kernel: {type: string}
  rate: {type: number}
outputs:
  model_output: {type: uri_folder}
command: fit --data ${{inputs.data}} --degree ${{inputs.degree}} --kernel ${{inputs.kernel}} --rate ${{inputs.rate}} --out ${{outputs.model_output}}
environment: azureml:py:1
`))
	if err != nil {
		t.Fatal(err)
	}
	st.Component.Resolved = comp
	if err := p.Validate(); err != nil {
		t.Fatalf("with its trial: %v", err)
	}
	degree, rate := "3", "${{search_space.lr}}"
	base := &Job{Type: "command", Name: "p-sweep_step", Compute: "local",
		Inputs:  map[string]Input{"data": {Type: "uri_file", Path: "https://example.org/iris.csv"}, "degree": {Value: &degree}, "rate": {Value: &rate}},
		Outputs: map[string]Output{"model_output": {Type: "uri_folder"}}}
	sw, err := p.SweepStepJob("sweep_step", base, comp)
	if err != nil {
		t.Fatal(err)
	}
	want := "fit --data ${{inputs.data}} --degree ${{inputs.degree}} --kernel ${{search_space.kernel}} --rate ${{search_space.lr}} --out ${{outputs.model_output}}"
	if sw.Type != "sweep" || sw.Trial.Command != want || sw.Objective.Goal != "minimize" || sw.Limits.MaxTotalTrials != 5 {
		t.Errorf("sweep job: %+v\ntrial command %q\nwant %q", sw, sw.Trial.Command, want)
	}
	if _, ok := sw.Inputs["rate"]; ok {
		t.Errorf("inputs %v: rate is the parameter lr, not an input", sw.Inputs)
	}
}
