package slurm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/google/go-cmp/cmp"
)

// hpc is a slurm compute with every sbatch-related field set.
func hpc() *spec.Compute {
	return &spec.Compute{Name: "hpc", Type: "slurm", Partition: "gpu", Account: "ml-lab", QOS: "normal",
		Constraint: "a100&ib", Reservation: "week", DefaultTimeLimit: 3600, WorkDir: "/shared/ferry",
		JobTierQOS: map[string]string{"spot": "scavenger"}, PriorityNice: map[string]int{"low": 1000}}
}

func TestOptionsMapTheJob(t *testing.T) {
	job := &spec.Job{Command: "python train.py",
		Resources:     &spec.Resources{InstanceCount: 2, Properties: map[string]any{"gpus": 4.0}},
		Distribution:  &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 4},
		Limits:        &spec.Limits{Timeout: 90},
		QueueSettings: &spec.QueueSettings{JobTier: "spot", Priority: "low"}}
	b := batch{compute: hpc(), attempts: []attempt{{launch: compute.Launch{Job: "train-1", Attempt: 2, Spec: job}, dir: "/shared/ferry/runs/train-1/2"}}}
	want := []string{
		"--job-name=train-1", "--chdir=/shared/ferry/runs/train-1/2", "--output=/shared/ferry/runs/train-1/2/slurm-%j.out",
		"--partition=gpu", "--nodes=2", "--ntasks-per-node=4", "--no-requeue",
		"--nice=1000", "--account=ml-lab", "--qos=scavenger", "--constraint=a100&ib", "--reservation=week",
		"--gres=gpu:4",
		"--time=7", // 90 s and 5 minutes to finish, in whole minutes
	}
	if diff := cmp.Diff(want, b.options()); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}

	// A plain job: one node, one task, the compute's QOS and default time
	// limit; tensorflow runs one process a node whatever it says.
	b.attempts[0].launch.Spec = &spec.Job{Command: "x", Distribution: &spec.Distribution{Type: "tensorflow", ProcessCountPerInstance: 3}}
	want = []string{
		"--job-name=train-1", "--chdir=/shared/ferry/runs/train-1/2", "--output=/shared/ferry/runs/train-1/2/slurm-%j.out",
		"--partition=gpu", "--nodes=1", "--ntasks-per-node=1", "--no-requeue",
		"--account=ml-lab", "--qos=normal", "--constraint=a100&ib", "--reservation=week", "--time=60",
	}
	if diff := cmp.Diff(want, b.options()); diff != "" {
		t.Errorf("options of a plain job (-want +got):\n%s", diff)
	}
	b.compute.DefaultTimeLimit = 0
	for _, o := range b.options() {
		if strings.HasPrefix(o, "--time") {
			t.Errorf("no time limit anywhere, yet %s", o)
		}
	}
}

func TestScriptIsValidShellWithoutTheToken(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("needs bash to check the script's syntax")
	}
	const token = "sekrit-run-token"
	for _, nodes := range []int{1, 3} {
		job := &spec.Job{Command: "x", Resources: &spec.Resources{InstanceCount: nodes},
			EnvironmentVariables: map[string]string{"QUOTED": `it's "$HOME" ` + "`x`\nline two"}}
		b := batch{compute: hpc(), attempts: []attempt{{launch: compute.Launch{Job: "j", Attempt: 1, APIURL: "http://api:8080", RunToken: token, Spec: job},
			dir: "/shared/ferry/runs/j/1"}}, path: "/shared/ferry/runs/j/1/job.sh", runner: []string{"/opt/ferry it's"}, cache: "/c", envCache: "/e"}
		s, err := b.script()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(s, token) {
			t.Fatalf("the script holds the run token:\n%s", s)
		}
		if out, err := exec.Command(bash, "-n", "-c", s).CombinedOutput(); err != nil {
			t.Fatalf("%d nodes: bash -n: %v: %s\n%s", nodes, err, out, s)
		}
		// The variable's value comes back exactly, through the shell.
		cut := strings.Index(s, "\nferry_runner() {")
		out, err := exec.Command(bash, "-c", s[:cut]+"\nprintf %s \"$QUOTED\"").Output()
		if err != nil || string(out) != job.EnvironmentVariables["QUOTED"] {
			t.Fatalf("QUOTED through the script = %q, %v", out, err)
		}
		for _, want := range []string{`'/opt/ferry it'\''s' 'runner' '--api' 'http://api:8080' '--job' 'j' '--attempt' '1' '--dir' "$FERRY_NODE_DIR"`, "'--cache' '/c' '--env-cache' '/e'"} {
			if !strings.Contains(s, want) {
				t.Errorf("%d nodes: the script lacks %s:\n%s", nodes, want, s)
			}
		}
		if multi := strings.Contains(s, "exec srun"); multi != (nodes > 1) {
			t.Errorf("%d nodes: srun in the script = %v", nodes, multi)
		}
	}
}

func TestAdmit(t *testing.T) {
	tg, err := New(Config{Compute: hpc(), Exe: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	ok := &spec.Job{Command: "x", Resources: &spec.Resources{InstanceCount: 4, Properties: map[string]any{"gpus": 8.0}},
		Distribution:  &spec.Distribution{Type: "mpi", ProcessCountPerInstance: 8},
		QueueSettings: &spec.QueueSettings{JobTier: "spot", Priority: "low"}}
	if err := tg.Admit(ok, &environment.Spec{}); err != nil {
		t.Errorf("Admit(multi-node GPU job) = %v", err)
	}
	for _, c := range []struct {
		name, field string
		job         *spec.Job
		env         *environment.Spec
	}{
		{"size", "resources.instance_type", &spec.Job{Command: "x", Resources: &spec.Resources{InstanceType: "Standard_NC6"}}, nil},
		{"shm", "resources", &spec.Job{Command: "x", Resources: &spec.Resources{ShmSize: "2g"}}, nil},
		{"image", "environment", &spec.Job{Command: "x"}, &environment.Spec{Kind: environment.KindImage, Image: "python:3.12"}},
		{"services", "services", &spec.Job{Command: "x", Services: map[string]spec.Service{"j": {Type: "jupyter_lab"}}}, nil},
		{"tier", "queue_settings.job_tier", &spec.Job{Command: "x", QueueSettings: &spec.QueueSettings{JobTier: "premium"}}, nil},
		{"priority", "queue_settings.priority", &spec.Job{Command: "x", QueueSettings: &spec.QueueSettings{Priority: "high"}}, nil},
	} {
		err := tg.Admit(c.job, c.env)
		if !errors.Is(err, compute.ErrNotSupported) || !strings.HasPrefix(err.Error(), c.field+":") {
			t.Errorf("%s: Admit = %v, want ErrNotSupported naming %s", c.name, err, c.field)
		}
	}
}

func TestStateMapping(t *testing.T) {
	three, sig := 3, 128+9
	for _, c := range []struct {
		row  jobRow
		want compute.EngineState
	}{
		{jobRow{State: "PENDING", Reason: "Resources"}, compute.EngineState{Phase: compute.PhasePending, Reason: "Resources"}},
		{jobRow{State: "PENDING", Reason: "QOSMaxJobsPerUserLimit"}, compute.EngineState{Phase: compute.PhasePending, Reason: "QOSMaxJobsPerUserLimit"}},
		{jobRow{State: "CONFIGURING", Reason: "None"}, compute.EngineState{Phase: compute.PhasePending, Reason: "CONFIGURING"}},
		{jobRow{State: "RUNNING", Reason: "None"}, compute.EngineState{Phase: compute.PhaseRunning, Reason: "RUNNING"}},
		{jobRow{State: "COMPLETING"}, compute.EngineState{Phase: compute.PhaseRunning, Reason: "COMPLETING"}},
		{jobRow{State: "COMPLETED", Status: "0"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "COMPLETED", Outcome: "Completed", ExitCode: new(int)}},
		{jobRow{State: "FAILED", Status: "768"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "FAILED", Outcome: "Failed", ExitCode: &three}},
		{jobRow{State: "CANCELLED", Status: "9"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "CANCELLED", Outcome: "Canceled", ExitCode: &sig}},
		{jobRow{State: "TIMEOUT", Status: "15"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "TIMEOUT", Outcome: "Failed", ExitCode: ptr(128 + 15)}},
		{jobRow{State: "NODE_FAIL", Status: "0"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "NODE_FAIL", Outcome: "Failed", ExitCode: new(int)}},
		{jobRow{State: "OUT_OF_MEMORY", Status: "125"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "OUT_OF_MEMORY", Outcome: "Failed", ExitCode: ptr(128 + 125)}},
		{jobRow{State: "PREEMPTED", Status: "0"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "PREEMPTED", Outcome: "Failed", Requeue: true, ExitCode: new(int)}},
		{jobRow{State: "SOMETHING_NEW"}, compute.EngineState{Phase: compute.PhaseGone, Reason: "SOMETHING_NEW"}},
		{jobRow{State: "FAILED", Status: "x"}, compute.EngineState{Phase: compute.PhaseEnded, Reason: "FAILED", Outcome: "Failed"}},
	} {
		if diff := cmp.Diff(c.want, c.row.state()); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", c.row, diff)
		}
	}
}

func TestParseSqueue(t *testing.T) {
	out := "12                      |PENDING                 |Resources                 |0           |\n" +
		"13|FAILED|NonZeroExitCode|768|\n" +
		"14|PENDING|a|b|0|\n" +
		"bad line\n15|RUNNING|\nx|RUNNING|None|0|\n"
	want := map[string]jobRow{
		"12": {State: "PENDING", Reason: "Resources", Status: "0"},
		"13": {State: "FAILED", Reason: "NonZeroExitCode", Status: "768"},
		"14": {State: "PENDING", Reason: "a|b", Status: "0"},
	}
	if diff := cmp.Diff(want, parseSqueue([]byte(out))); diff != "" {
		t.Errorf("parseSqueue (-want +got):\n%s", diff)
	}
}

// FuzzParseSqueue checks that no output of squeue makes the parser or the
// state mapping panic, and that only job ids and exit codes come out.
func FuzzParseSqueue(f *testing.F) {
	f.Add([]byte("12|PENDING|Resources|0|\n"))
	f.Add([]byte("1   |FAILED  |NonZeroExitCode   |768   |\n"))
	f.Add([]byte("1|CANCELLED|None|-1|\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		for id, r := range parseSqueue(out) {
			if !handleRe().MatchString(id) {
				t.Fatalf("parsed id %q", id)
			}
			if c := r.state().ExitCode; c != nil && (*c < 0 || *c > 255) {
				t.Fatalf("exit code %d from %q", *c, r.Status)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }

// arrayOf is a batch of n attempts of one shape, as LaunchBatch makes
// them, under work, started by the fakeRunner at runner; attempt i has
// the token tok-i and the variable OWN=value-i.
func arrayOf(t *testing.T, work string, n, nodes int) batch {
	t.Helper()
	c := hpc()
	c.WorkDir = work
	runner := filepath.Join(work, "fake-runner.sh")
	if err := os.WriteFile(runner, []byte(fakeRunner), 0o755); err != nil {
		t.Fatal(err)
	}
	b := batch{compute: c, path: filepath.Join(work, "arrays", "a.sh"), runner: []string{"/bin/sh", runner}, cache: "/c", envCache: "/e"}
	for i := range n {
		job := fmt.Sprintf("job-%d", i)
		b.attempts = append(b.attempts, attempt{dir: filepath.Join(work, "runs", job, "3"), launch: compute.Launch{
			Job: job, Attempt: 3, APIURL: "http://api:8080", RunToken: fmt.Sprintf("tok-%d", i),
			Spec: &spec.Job{Command: "x", Resources: &spec.Resources{InstanceCount: nodes},
				EnvironmentVariables: map[string]string{"OWN": fmt.Sprintf("value-%d it's", i)}}}})
	}
	return b
}

func TestArrayOptions(t *testing.T) {
	b := arrayOf(t, t.TempDir(), 3, 1)
	want := append([]string{"--job-name=ferry-array", "--array=0-2", "--chdir=" + b.compute.WorkDir, "--output=/dev/null"},
		resourceOptions(b.compute, b.attempts[0].launch.Spec)...)
	if diff := cmp.Diff(want, b.options()); diff != "" {
		t.Errorf("array options (-want +got):\n%s", diff)
	}
}

// TestArrayScriptRunsEachTasksAttempt runs an array script with bash as
// slurmd would for each task (SLURM_ARRAY_* set, every task's token in
// FERRY_RUN_TOKEN_<i>): each task starts its own attempt's runner, in its
// folder, with its own variables, token and output file, and no token of
// another task.
func TestArrayScriptRunsEachTasksAttempt(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("needs bash to run the script")
	}
	work := t.TempDir()
	b := arrayOf(t, work, 3, 1)
	s, err := b.script()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range b.attempts {
		if strings.Contains(s, a.launch.RunToken) {
			t.Fatalf("the array script holds a run token:\n%s", s)
		}
		if err := os.MkdirAll(a.dir, 0o700); err != nil { // the submit command makes them
			t.Fatal(err)
		}
	}
	for i, a := range b.attempts {
		cmd := exec.Command(bash, "-c", s)
		cmd.Dir = work // --chdir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_ARRAY_JOB_ID=77", "SLURM_ARRAY_TASK_ID=" + strconv.Itoa(i), "SLURM_JOB_ID=" + strconv.Itoa(77+i),
			"FERRY_RUN_TOKEN_0=tok-0", "FERRY_RUN_TOKEN_1=tok-1", "FERRY_RUN_TOKEN_2=tok-2"}
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("task %d: %v, printed %q (its output belongs in its folder)", i, err, out)
		}
		args, env := readRecord(t, filepath.Join(a.dir, "node-0"))
		wantArgs := []string{"runner", "--api", "http://api:8080", "--job", a.launch.Job, "--attempt", "3", "--dir", filepath.Join(a.dir, "node-0")}
		if diff := cmp.Diff(wantArgs, args[:len(wantArgs)]); diff != "" {
			t.Errorf("task %d: runner args (-want +got):\n%s", i, diff)
		}
		if env["FERRY_RUN_TOKEN"] != a.launch.RunToken || env["OWN"] != fmt.Sprintf("value-%d it's", i) || env["PWD"] != a.dir {
			t.Errorf("task %d: FERRY_RUN_TOKEN=%q OWN=%q PWD=%q; want its own token, variable and folder", i, env["FERRY_RUN_TOKEN"], env["OWN"], env["PWD"])
		}
		for k := range env {
			if strings.HasPrefix(k, "FERRY_RUN_TOKEN_") {
				t.Errorf("task %d: the runner got %s", i, k)
			}
		}
		if _, err := os.Stat(filepath.Join(a.dir, "slurm-77_"+strconv.Itoa(i)+".out")); err != nil {
			t.Errorf("task %d: its Slurm output: %v", i, err)
		}
	}
	cmd := exec.Command(bash, "-c", s)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_ARRAY_TASK_ID=3"}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "array task 3 has no attempt") {
		t.Errorf("a task the script has no attempt for: %v, %q", err, out)
	}
}

// TestArrayScriptOfSeveralNodes checks a multi-node array script: valid
// bash, and a node's copy (srun runs it with the argument node, the
// task's SLURM_ARRAY_TASK_ID and FERRY_RUN_TOKEN inherited from the batch
// step) starts its task's runner with the node's rank and folder.
func TestArrayScriptOfSeveralNodes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("needs bash to run the script")
	}
	work := t.TempDir()
	b := arrayOf(t, work, 2, 2)
	s, err := b.script()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", "-c", s).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v: %s\n%s", err, out, s)
	}
	if !strings.Contains(s, "/bin/bash "+shellQuote(b.path)+" node") {
		t.Errorf("srun does not start the array's script on the nodes:\n%s", s)
	}
	a := b.attempts[1]
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "-c", s, "script", "node")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_ARRAY_JOB_ID=77", "SLURM_ARRAY_TASK_ID=1", "SLURM_NODEID=1", "FERRY_RUN_TOKEN=tok-1"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node 1 of task 1: %v: %s", err, out)
	}
	args, env := readRecord(t, filepath.Join(a.dir, "node-1"))
	if env["FERRY_NODE_RANK"] != "1" || env["FERRY_RUN_TOKEN"] != "tok-1" || env["OWN"] != "value-1 it's" || !slices.Contains(args, "job-1") {
		t.Errorf("node 1 of task 1: FERRY_NODE_RANK=%q token kept %v OWN=%q args %q", env["FERRY_NODE_RANK"], env["FERRY_RUN_TOKEN"] == "tok-1", env["OWN"], args)
	}
}

func TestChunks(t *testing.T) {
	seq := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	sizes := func(cs [][]int) []int {
		var out []int
		next := 0
		for _, c := range cs {
			for _, i := range c {
				if i != next {
					t.Fatalf("chunks %v: lost or reordered a launch", cs)
				}
				next++
			}
			out = append(out, len(c))
		}
		return out
	}
	for _, c := range []struct {
		n, per int
		want   []int
	}{
		{3, 1000, []int{3}},
		{1000, 1000, []int{1000}},
		{1001, 1000, []int{500, 501}},
		{2500, 1000, []int{833, 833, 834}},
		{3, 0, []int{1, 1, 1}}, // MaxArraySize 1: no arrays
		{1, 1000, []int{1}},
	} {
		if diff := cmp.Diff(c.want, sizes(chunks(seq(c.n), c.per))); diff != "" {
			t.Errorf("chunks of %d by %d (-want +got):\n%s", c.n, c.per, diff)
		}
	}
}
