package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/schedule"
	"github.com/ferry-ml/ferry/internal/spec"
)

// A create_job that names a job file and overrides some of its fields
// makes one job, whose problems are placed in the file that holds the
// field: the schedule file for an override, the job file for the rest.
func TestScheduleJobFileOverrides(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"job.yml": "command: python3 train.py\ncode: ./src\ninputs:\n  epochs: 5\n  rate: 0.1\nlimits:\n  timeout: 60\n",
		"schedule.yml": `name: nightly
trigger: {type: cron, expression: "0 2 * * *"}
create_job:
  job: file:./job.yml
  experiment_name: nightly
  inputs:
    epochs: 20
  limits:
    timeout: -1
`,
	})
	file := filepath.Join(dir, "schedule.yml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := schedule.Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := scheduleJobFile(file, data, nil, f.CreateJob)
	if err != nil {
		t.Fatal(err)
	}
	if src.name != filepath.Join(dir, "job.yml") {
		t.Errorf("paths are relative to %s, want the job file", src.name)
	}
	_, err = spec.ParseJobWithSet(src.data, nil)
	if err == nil {
		t.Fatal("a timeout of -1 was accepted")
	}
	msg := src.parseError(err).Error()
	if want := file + ":9: create_job.limits.timeout:"; !strings.Contains(msg, want) {
		t.Errorf("error %q, want it placed at %q", msg, want)
	}
	if msg := (pathField{file: src, field: "code", value: "./src"}).notFound().Error(); !strings.HasPrefix(msg, filepath.Join(dir, "job.yml")+":2: code:") {
		t.Errorf("a problem with the job file's own field: %q, want it placed in job.yml at line 2", msg)
	}
	fixed := strings.Replace(string(data), "timeout: -1", "timeout: 30", 1)
	f, _, err = schedule.Parse([]byte(fixed), nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err = scheduleJobFile(file, []byte(fixed), nil, f.CreateJob)
	if err != nil {
		t.Fatal(err)
	}
	j, err := spec.ParseJobWithSet(src.data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j.ExperimentName != "nightly" || *j.Inputs["epochs"].Value != "20" || *j.Inputs["rate"].Value != "0.1" || j.Limits.Timeout != 30 || j.Code != "./src" {
		t.Errorf("merged job: experiment %q, inputs %v, limits %+v, code %q", j.ExperimentName, j.Inputs, j.Limits, j.Code)
	}
}
