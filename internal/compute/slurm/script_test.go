package slurm

import (
	"errors"
	"os/exec"
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
	b := batch{compute: hpc(), launch: compute.Launch{Job: "train-1", Attempt: 2, Spec: job}, dir: "/shared/ferry/runs/train-1/2"}
	want := []string{
		"--job-name=train-1", "--partition=gpu", "--nodes=2", "--ntasks-per-node=4",
		"--chdir=/shared/ferry/runs/train-1/2", "--output=/shared/ferry/runs/train-1/2/slurm-%j.out", "--no-requeue",
		"--nice=1000", "--account=ml-lab", "--qos=scavenger", "--constraint=a100&ib", "--reservation=week",
		"--gres=gpu:4",
		"--time=7", // 90 s and 5 minutes to finish, in whole minutes
	}
	if diff := cmp.Diff(want, b.options()); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}

	// A plain job: one node, one task, the compute's QOS and default time
	// limit; tensorflow runs one process a node whatever it says.
	b.launch.Spec = &spec.Job{Command: "x", Distribution: &spec.Distribution{Type: "tensorflow", ProcessCountPerInstance: 3}}
	want = []string{
		"--job-name=train-1", "--partition=gpu", "--nodes=1", "--ntasks-per-node=1",
		"--chdir=/shared/ferry/runs/train-1/2", "--output=/shared/ferry/runs/train-1/2/slurm-%j.out", "--no-requeue",
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
		b := batch{compute: hpc(), launch: compute.Launch{Job: "j", Attempt: 1, APIURL: "http://api:8080", RunToken: token, Spec: job},
			dir: "/shared/ferry/runs/j/1", runner: []string{"/opt/ferry it's"}, cache: "/c", envCache: "/e"}
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
		cut := strings.Index(s, "\nif [ ")
		if cut < 0 {
			cut = strings.Index(s, "\n"+nodeDirVar+"=")
		}
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
			if !handleRe.MatchString(id) {
				t.Fatalf("parsed id %q", id)
			}
			if c := r.state().ExitCode; c != nil && (*c < 0 || *c > 255) {
				t.Fatalf("exit code %d from %q", *c, r.Status)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }
