package e2e

import (
	"path/filepath"
	"testing"
)

// sweepComponent is a command component a sweep's trial names: the
// search space reaches its lr input through the sweep's inputs, epochs
// keeps its default, and its code is relative to the component file.
const sweepComponent = `$schema: https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json
name: sweeptrain
version: "1"
type: command
inputs:
  data: {type: uri_folder}
  lr: {type: number}
  epochs: {type: integer, default: "2"}
  note: {type: string, optional: true}
outputs:
  model: {type: uri_folder}
code: ./src
command: >-
  python3 train.py --data ${{inputs.data}} --lr ${{inputs.lr}} --epochs ${{inputs.epochs}}
  $[[--note ${{inputs.note}}]] --model ${{outputs.model}}
`

// TestSweepComponentTrial: a sweep whose trial is a component file, and
// then the same component registered (azureml:NAME:VERSION), runs a trial
// per value of the search space with the value bound to the component's
// input as Azure binds it (inputs: {lr: ${{search_space.lr}}}), the
// component's code and defaults, and ranks the trials.
func TestSweepComponentTrial(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"data/rows.txt":              "a\nb\nc\n",
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
log("acc", a.lr * a.epochs * rows, 0)
open(os.path.join(a.model, "model.txt"), "w").write(str(a.lr))
print("trained lr=%s epochs=%d rows=%d note=%s" % (a.lr, a.epochs, rows, a.note))
`,
		"sweep.yml": `$schema: https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json
type: sweep
trial: ./components/train.yml
compute: azureml:local
inputs:
  data: {type: uri_folder, path: ./data}
  lr: ${{search_space.lr}}
sampling_algorithm: grid
search_space:
  lr: {type: choice, values: [0.1, 0.5]}
objective: {primary_metric: acc, goal: maximize}
`,
		"registered.yml": `type: sweep
trial: azureml:sweeptrain:1
inputs:
  data: {type: uri_folder, path: ./data}
  lr: ${{search_space.lr}}
  epochs: 4
sampling_algorithm: grid
search_space:
  lr: {type: choice, values: [0.1, 0.5]}
objective: {primary_metric: acc, goal: maximize}
`,
	})
	r := s.ferry("job", "create", "-f", filepath.Join(dir, "sweep.yml"), "--set", "trial=./components/nope.yml")
	if r.code == 0 {
		t.Fatalf("a sweep naming a missing component file was accepted: %s", r)
	}
	mustContain(t, "missing component file", r.stderr, "trial", "nope.yml does not exist")
	r = s.mustFerry("job", "create", "-f", filepath.Join(dir, "sweep.yml"), "--name", "compsweep", "--stream")
	mustContain(t, "component sweep", r.stderr, "job compsweep: Completed")
	j := s.waitSweep("compsweep")
	if j.Status != "Completed" || len(j.Sweep.Trials) != 2 {
		t.Fatalf("sweep compsweep: %s (%s), trials %+v; want Completed with 2 trials", j.Status, j.StatusReason, j.Sweep.Trials)
	}
	best := j.Sweep.Trials[0]
	if best.Name != j.Sweep.Best || best.Params["lr"] != 0.5 || best.Objective == nil || *best.Objective != 0.5*2*3 {
		t.Errorf("best trial %+v (best %s); want lr 0.5 with acc 3 (lr × the default 2 epochs × 3 rows)", best, j.Sweep.Best)
	}
	mustContain(t, "trial log", s.mustFerry("job", "stream", best.Name).stdout, "trained lr=0.5 epochs=2 rows=3 note=none")

	// A sweep naming a registered component that is not there is refused.
	if r := s.ferry("job", "create", "-f", filepath.Join(dir, "registered.yml")); r.code == 0 {
		t.Fatalf("a sweep naming an unregistered component was accepted: %s", r)
	} else {
		mustContain(t, "unregistered component", r.stderr, "trial", "sweeptrain")
	}
	s.mustFerry("component", "create", "-f", filepath.Join(dir, "components", "train.yml"))
	s.mustFerry("job", "create", "-f", filepath.Join(dir, "registered.yml"), "--name", "regsweep")
	j = s.waitSweep("regsweep")
	if j.Status != "Completed" || len(j.Sweep.Trials) != 2 {
		t.Fatalf("sweep regsweep: %s (%s), trials %+v", j.Status, j.StatusReason, j.Sweep.Trials)
	}
	if best := j.Sweep.Trials[0]; best.Params["lr"] != 0.5 || best.Objective == nil || *best.Objective != 0.5*4*3 {
		t.Errorf("best trial of regsweep %+v; want lr 0.5 with acc 6 (epochs 4 from the sweep's inputs)", best)
	}
}
