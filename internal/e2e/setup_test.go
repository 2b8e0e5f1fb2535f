package e2e

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A compute instance's creation and startup scripts run on its node before
// it takes work; the creation script's path is read next to the compute
// file and given its arguments from command. They, and the node's jobs,
// run with the timer slack the server was started with, not the 1 ms of
// Ferry's own processes (internal/timerslack).
func TestInstanceSetupScripts(t *testing.T) {
	started := usersTimerSlack(t)
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"scripts/prepare.sh": "#!/bin/bash\necho \"preparing with $1 and $2\"\necho \"$1\" > ../created.txt\n",
		"ci.yml": `name: set-box
type: computeinstance
size: Standard_DS1_v2
setup_scripts:
  creation_script:
    path: scripts/prepare.sh
    command: made-once "two words"
  startup_script:
    command: echo started >> ../started.txt; cat /proc/self/timerslack_ns > ../slack.txt
    timeout_minutes: 5
`})
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "ci.yml"))
	s.waitComputeState("set-box", "Running")
	show := s.mustFerry("compute", "show", "set-box", "--events", "0").stdout
	mustContain(t, "instance events", show, "SettingUp", "setup scripts succeeded")

	job := jobFile(t, "command: cat ../../../../created.txt ../../../../started.txt; echo \"script slack $(cat ../../../../slack.txt), job slack $(cat /proc/self/timerslack_ns)\"\ncompute: azureml:set-box\n", nil)
	r := s.mustFerry("job", "create", "-f", job, "--name", "after-setup", "--stream")
	slack := strconv.FormatInt(int64(started), 10)
	mustContain(t, "job sees what setup made", r.stdout, "made-once", "started", "script slack "+slack+", job slack "+slack)
}

// A failing startup script leaves the instance SetupFailed, with the end of
// the script's output, and takes no jobs.
func TestInstanceSetupScriptFails(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ci.yml": `name: bad-setup
type: computeinstance
size: Standard_DS1_v2
setup_scripts:
  startup_script:
    command: 'echo installing drivers; echo "E: package nvidia-driver-999 not found" >&2; exit 4'
`})
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "ci.yml"))
	s.waitComputeState("bad-setup", "SetupFailed")
	show := s.mustFerry("compute", "show", "bad-setup", "--events", "0").stdout
	mustContain(t, "failed setup", show, "startup_script exited with code 4", "installing drivers", "nvidia-driver-999 not found")

	job := jobFile(t, "command: echo should not run\ncompute: azureml:bad-setup\n", nil)
	s.mustFerry("job", "create", "-f", job, "--name", "never")
	// Two pool passes at least (the loop runs every second) and it is
	// still queued.
	s.waitComputeState("bad-setup", "SetupFailed")
	for range 3 {
		time.Sleep(time.Second) // a negative: give the pool loop passes to get it wrong
		if j := s.show("never"); j.Status != "Queued" {
			t.Fatalf("a job on a SetupFailed instance is %s, want Queued", j.Status)
		}
	}
	s.mustFerry("job", "cancel", "never")
}
