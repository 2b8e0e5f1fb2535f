package e2e

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

// computeState returns a compute's state as `compute show -o json` gives it.
func (s *server) computeState(name string) string {
	s.t.Helper()
	var c struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("compute", "show", name, "-o", "json").stdout), &c); err != nil {
		s.t.Fatal(err)
	}
	return c.State
}

func (s *server) waitComputeState(name string, want string) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := s.computeState(name)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("compute %s is %s, want %s", name, st, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestComputeInstanceStartStopRestart(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ci.yml": `$schema: https://azuremlschemas.azureedge.net/latest/computeInstance.schema.json
name: dev-box
type: computeinstance
size: Standard_DS1_v2
idle_time_before_shutdown_minutes: 60
`})
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "ci.yml"))
	s.waitComputeState("dev-box", "Running")
	first := s.nodes("dev-box")
	if len(first) != 1 {
		t.Fatalf("instance nodes: %+v", first)
	}

	job := jobFile(t, "command: echo on the dev box; sleep 2\ncompute: azureml:dev-box\n", nil)
	s.mustFerry("job", "create", "-f", job, "--name", "dev-1")
	s.waitStatus("dev-1", "Running")
	s.waitComputeState("dev-box", "JobRunning")
	r := s.ferry("compute", "stop", "dev-box")
	if r.code == 0 {
		t.Errorf("stopped an instance that runs a job: %s", r)
	}
	mustContain(t, "stop while a job runs", r.stderr, "running a job")
	if j := s.waitStatus("dev-1", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("dev-1: %s (%s)", j.Status, j.StatusReason)
	}
	s.waitComputeState("dev-box", "Running")

	// start, stop and restart wait until they are done, as az ml's do.
	mustContain(t, "stop", s.mustFerry("compute", "stop", "dev-box").stdout, "state:", "Stopped")
	if got := s.computeState("dev-box"); got != "Stopped" {
		t.Fatalf("right after compute stop returned: %s, want Stopped", got)
	}
	s.waitNodes("dev-box", 0)
	// Every event, not the newest few: later events cannot push one out.
	mustContain(t, "events", s.mustFerry("compute", "show", "dev-box", "--events", "0").stdout,
		"Stopping → Stopped", "removed: the instance was stopped by the user (owner)")
	r = s.ferry("job", "create", "-f", job)
	if r.code == 0 {
		t.Fatalf("a job was taken by a stopped instance: %s", r)
	}
	mustContain(t, "job on a stopped instance", r.stderr, "Stopped", "ferry compute start dev-box")
	if r := s.ferry("compute", "stop", "dev-box"); r.code == 0 {
		t.Errorf("stopped a stopped instance: %s", r)
	}

	s.mustFerry("compute", "start", "dev-box")
	if got := s.computeState("dev-box"); got != "Running" {
		t.Fatalf("right after compute start returned: %s, want Running", got)
	}
	mustContain(t, "job after start", s.mustFerry("job", "create", "-f", job, "--stream").stdout, "on the dev box")

	s.mustFerry("compute", "restart", "dev-box")
	// Right after restart returns, the instance runs on its new node, and
	// a session reaches it.
	after := s.nodes("dev-box")
	if len(after) != 1 || after[0].Name == first[0].Name {
		t.Errorf("restart kept node %s: %+v", first[0].Name, after)
	}
	if r := s.ferry("compute", "exec", "dev-box", "--", "echo back up"); r.code != 0 || r.stdout != "back up\n" {
		t.Errorf("compute exec right after compute restart: %s", r)
	}
	mustContain(t, "events", s.mustFerry("compute", "show", "dev-box", "--events", "0").stdout, "Starting → Running", "Restarting → Running")
	if r := s.ferry("compute", "start", "local"); r.code == 0 {
		t.Errorf("started the local target: %s", r)
	}
}

func TestComputeInstanceScheduleStopsItOnTime(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"ci.yml": `name: night-box
type: computeinstance
size: Standard_DS1_v2
schedules:
  compute_start_stop:
    - action: stop
      trigger:
        type: cron
        expression: "* * * * *"
        time_zone: Pacific Standard Time
`,
		"bad.yml": `name: bad-box
type: computeinstance
size: Standard_DS1_v2
schedules:
  compute_start_stop:
    - action: stop
      trigger:
        type: cron
        expression: "0 25 * * *"
`,
	})
	r := s.ferry("compute", "create", "-f", filepath.Join(dir, "bad.yml"))
	if r.code == 0 {
		t.Fatalf("an impossible cron was taken: %s", r)
	}
	mustContain(t, "bad schedule", r.stderr, "schedules.compute_start_stop[0].trigger.expression", "hour")

	// The schedule fires at the next whole minute (in its time zone) and
	// stops the instance; the event says which schedule did it.
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "ci.yml"))
	deadline := time.Now().Add(90 * time.Second)
	for s.computeState("night-box") != "Stopped" {
		if time.Now().After(deadline) {
			t.Fatalf("the schedule did not stop night-box: %s", s.mustFerry("compute", "show", "night-box").stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	mustContain(t, "events", s.mustFerry("compute", "show", "night-box", "--events", "0").stdout, "schedule", "cron * * * * *", "Pacific Standard Time")
}
