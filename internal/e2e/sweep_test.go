package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// logpy is the trials' helper: it logs metrics through the job's run
// token, as a training script does through Ferry's API.
const logpy = `
import json, os, urllib.request
def log(name, value, step):
    req = urllib.request.Request(os.environ["FERRY_API_URL"] + "/v1/jobs/" + os.environ["FERRY_JOB_ID"] + "/metrics",
        data=json.dumps({"name": name, "value": value, "step": step}).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["FERRY_RUN_TOKEN"], "Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
`

// sweepJob is the JSON form of a sweep job as `job show -o json` prints it.
type sweepJob struct {
	job
	Sweep struct {
		PrimaryMetric string `json:"primary_metric"`
		Best          string `json:"best_trial"`
		Trials        []struct {
			Name         string         `json:"name"`
			Index        int            `json:"index"`
			Status       string         `json:"status"`
			StatusReason string         `json:"status_reason"`
			Params       map[string]any `json:"params"`
			Objective    *float64       `json:"objective"`
			Rank         int            `json:"rank"`
		} `json:"trials"`
	} `json:"sweep"`
}

func (s *server) showSweep(name string) sweepJob {
	s.t.Helper()
	r := s.mustFerry("job", "show", name, "-o", "json")
	var j sweepJob
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		s.t.Fatalf("job show -o json: %v\n%s", err, r.stdout)
	}
	return j
}

// waitSweep waits (up to two minutes) for a sweep to end and returns it.
func (s *server) waitSweep(name string) sweepJob {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		j := s.showSweep(name)
		if j.Status == "Completed" || j.Status == "Failed" || j.Status == "Canceled" {
			return j
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("sweep %s is still %s: %+v", name, j.Status, j.Sweep.Trials)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitTrials waits until a sweep has created n trials.
func (s *server) waitTrials(name string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(s.showSweep(name).Sweep.Trials) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("sweep %s has not made %d trials", name, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Grid sampling runs every combination once; the bandit policy cancels
// the trials whose loss is far from the best at the same interval, naming
// the policy; `job show` ranks the trials and names the best.
func TestSweepGridWithBandit(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	file := jobFile(t, `type: sweep
trial:
  code: .
  command: python3 train.py --loss ${{search_space.loss}} --tag ${{search_space.tag}}
  environment: {user_managed: true}
sampling_algorithm: grid
search_space:
  loss: {type: choice, values: [0.1, 5]}
  tag: {type: choice, values: [a, b]}
objective: {primary_metric: loss, goal: minimize}
early_termination: {type: bandit, slack_factor: 0.2, evaluation_interval: 1}
limits: {max_concurrent_trials: 2}
`, map[string]string{"ferrylog.py": logpy, "train.py": `
import sys, time
from ferrylog import log
loss = float(sys.argv[2])
log("loss", loss, 0)
if loss > 1:
    # A bad trial waits to be cut; were it not, it would complete.
    time.sleep(60)
    log("loss", loss, 1)
print("done", sys.argv[1:])
`})
	// --stream follows the trials and exits as the sweep ends.
	r := s.mustFerry("job", "create", "-f", file, "--name", "grid1", "--stream")
	mustContain(t, "streamed progress", r.stdout, "trial grid1_0: Completed, loss = 0.1", "trial grid1_2: Canceled, loss = 5")
	mustContain(t, "final summary", r.stderr, "job grid1: Completed")
	name := "grid1"
	j := s.waitSweep(name)
	if j.Status != "Completed" {
		t.Fatalf("sweep %s: %s (%s)", name, j.Status, j.StatusReason)
	}
	var combos []string
	for _, tr := range j.Sweep.Trials {
		combos = append(combos, fmt.Sprintf("%v %v", tr.Params["loss"], tr.Params["tag"]))
		bad := tr.Params["loss"].(float64) > 1
		switch {
		case bad && (tr.Status != "Canceled" || !strings.Contains(tr.StatusReason, "bandit policy")):
			t.Errorf("trial %s (loss %v): %s (%s); want Canceled by the bandit policy", tr.Name, tr.Params["loss"], tr.Status, tr.StatusReason)
		case !bad && tr.Status != "Completed":
			t.Errorf("trial %s (loss %v): %s (%s); want Completed", tr.Name, tr.Params["loss"], tr.Status, tr.StatusReason)
		}
	}
	sort.Strings(combos)
	if want := []string{"0.1 a", "0.1 b", "5 a", "5 b"}; !slices.Equal(combos, want) {
		t.Fatalf("grid trials %v, want every combination %v", combos, want)
	}
	if j.Sweep.Best != "grid1_0" || j.Sweep.Trials[0].Name != "grid1_0" || j.Sweep.Trials[0].Rank != 1 {
		t.Fatalf("best %q, first ranked %+v; want grid1_0 (loss 0.1, first of equals)", j.Sweep.Best, j.Sweep.Trials[0])
	}
	mustContain(t, "sweep reason", j.StatusReason, "4 trials", "best trial grid1_0: loss = 0.1")
	table := s.mustFerry("job", "show", name).stdout
	mustContain(t, "job show", table, "best trial:", "grid1_0", "Canceled (early termination)", "loss=5 tag=a")
	// A cut trial's own record says why.
	cut := s.show("grid1_2")
	mustContain(t, "cut trial", cut.StatusReason, "canceled by sweep grid1's early termination (bandit policy)")
}

// Random sampling with a seed gives the same trials to two sweeps; the
// sweep keeps to max_total_trials and max_concurrent_trials.
func TestSweepRandomSeedAndLimits(t *testing.T) {
	s := startServer(t, "--local-capacity", "3")
	file := jobFile(t, `type: sweep
trial:
  code: .
  command: python3 train.py ${{search_space.lr}} ${{search_space.layers}} ${{search_space.opt}}
  environment: {user_managed: true}
sampling_algorithm: {type: random, seed: 7}
search_space:
  lr: {type: loguniform, min_value: -7, max_value: -1}
  layers: {type: randint, upper: 8}
  opt: {type: choice, values: [sgd, adam]}
objective: {primary_metric: acc, goal: maximize}
limits: {max_total_trials: 4, max_concurrent_trials: 1}
`, map[string]string{"ferrylog.py": logpy, "train.py": `
import sys
from ferrylog import log
lr, layers = float(sys.argv[1]), int(sys.argv[2])
log("acc", lr * 100 + layers, 0)
`})
	a := strings.TrimSpace(s.mustFerry("job", "create", "-f", file, "--name", "seed-a").stdout)
	b := strings.TrimSpace(s.mustFerry("job", "create", "-f", file, "--name", "seed-b").stdout)
	ja, jb := s.waitSweep(a), s.waitSweep(b)
	params := func(j sweepJob) map[int]string {
		out := map[int]string{}
		for _, tr := range j.Sweep.Trials {
			out[tr.Index] = fmt.Sprint(tr.Params)
		}
		return out
	}
	pa, pb := params(ja), params(jb)
	if len(pa) != 4 || len(pb) != 4 {
		t.Fatalf("trials: %d and %d, want max_total_trials 4 each", len(pa), len(pb))
	}
	for i := range 4 {
		if pa[i] != pb[i] {
			t.Errorf("trial %d: %s vs %s; one seed must give the same trials", i, pa[i], pb[i])
		}
	}
	if ja.Status != "Completed" || ja.Sweep.Best == "" {
		t.Fatalf("sweep %s: %s, best %q", a, ja.Status, ja.Sweep.Best)
	}
	// max_concurrent_trials 1: each trial started after the one before ended.
	var prevEnd *time.Time
	for i := range 4 {
		tr := s.show(fmt.Sprintf("%s_%d", a, i))
		if tr.Status != "Completed" {
			t.Fatalf("trial %d: %s (%s)", i, tr.Status, tr.StatusReason)
		}
		if prevEnd != nil && tr.Started.Before(*prevEnd) {
			t.Errorf("trial %d started at %v, before trial %d ended at %v", i, tr.Started, i-1, prevEnd)
		}
		prevEnd = tr.Ended
	}
}

// A sweep survives kill -9 of its server: trials running then finish, the
// restarted server goes on, and every trial exists once.
func TestSweepSurvivesServerKill(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	file := jobFile(t, `type: sweep
trial:
  code: .
  command: python3 train.py ${{search_space.x}}
  environment: {user_managed: true}
sampling_algorithm: {type: random, seed: 11}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
objective: {primary_metric: y, goal: maximize}
limits: {max_total_trials: 5, max_concurrent_trials: 2}
`, map[string]string{"ferrylog.py": logpy, "train.py": `
import sys, time
from ferrylog import log
time.sleep(1.5)
log("y", float(sys.argv[1]), 0)
`})
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file, "--name", "killed").stdout)
	s.waitTrials(name, 2)
	s.waitStatus("killed_1", "Running")
	s.kill9()
	s.start()
	j := s.waitSweep(name)
	if j.Status != "Completed" || len(j.Sweep.Trials) != 5 {
		t.Fatalf("sweep: %s (%s), %d trials", j.Status, j.StatusReason, len(j.Sweep.Trials))
	}
	code, body := s.call("GET", "/v1/jobs", s.token, nil)
	if code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	var all []job
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range all {
		if strings.HasPrefix(x.Name, "killed_") {
			names = append(names, x.Name)
		}
	}
	sort.Strings(names)
	if want := []string{"killed_0", "killed_1", "killed_2", "killed_3", "killed_4"}; !slices.Equal(names, want) {
		t.Fatalf("trial jobs %v, want %v", names, want)
	}
	for _, tr := range j.Sweep.Trials {
		if tr.Status != "Completed" || tr.Objective == nil {
			t.Errorf("trial %s: %s (%s), objective %v", tr.Name, tr.Status, tr.StatusReason, tr.Objective)
		}
	}
}

// Canceling a sweep cancels its trials, queued and running.
func TestSweepCancelCascades(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	file := jobFile(t, `type: sweep
trial:
  command: sleep 120 # ${{search_space.x}}
  environment: {user_managed: true}
search_space:
  x: {type: choice, values: [1, 2, 3]}
sampling_algorithm: grid
objective: {primary_metric: y, goal: maximize}
`, nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file, "--name", "cancelme").stdout)
	s.waitTrials(name, 3)
	s.waitStatus("cancelme_0", "Running")
	s.waitStatus("cancelme_2", "Queued")
	s.mustFerry("job", "cancel", name)
	j := s.waitSweep(name)
	if j.Status != "Canceled" {
		t.Fatalf("sweep %s: %s", name, j.Status)
	}
	for _, tr := range j.Sweep.Trials {
		if tr.Status != "Canceled" || !strings.Contains(tr.StatusReason, "sweep cancelme") {
			t.Errorf("trial %s: %s (%s); want Canceled by the sweep", tr.Name, tr.Status, tr.StatusReason)
		}
	}
}

// Bad search spaces are refused before anything is uploaded, naming the
// field.
func TestSweepRefusesBadSearchSpace(t *testing.T) {
	s := startServer(t)
	for _, c := range []struct{ space, field string }{
		{"lr: {type: uniform, min_value: 1, max_value: 0.5}", "search_space.lr.max_value"},
		{"lr: {type: normal, mu: 0}", "search_space.lr.sigma"},
		{"lr: {type: beta, a: 1}", "search_space.lr.a"},
	} {
		file := jobFile(t, "type: sweep\ntrial:\n  command: echo ${{search_space.lr}}\n  environment: {user_managed: true}\nobjective: {primary_metric: y, goal: maximize}\nsearch_space:\n  "+c.space+"\n", nil)
		r := s.ferry("job", "create", "-f", file)
		if r.code == 0 || !strings.Contains(r.stderr, c.field) {
			t.Errorf("%s: want a refusal naming %s; got %s", c.space, c.field, r)
		}
	}
	file := jobFile(t, "type: sweep\nsampling_algorithm: grid\ntrial:\n  command: echo ${{search_space.lr}}\n  environment: {user_managed: true}\nobjective: {primary_metric: y, goal: maximize}\nsearch_space:\n  lr: {type: uniform, min_value: 0, max_value: 1}\n", nil)
	r := s.ferry("job", "create", "-f", file)
	if r.code == 0 || !strings.Contains(r.stderr, "search_space.lr.type") || !strings.Contains(r.stderr, "grid sampling takes only choice") {
		t.Errorf("grid with uniform: %s", r)
	}
}

// Bayesian sampling learns from the trials that ended: with one trial at
// a time and a seed, two sweeps see the same results and so choose the
// same trials, those after the random start included. A running sweep's
// reason shows its progress and its best trial so far.
func TestSweepBayesianReproducible(t *testing.T) {
	s := startServer(t, "--local-capacity", "2")
	file := jobFile(t, `type: sweep
trial:
  code: .
  command: python3 train.py ${{search_space.x}} ${{search_space.opt}}
  environment: {user_managed: true}
sampling_algorithm: {type: bayesian, seed: 5}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
  opt: {type: choice, values: [sgd, adam]}
objective: {primary_metric: loss, goal: minimize}
limits: {max_total_trials: 8, max_concurrent_trials: 1}
`, map[string]string{"ferrylog.py": logpy, "train.py": `
import sys
from ferrylog import log
x, opt = float(sys.argv[1]), sys.argv[2]
log("loss", (x - 0.3) ** 2 + (0 if opt == "adam" else 0.1), 0)
`})
	a := strings.TrimSpace(s.mustFerry("job", "create", "-f", file, "--name", "bayes-a").stdout)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		j := s.showSweep(a)
		if j.Status != "Running" || time.Now().After(deadline) {
			t.Fatalf("sweep %s: %s (%s); want it Running with a best trial", a, j.Status, j.StatusReason)
		}
		if strings.Contains(j.StatusReason, "best trial") {
			mustContain(t, "running sweep's reason", j.StatusReason, "of 8 trials started", "unfinished; best trial bayes-a_0: loss = ")
			break
		}
	}
	b := strings.TrimSpace(s.mustFerry("job", "create", "-f", file, "--name", "bayes-b").stdout)
	ja, jb := s.waitSweep(a), s.waitSweep(b)
	byIndex := func(j sweepJob) map[int]string {
		out := map[int]string{}
		for _, tr := range j.Sweep.Trials {
			out[tr.Index] = fmt.Sprint(tr.Params)
		}
		return out
	}
	pa, pb := byIndex(ja), byIndex(jb)
	if ja.Status != "Completed" || len(pa) != 8 || len(pb) != 8 {
		t.Fatalf("sweeps: %s with %d trials, %s with %d", ja.Status, len(pa), jb.Status, len(pb))
	}
	for i := range 8 {
		if pa[i] != pb[i] {
			t.Errorf("trial %d: %s vs %s", i, pa[i], pb[i])
		}
	}
}
