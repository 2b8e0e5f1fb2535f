package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sweepPipeline is Azure's pipeline_with_hyperparameter_sweep in small: a
// step makes the data, a sweep step (trial: a component file) tries
// three learning rates on it, its lr bound to the component's input of
// that name as Azure binds it, and a later step takes the best trial's
// model, which is also the pipeline's output. The prep step's output and
// the pipeline's register as data assets (name:, version:).
const sweepPipeline = `$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json
type: pipeline
display_name: pipeline_with_hyperparameter_sweep
settings:
  default_compute: azureml:local
inputs:
  raw: {type: uri_folder, path: ./data}
outputs:
  best_model: {type: uri_folder, name: best-model, version: "1"}
jobs:
  prep:
    type: command
    command: cp ${{inputs.raw}}/rows.txt ${{outputs.rows}}/rows.txt
    inputs:
      raw: ${{parent.inputs.raw}}
    outputs:
      rows: {type: uri_folder, name: prepared-rows}
  sweep_step:
    type: sweep
    trial: ./components/train.yml
    inputs:
      data: ${{parent.jobs.prep.outputs.rows}}
      epochs: 3
    outputs:
      model: ${{parent.outputs.best_model}}
    sampling_algorithm: grid
    search_space:
      lr:
        type: choice
        values: [0.1, 0.5, 0.3]
    objective:
      goal: maximize
      primary_metric: acc
    limits:
      max_total_trials: 3
      max_concurrent_trials: 2
      timeout: 600
      trial_timeout: 120
  predict_step:
    type: command
    command: echo "best model lr $(cat ${{inputs.model}}/model.txt)"
    inputs:
      model: ${{parent.jobs.sweep_step.outputs.model}}
`

// TestPipelineSweepStep runs a pipeline whose middle step is a sweep of
// real python3 trials that log a metric: the sweep step's outputs are its
// best trial's, the step after it reads them, and a resubmit reuses the
// sweep step.
func TestPipelineSweepStep(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"pipeline.yml":               sweepPipeline,
		"data/rows.txt":              "a\nb\nc\nd\n",
		"components/train.yml":       sweepComponent,
		"components/src/ferrylog.py": logpy,
		"components/src/train.py": `
import argparse, os
from ferrylog import log
p = argparse.ArgumentParser()
p.add_argument("--data"); p.add_argument("--lr", type=float); p.add_argument("--epochs", type=int)
p.add_argument("--note", default="none"); p.add_argument("--model")
a = p.parse_args()
rows = len(open(os.path.join(a.data, "rows.txt")).read().split())
for e in range(a.epochs):
    log("acc", a.lr * (e + 1) * rows, e)
open(os.path.join(a.model, "model.txt"), "w").write(str(a.lr))
print("trained lr=%s epochs=%d rows=%d" % (a.lr, a.epochs, rows))
`,
	})
	file := filepath.Join(dir, "pipeline.yml")
	r := s.ferry("job", "create", "-f", file, "--name", "swp", "--stream")
	if r.code != 0 {
		t.Fatalf("the sweep pipeline: %s\nserver:\n%s", r, s.output)
	}
	// A sweep step has no log of its own: the stream tells its trials'
	// progress and, at its end, the best trial.
	mustContain(t, "the stream", r.stdout, "[predict_step] best model lr 0.5")
	mustContain(t, "the stream's steps", r.stderr, "step sweep_step: Running: ", "step sweep_step: Completed: 3 trials (3 completed); best trial swp-sweep_step_1: acc = 6")
	p := s.waitPipeline("swp")
	if p.Status != "Completed" {
		t.Fatalf("pipeline swp: %s (%s), steps %+v", p.Status, p.StatusReason, p.Steps)
	}
	_, sweepJobName, _, _, _ := p.step(t, "sweep_step")
	sw := s.showSweep(sweepJobName)
	if sw.Status != "Completed" || len(sw.Sweep.Trials) != 3 {
		t.Fatalf("sweep step %s: %s (%s), trials %+v; want Completed with 3 trials", sweepJobName, sw.Status, sw.StatusReason, sw.Sweep.Trials)
	}
	best := sw.Sweep.Trials[0]
	if best.Name != sw.Sweep.Best || best.Params["lr"] != 0.5 || best.Objective == nil || *best.Objective != 0.5*3*4 {
		t.Errorf("best trial %+v (best %s); want lr 0.5 with acc 6 (lr × 3 epochs × 4 rows)", best, sw.Sweep.Best)
	}
	_, predictJob, _, _, _ := p.step(t, "predict_step")
	mustContain(t, "the step after the sweep", s.mustFerry("job", "stream", predictJob).stdout, "best model lr 0.5")
	if p.Outputs == nil || p.Outputs.Named["best_model"] == "" {
		t.Errorf("pipeline outputs %+v; want best_model, the best trial's model", p.Outputs)
	}
	dl := t.TempDir()
	s.mustFerry("job", "download", "swp", "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "named-outputs", "best_model", "model.txt")); err != nil || string(got) != "0.5" {
		t.Errorf("downloaded best_model/model.txt: %q, %v; want 0.5", got, err)
	}

	dl = t.TempDir()
	s.mustFerry("job", "download", sweepJobName, "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "named-outputs", "model", "model.txt")); err != nil || string(got) != "0.5" {
		t.Errorf("the sweep's downloaded model/model.txt: %q, %v; want 0.5, the best trial's", got, err)
	}
	mustContain(t, "the registered best model", s.mustFerry("data", "show", "best-model@latest").stdout, "version:", "1", "output best_model of job swp")
	mustContain(t, "the registered step output", s.mustFerry("data", "show", "prepared-rows@latest").stdout, "output rows of job swp-prep")
	// The pipeline has no log: its history says what was registered.
	mustContain(t, "the pipeline's history", s.mustFerry("job", "show", "swp").stdout, "output best_model registered as data asset azureml:best-model:1")
	dl = t.TempDir()
	s.mustFerry("data", "download", "best-model", "--version", "1", "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "best-model", "model.txt")); err != nil || string(got) != "0.5" {
		t.Errorf("the registered best model's model.txt: %q, %v; want 0.5", got, err)
	}

	// The same pipeline again reuses the sweep: same trial, search space
	// and inputs.
	s.mustFerry("job", "create", "-f", file, "--name", "swp2", "--stream")
	p2 := s.waitPipeline("swp2")
	if p2.Status != "Completed" {
		t.Fatalf("pipeline swp2: %s (%s)", p2.Status, p2.StatusReason)
	}
	if _, _, from, _, _ := p2.step(t, "sweep_step"); from != sweepJobName {
		t.Errorf("resubmitted sweep step reused %q; want %s", from, sweepJobName)
	}
	// So is the step after it: its input is the same best model.
	if _, _, from, _, _ := p2.step(t, "predict_step"); from != predictJob {
		t.Errorf("the step after a reused sweep reused %q; want %s", from, predictJob)
	}

	// A random sweep without a seed gets a new one at each submit: its
	// trials would differ, so it is not reused.
	for _, name := range []string{"swr1", "swr2"} {
		s.mustFerry("job", "create", "-f", file, "--name", name, "--set", "jobs.sweep_step.sampling_algorithm=random", "--stream")
		pr := s.waitPipeline(name)
		status, _, from, _, _ := pr.step(t, "sweep_step")
		if pr.Status != "Completed" || status != "Completed" || from != "" {
			t.Errorf("%s: %s, its unseeded random sweep step %s reused %q; want Completed and run, not reused", name, pr.Status, status, from)
		}
	}

	// A sweep whose trials never log its primary metric has no best
	// trial, so no outputs: the step bound to them fails, saying why.
	r = s.ferry("job", "create", "-f", file, "--name", "swp3", "--set", "jobs.sweep_step.objective.primary_metric=loss")
	if r.code != 0 {
		t.Fatalf("swp3: %s", r)
	}
	p3 := s.waitPipeline("swp3")
	status, _, _, _, reason := p3.step(t, "predict_step")
	if p3.Status != "Failed" || status != "Failed" || !strings.Contains(reason, "no completed trial logged the primary metric") {
		t.Errorf("swp3: %s, predict_step %s (%s); want both Failed, saying no trial logged the metric", p3.Status, status, reason)
	}
}

// TestPipelineRegistryComponent: a step naming a component in an Azure
// registry (azureml://registries/R/components/C/versions/V, or
// .../labels/latest) runs the workspace's component C, with a note that
// says so; one not registered is refused before anything runs, naming the
// reference and `ferry component create`.
func TestPipelineRegistryComponent(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"greet.yml":    "name: greet\ntype: command\ninputs:\n  who: {type: string, default: world}\ncode: ./src\ncommand: sh greet.sh ${{inputs.who}}\n",
		"src/greet.sh": "echo hello $1\n",
	})
	pipe := jobFile(t, `type: pipeline
jobs:
  pinned:
    component: azureml://registries/azureml/components/greet/versions/1
  newest:
    component: azureml://registries/azureml/components/greet/labels/latest
    inputs: {who: registry}
`, nil)
	r := s.ferry("job", "create", "-f", pipe, "--name", "reg0")
	if r.code == 0 {
		t.Fatalf("a pipeline naming an unregistered registry component was accepted: %s", r)
	}
	mustContain(t, "unregistered registry component", r.stderr, "jobs.newest.component", "azureml://registries/azureml/components/greet/labels/latest",
		"component greet is not registered", "ferry component create")
	s.mustFerry("component", "create", "-f", filepath.Join(dir, "greet.yml"))
	r = s.mustFerry("job", "create", "-f", pipe, "--name", "reg1", "--stream")
	mustContain(t, "registry components run", r.stdout, "[pinned] hello world", "[newest] hello registry")
	mustContain(t, "the note", r.stderr, "Ferry has no registries", "the workspace's component greet (version 1)")
	if r := s.ferry("job", "show", "reg1"); !strings.Contains(r.stdout, "Completed") {
		t.Errorf("reg1: %s", r)
	}
}

// TestPipelineSweepStepCancel: canceling a pipeline cancels its sweep
// step, which cancels the trials running.
func TestPipelineSweepStepCancel(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	file := jobFile(t, `type: pipeline
jobs:
  tune:
    type: sweep
    trial:
      type: command
      inputs: {lr: {type: number}}
      command: sleep 300 # ${{inputs.lr}}
    search_space:
      lr: {type: choice, values: [1, 2]}
    sampling_algorithm: grid
    objective: {primary_metric: acc, goal: maximize}
`, nil)
	s.mustFerry("job", "create", "-f", file, "--name", "cs")
	deadline := time.Now().Add(time.Minute)
	for _, job, _, _, _ := s.showPipeline("cs").step(t, "tune"); job == ""; _, job, _, _, _ = s.showPipeline("cs").step(t, "tune") {
		if time.Now().After(deadline) {
			t.Fatal("the sweep step of cs has no job after a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.waitTrials("cs-tune", 2)
	s.waitStatus("cs-tune_0", "Running")
	s.waitStatus("cs-tune_1", "Running")
	s.mustFerry("job", "cancel", "cs")
	p := s.waitPipeline("cs")
	if status, _, _, _, reason := p.step(t, "tune"); p.Status != "Canceled" || status != "Canceled" {
		t.Errorf("cs: %s, step tune %s (%s); want both Canceled", p.Status, status, reason)
	}
	for _, trial := range []string{"cs-tune_0", "cs-tune_1"} {
		if j := s.showSweep(trial); j.Status != "Canceled" {
			t.Errorf("trial %s: %s, want Canceled", trial, j.Status)
		}
	}
}
