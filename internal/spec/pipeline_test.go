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
		"no steps":   {"type: pipeline\n", "jobs: is required"},
		"sweep step": {"type: pipeline\njobs:\n  a:\n    type: sweep\n    command: x\n", "sweep steps are not supported yet"},
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
