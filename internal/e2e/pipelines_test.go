package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pipelineView is the JSON form of a pipeline job as `job show -o json`
// prints it.
type pipelineView struct {
	Name         string `json:"name"`
	Status       string `json:"status"`
	StatusReason string `json:"status_reason"`
	Steps        []struct {
		Name       string `json:"name"`
		Job        string `json:"job"`
		Status     string `json:"status"`
		Reason     string `json:"reason"`
		Compute    string `json:"compute"`
		ReusedFrom string `json:"reused_from"`
	} `json:"steps"`
	Outputs *struct {
		Named map[string]string `json:"named"`
	} `json:"outputs"`
}

func (s *server) showPipeline(name string) pipelineView {
	s.t.Helper()
	r := s.mustFerry("job", "show", name, "-o", "json")
	var p pipelineView
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		s.t.Fatalf("job show -o json: %v\n%s", err, r.stdout)
	}
	return p
}

// step returns the named step of a pipeline view.
func (p pipelineView) step(t *testing.T, name string) (status, job, reusedFrom, compute, reason string) {
	t.Helper()
	for _, st := range p.Steps {
		if st.Name == name {
			return st.Status, st.Job, st.ReusedFrom, st.Compute, st.Reason
		}
	}
	t.Fatalf("pipeline %s has no step %s: %+v", p.Name, name, p.Steps)
	return
}

// waitPipeline waits until a pipeline job has ended.
func (s *server) waitPipeline(name string) pipelineView {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		p := s.showPipeline(name)
		switch p.Status {
		case "Completed", "Failed", "Canceled":
			return p
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pipeline %s is still %s: %+v", name, p.Status, p.Steps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const prepComponent = `$schema: https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json
name: prep
display_name: Prepare
version: 1
type: command
inputs:
  raw:
    type: uri_folder
  n:
    type: integer
    default: 3
  suffix:
    type: string
    optional: true
outputs:
  clean:
    type: uri_folder
code: ./prep_src
command: >-
  sh prep.sh ${{inputs.raw}} ${{outputs.clean}} ${{inputs.n}} $[[${{inputs.suffix}}]]
`

const trainComponent = `$schema: https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json
name: train
version: 1
type: command
is_deterministic: true
inputs:
  data:
    type: uri_folder
  lr:
    type: number
outputs:
  model:
    type: uri_folder
code: ./train_src
command: sh train.sh ${{inputs.data}} ${{inputs.lr}} ${{outputs.model}}
`

// The pipeline runs prep on local (a component file), train on the
// cluster (a registered component) and report on local (an inline
// command step), each taking the one before's output.
const threeStepPipeline = `$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json
type: pipeline
display_name: three steps
experiment_name: pipelines-e2e
description: prep on local, train on a cluster, report on local
settings:
  default_compute: azureml:cpu-cluster
  default_datastore: azureml:workspaceblobstore
inputs:
  raw_data:
    type: uri_folder
    path: ./data
  learning_rate: 0.5
outputs:
  final_report:
    mode: upload
jobs:
  prep:
    type: command
    component: ./components/prep.yml
    compute: local
    inputs:
      raw: ${{parent.inputs.raw_data}}
  train:
    type: command
    component: azureml:train@latest
    inputs:
      data: ${{parent.jobs.prep.outputs.clean}}
      lr: ${{parent.inputs.learning_rate}}
  report:
    type: command
    compute: local
    command: echo "report of $(cat ${{inputs.model}}/model.txt)" | tee ${{outputs.report}}/report.txt
    inputs:
      model: ${{parent.jobs.train.outputs.model}}
    outputs:
      report: ${{parent.outputs.final_report}}
    services:
      my_vscode:
        type: vs_code
`

func pipelineDir(t *testing.T, counter string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"pipeline.yml":                  threeStepPipeline,
		"data/rows.txt":                 "a\nb\nc\nd\n",
		"components/prep.yml":           prepComponent,
		"components/prep_src/prep.sh":   "echo prep ran >> " + counter + "\nhead -n $3 $1/rows.txt > $2/clean.txt\necho \"prepared $3 rows$4\"\n",
		"components/train.yml":          trainComponent,
		"components/train_src/train.sh": "echo train ran >> " + counter + "\necho \"model(lr=$2, rows=$(wc -l < $1/clean.txt))\" > $3/model.txt\necho trained\n",
	})
	return dir
}

func TestPipelineAcrossLocalAndCluster(t *testing.T) {
	s := startServer(t, "--node-lease", "6s")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "cpu-cluster", "Standard_DS1_v2", 1, 30))
	counter := jobWritableFile(t, "runs.txt")
	dir := pipelineDir(t, counter)
	file := filepath.Join(dir, "pipeline.yml")

	// A registered component that is missing is found before anything
	// is uploaded.
	r := s.ferry("job", "create", "-f", file, "--name", "too-early")
	if r.code == 0 || !strings.Contains(r.stderr, "jobs.train.component") || !strings.Contains(r.stderr, "train") || strings.Contains(r.stderr, "uploaded") {
		t.Fatalf("a pipeline naming an unregistered component: %s", r)
	}
	mustContain(t, "component create", s.mustFerry("component", "create", "-f", filepath.Join(dir, "components", "train.yml")).stdout, "azureml:train:1")
	mustContain(t, "component list", s.mustFerry("component", "list").stdout, "train", "1")

	// So is a compute the workspace does not have.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	badCompute := filepath.Join(dir, "bad-compute.yml")
	if err := os.WriteFile(badCompute, bytes.Replace(data, []byte("default_compute: azureml:cpu-cluster"), []byte("default_compute: azureml:no-such-cluster"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	r = s.ferry("job", "create", "-f", badCompute, "--name", "no-compute")
	if r.code == 0 || !strings.Contains(r.stderr, "settings.default_compute") || !strings.Contains(r.stderr, "no-such-cluster") || strings.Contains(r.stderr, "uploaded") {
		t.Fatalf("a pipeline naming a missing compute: %s", r)
	}

	r = s.ferry("job", "create", "-f", file, "--name", "pipe1", "--stream")
	if r.code != 0 {
		t.Fatalf("pipeline: %s\nserver:\n%s", r, s.output)
	}
	mustContain(t, "streamed steps", r.stdout, "[prep] prepared 3 rows", "[train] trained", "[report] report of model(lr=0.5, rows=3)")
	mustContain(t, "ignored fields", r.stderr, "jobs.report.services")
	p := s.showPipeline("pipe1")
	if p.Status != "Completed" || len(p.Steps) != 3 {
		t.Fatalf("pipe1: %+v", p)
	}
	for step, compute := range map[string]string{"prep": "local", "train": "cpu-cluster", "report": "local"} {
		status, _, reused, c, _ := p.step(t, step)
		if status != "Completed" || c != compute || reused != "" {
			t.Errorf("step %s: %s on %s (reused %q), want Completed on %s, not reused", step, status, c, reused, compute)
		}
	}
	mustContain(t, "job show", s.mustFerry("job", "show", "pipe1").stdout, "steps:", "prep", "train", "report", "cpu-cluster")

	// job download: the pipeline's own output and every step's.
	dl := t.TempDir()
	s.mustFerry("job", "download", "pipe1", "--download-path", dl)
	for path, want := range map[string]string{
		"named-outputs/final_report/report.txt": "report of model(lr=0.5, rows=3)",
		"prep/named-outputs/clean/clean.txt":    "a\nb\nc\n",
		"train/named-outputs/model/model.txt":   "model(lr=0.5, rows=3)",
	} {
		got, err := os.ReadFile(filepath.Join(dl, path))
		if err != nil || !strings.Contains(string(got), want) {
			t.Errorf("%s: %q, %v; want %q", path, got, err, want)
		}
	}

	// The same pipeline again: every step reuses pipe1's, runs nothing,
	// and says so.
	r = s.mustFerry("job", "create", "-f", file, "--name", "pipe2", "--stream")
	mustContain(t, "reuse", r.stderr, "step prep: Completed, reused the outputs of pipe1-prep")
	p2 := s.showPipeline("pipe2")
	for _, step := range []string{"prep", "train", "report"} {
		if status, _, reused, _, _ := p2.step(t, step); status != "Completed" || reused != "pipe1-"+step {
			t.Errorf("pipe2 step %s: %s, reused %q; want Completed, reused pipe1-%s", step, status, reused, step)
		}
	}
	mustContain(t, "reused step's log", s.mustFerry("job", "stream", "pipe2-train").stdout, "reused the outputs of job pipe1-train")
	mustContain(t, "reused in job show", s.mustFerry("job", "show", "pipe2").stdout, "reused pipe1-prep")

	// A changed input runs the steps that see it; force_rerun runs all.
	r = s.mustFerry("job", "create", "-f", file, "--name", "pipe3", "--set", "settings.force_rerun=true", "--stream")
	p3 := s.showPipeline("pipe3")
	for _, step := range []string{"prep", "train", "report"} {
		if status, _, reused, _, _ := p3.step(t, step); status != "Completed" || reused != "" {
			t.Errorf("pipe3 (force_rerun) step %s: %s, reused %q; want it run again", step, status, reused)
		}
	}
	runs, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(runs), "prep ran\ntrain ran\nprep ran\ntrain ran\n"; got != want {
		t.Errorf("steps ran:\n%s\nwant once for pipe1 and once for pipe3 (force_rerun), never for pipe2 (reused):\n%s", got, want)
	}
	s.mustFerry("job", "create", "-f", file, "--name", "pipe4", "--set", "inputs.learning_rate=0.25", "--stream")
	p4 := s.showPipeline("pipe4")
	if _, _, reused, _, _ := p4.step(t, "prep"); reused == "" {
		t.Errorf("pipe4: prep, whose inputs did not change, was run again")
	}
	if _, _, reused, _, _ := p4.step(t, "train"); reused != "" {
		t.Errorf("pipe4: train, whose lr changed, reused %s", reused)
	}
}

func TestPipelineStepFailure(t *testing.T) {
	s := startServer(t)
	pipeline := func(cont bool) string {
		c := "false"
		if cont {
			c = "true"
		}
		return `type: pipeline
settings:
  continue_on_step_failure: ` + c + `
jobs:
  bad:
    command: echo failing; exit 3
    outputs: {o: {type: uri_folder}}
  slow:
    command: sleep 4; echo slow done
  after_bad:
    command: ls ${{inputs.x}}
    inputs:
      x: ${{parent.jobs.bad.outputs.o}}
`
	}
	// Without continue_on_step_failure the failure stops the pipeline:
	// the running step is canceled and the one after is never started.
	r := s.ferry("job", "create", "-f", jobFile(t, pipeline(false), nil), "--name", "stop", "--stream")
	if r.code == 0 {
		t.Fatalf("a failed pipeline exited 0: %s", r)
	}
	p := s.waitPipeline("stop")
	if p.Status != "Failed" || !strings.Contains(p.StatusReason, "bad") {
		t.Errorf("stop: %s (%s), want Failed naming step bad", p.Status, p.StatusReason)
	}
	for step, want := range map[string]string{"bad": "Failed", "slow": "Canceled", "after_bad": "Canceled"} {
		if status, _, _, _, reason := p.step(t, step); status != want {
			t.Errorf("stop: step %s is %s (%s), want %s", step, status, reason, want)
		}
	}

	// With it, the independent step completes and the dependent one is
	// skipped; the pipeline still fails.
	s.ferry("job", "create", "-f", jobFile(t, pipeline(true), nil), "--name", "cont", "--stream")
	p = s.waitPipeline("cont")
	if p.Status != "Failed" {
		t.Errorf("cont: %s, want Failed", p.Status)
	}
	for step, want := range map[string]string{"bad": "Failed", "slow": "Completed", "after_bad": "Skipped"} {
		if status, _, _, _, reason := p.step(t, step); status != want {
			t.Errorf("cont: step %s is %s (%s), want %s", step, status, reason, want)
		}
	}
}

func TestPipelineCancelCascades(t *testing.T) {
	s := startServer(t)
	file := jobFile(t, `type: pipeline
jobs:
  long:
    command: sleep 300 > ${{outputs.o}}/x
    outputs: {o: {type: uri_folder}}
  next:
    command: ls ${{inputs.x}}
    inputs: {x: "${{parent.jobs.long.outputs.o}}"}
`, nil)
	s.mustFerry("job", "create", "-f", file, "--name", "cx")
	s.waitStatus("cx-long", "Running")
	if p := s.showPipeline("cx"); p.Status != "Running" {
		t.Fatalf("cx: %s while its step runs", p.Status)
	}
	s.mustFerry("job", "cancel", "cx")
	p := s.waitPipeline("cx")
	if p.Status != "Canceled" {
		t.Errorf("cx: %s, want Canceled", p.Status)
	}
	for step, want := range map[string]string{"long": "Canceled", "next": "Canceled"} {
		if status, _, _, _, reason := p.step(t, step); status != want {
			t.Errorf("step %s is %s (%s), want %s", step, status, reason, want)
		}
	}
}

func TestPipelineSurvivesServerKill(t *testing.T) {
	s := startServer(t)
	counter := jobWritableFile(t, "runs.txt")
	file := jobFile(t, `type: pipeline
jobs:
  first:
    command: echo first >> `+counter+`; sleep 3; echo one > ${{outputs.o}}/f
    outputs: {o: {type: uri_folder}}
  second:
    command: echo second >> `+counter+`; cat ${{inputs.x}}/f
    inputs: {x: "${{parent.jobs.first.outputs.o}}"}
  third:
    command: echo third >> `+counter+`; cat ${{inputs.x}}/f
    inputs: {x: "${{parent.jobs.first.outputs.o}}"}
`, nil)
	s.mustFerry("job", "create", "-f", file, "--name", "kp")
	s.waitStatus("kp-first", "Running")
	s.kill9()
	time.Sleep(4 * time.Second) // the step ends while no server runs
	s.start()
	p := s.waitPipeline("kp")
	if p.Status != "Completed" {
		t.Fatalf("kp after a kill -9: %s (%s) %+v\nserver:\n%s", p.Status, p.StatusReason, p.Steps, s.output)
	}
	runs, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(runs))
	if len(lines) != 3 || strings.Count(string(runs), "first") != 1 || strings.Count(string(runs), "second") != 1 || strings.Count(string(runs), "third") != 1 {
		t.Errorf("steps ran %q, want each once", lines)
	}
}

// TestPipelineExample runs docs/pipelines.md's example as the page says.
func TestPipelineExample(t *testing.T) {
	s := startServer(t, "--node-lease", "6s")
	dir, err := filepath.Abs("../../examples/pipelines")
	if err != nil {
		t.Fatal(err)
	}
	s.mustFerry("compute", "create", "-f", clusterFile(t, "cpu-cluster", "Standard_DS1_v2", 1, 30))
	s.mustFerry("component", "create", "-f", filepath.Join(dir, "components", "train.yml"))
	r := s.ferry("job", "create", "-f", filepath.Join(dir, "pipeline.yml"), "--name", "example", "--stream")
	if r.code != 0 {
		t.Fatalf("the example pipeline: %s\nserver:\n%s", r, s.output)
	}
	mustContain(t, "example's log", r.stdout, "[prep] prepared 6 rows", "[train] trained on 6 rows", "[evaluate] mean 7.0 of 6 rows")
	show := s.mustFerry("job", "show", "example").stdout
	mustContain(t, "example's steps", show, "prep", "Completed on local", "train", "Completed on cpu-cluster")
	dl := t.TempDir()
	s.mustFerry("job", "download", "example", "--download-path", dl)
	got, err := os.ReadFile(filepath.Join(dl, "named-outputs", "report", "report.txt"))
	if err != nil || !strings.Contains(string(got), "mean 7.0 of 6 rows") {
		t.Errorf("downloaded report: %q, %v", got, err)
	}
}

func TestComponentVersions(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	comp := "name: greet\ntype: command\ninputs:\n  who: {type: string, default: world}\ncode: ./src\ncommand: sh greet.sh ${{inputs.who}}\n"
	writeFiles(t, dir, map[string]string{"greet.yml": comp, "src/greet.sh": "echo hello $1\n"})
	file := filepath.Join(dir, "greet.yml")
	mustContain(t, "first", s.mustFerry("component", "create", "-f", file).stdout, "azureml:greet:1")
	// The same content again is the same version, and sends nothing.
	r := s.mustFerry("component", "create", "-f", file)
	mustContain(t, "again", r.stdout, "azureml:greet:1")
	mustContain(t, "again, uploads", r.stderr, "nothing to upload")
	// Changed code is the next version; a version never changes.
	writeFiles(t, dir, map[string]string{"src/greet.sh": "echo hi $1\n"})
	mustContain(t, "changed", s.mustFerry("component", "create", "-f", file).stdout, "azureml:greet:2")
	r = s.ferry("component", "create", "-f", file, "--version", "1")
	if r.code == 0 || !strings.Contains(r.stderr, "versions do not change") {
		t.Errorf("other content under version 1: %s", r)
	}
	mustContain(t, "show latest", s.mustFerry("component", "show", "greet").stdout, "azureml:greet:2", "input who:", "default world")
	mustContain(t, "show version", s.mustFerry("component", "show", "greet", "--version", "1").stdout, "azureml:greet:1")
	r = s.ferry("component", "show", "gret")
	if r.code == 0 || !strings.Contains(r.stderr, "did you mean greet") {
		t.Errorf("a misspelled component: %s", r)
	}
	// A pipeline names it by version and by @latest.
	pipe := jobFile(t, `type: pipeline
jobs:
  old:
    component: azureml:greet:1
  new:
    component: azureml:greet@latest
    inputs: {who: ferry}
`, nil)
	r = s.mustFerry("job", "create", "-f", pipe, "--name", "greetings", "--stream")
	mustContain(t, "versions run", r.stdout, "[old] hello world", "[new] hi ferry")
}
