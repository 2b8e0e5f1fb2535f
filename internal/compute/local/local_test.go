package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

func TestAdmitRefusesWhatOneMachineCannotHonour(t *testing.T) {
	dockerUp := func(context.Context) error { return nil }
	tgt := New(Config{Capacity: 3, Docker: dockerUp})
	if tgt.Capacity() != 3 {
		t.Fatalf("capacity %d", tgt.Capacity())
	}
	if New(Config{}).Capacity() < 1 {
		t.Fatal("default capacity must be the CPUs of the machine")
	}
	venv := &environment.Spec{Kind: environment.KindPython, Requirements: "requirements.txt", Context: "x"}
	image := &environment.Spec{Kind: environment.KindImage, Image: "ferry-base:bookworm"}
	ok := []struct {
		j   *spec.Job
		env *environment.Spec
	}{
		{&spec.Job{Command: "x"}, nil},
		{&spec.Job{Command: "x", Resources: &spec.Resources{InstanceCount: 1}}, nil},
		{&spec.Job{Command: "x", Environment: &spec.Environment{UserManaged: true}}, &environment.Spec{Kind: environment.KindUserManaged}},
		{&spec.Job{Command: "x"}, venv},
		{&spec.Job{Command: "x"}, image},
		{&spec.Job{Command: "x", Resources: &spec.Resources{ShmSize: "2g", DockerArgs: "--cpus 1.5 --memory=1g"}}, image},
		{&spec.Job{Command: "x", Resources: &spec.Resources{Properties: map[string]any{"gpus": 0}}}, nil},
	}
	for _, c := range ok {
		if err := tgt.Admit(c.j, c.env); err != nil {
			t.Errorf("refused %+v with %+v: %v", c.j, c.env, err)
		}
	}
	noDocker := New(Config{Docker: func(context.Context) error { return errors.New("dial unix /var/run/docker.sock: no such file") }})
	refused := []struct {
		tgt   *Target
		field string
		j     *spec.Job
		env   *environment.Spec
	}{
		{tgt, "resources.instance_count", &spec.Job{Command: "x", Resources: &spec.Resources{InstanceCount: 2}}, nil},
		{tgt, "resources.instance_type", &spec.Job{Command: "x", Resources: &spec.Resources{InstanceType: "Standard_NC6"}}, nil},
		{tgt, "distribution", &spec.Job{Command: "x", Distribution: &spec.Distribution{Type: "pytorch"}}, nil},
		{tgt, "services", &spec.Job{Command: "x", Services: map[string]spec.Service{"s": {Type: "ssh"}}}, nil},
		{tgt, "queue_settings.job_tier", &spec.Job{Command: "x", QueueSettings: &spec.QueueSettings{JobTier: "spot"}}, nil},
		{tgt, "resources", &spec.Job{Command: "x", Resources: &spec.Resources{ShmSize: "2g"}}, venv},
		{tgt, "resources.docker_args", &spec.Job{Command: "x", Resources: &spec.Resources{DockerArgs: "--privileged"}}, image},
		{noDocker, "environment", &spec.Job{Command: "x"}, image},
		{New(Config{}), "environment", &spec.Job{Command: "x"}, &environment.Spec{Kind: environment.KindBuild, Context: "x"}},
		// tgt's machine has no GPU; one with two has not three.
		{tgt, "resources.properties.gpus", &spec.Job{Command: "x", Resources: &spec.Resources{Properties: map[string]any{"gpus": 1}}}, nil},
		{New(Config{GPUs: 2}), "resources.properties.gpu_count", &spec.Job{Command: "x", Resources: &spec.Resources{Properties: map[string]any{"gpu_count": "3"}}}, nil},
	}
	for _, c := range refused {
		err := c.tgt.Admit(c.j, c.env)
		if err == nil || !errors.Is(err, compute.ErrNotSupported) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err %v, want ErrNotSupported naming the field", c.field, err)
		}
	}
	if err := New(Config{GPUs: 2}).Admit(&spec.Job{Command: "x", Resources: &spec.Resources{Properties: map[string]any{"gpus": 2}}}, nil); err != nil {
		t.Errorf("a machine with 2 GPUs refused a job asking for 2: %v", err)
	}
	if err := noDocker.Admit(&spec.Job{Command: "x"}, image); !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing engine should say why: %v", err)
	}
}

// The target hands over the final report a runner kept in its attempt's
// folder, and reads nothing outside the runs folder.
func TestFinalReport(t *testing.T) {
	runs := t.TempDir()
	tgt := New(Config{RunsDir: runs})
	dir := filepath.Join(runs, "j", "2")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, ok := tgt.FinalReport("j", 2); ok {
		t.Error("a report where the runner kept none")
	}
	want := `{"status": "Failed"}`
	if err := os.WriteFile(filepath.Join(dir, "final-report.json"), []byte(want), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok := tgt.FinalReport("j", 2); !ok || string(got) != want {
		t.Errorf("FinalReport = %q, %v", got, ok)
	}
	if _, ok := tgt.FinalReport("..", 2); ok {
		t.Error("a job name of .. was followed")
	}
}

// The way to an attempt's folder has the run-as mode whether the folders
// are new or were made before with another (a server with another
// --run-as), and a missing runs dir is made with it too.
func TestMakeAttemptDirModes(t *testing.T) {
	mode := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	runs := filepath.Join(t.TempDir(), "runs")
	first := filepath.Join(runs, "j", "1")
	if err := MakeAttemptDir(first, "someone"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{runs, filepath.Dir(first), first} {
		if m := mode(p); m != 0o711 {
			t.Errorf("%s: mode %o, want 711 (passable by the job's account)", p, m)
		}
	}
	// Another server, with no --run-as: the job's folder was there.
	second := filepath.Join(runs, "j", "2")
	if err := MakeAttemptDir(second, ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(second), second} {
		if m := mode(p); m != 0o700 {
			t.Errorf("%s: mode %o, want 700 (private to the server's user)", p, m)
		}
	}
	if err := os.Chmod(second, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MakeAttemptDir(second, ""); err != nil {
		t.Fatalf("an existing attempt folder: %v", err)
	}
	if m := mode(second); m != 0o700 {
		t.Errorf("an existing attempt folder kept mode %o", m)
	}
}

// The target gives the runs dir its mode once, even when a server with
// another --run-as made it.
func TestRunsDirGetsItsModeOnce(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	if err := os.Mkdir(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	tgt := New(Config{RunsDir: runs, RunAs: "someone"})
	if err := tgt.readyRunsDir(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(runs); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("runs dir: %v, %v; want mode 711", fi.Mode(), err)
	}
}
