package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A code folder that does not exist is named once, with the job file and
// the line of the field, and what the path is relative to.
func TestMissingCodeFolderNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"job.yml": "command: ls\ncode: srcx\ncompute: local\n"})
	file := filepath.Join(dir, "job.yml")
	// No server is reached: the path is checked before anything is sent.
	env := map[string]string{"FERRY_URL": "http://127.0.0.1:1", "FERRY_TOKEN": "unused"}
	r := runCLI(t, env, "job", "create", "-f", file)
	want := "error: " + file + ":2: code: srcx does not exist (relative to " + dir + ", the folder of job.yml)\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("got %s\nwant stderr %q", r, want)
	}
	r = runCLI(t, env, "job", "create", "-f", file, "--set", "code=/no/such/src")
	want = "error: " + file + ": code: /no/such/src does not exist (from --set code=/no/such/src)\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("with --set: got %s\nwant stderr %q", r, want)
	}
	writeFiles(t, dir, map[string]string{"in.yml": "command: ls\ninputs:\n  data:\n    type: uri_folder\n    path: ./nodata\n"})
	r = runCLI(t, env, "job", "create", "-f", filepath.Join(dir, "in.yml"))
	if r.code != 1 || !strings.Contains(r.stderr, "in.yml:5: inputs.data.path: ./nodata does not exist") {
		t.Errorf("input: %s", r)
	}
}

// `job list` shows what `az ml job list` users look for: display name and
// experiment, and why a Queued job waits (here: a quota of 0 cores).
// `compute create --set` overrides fields of the compute file.
func TestJobListShowsDisplayNameExperimentAndWhyQueued(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"cluster.yml": "name: ds1\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 0\nmax_instances: 1\n",
		"job.yml":     "command: echo hi\ncompute: azureml:ds-zero\ndisplay_name: first try\nexperiment_name: mnist\n",
	})
	if r := s.ferry(t, "quota", "set", "standardDSv2Family", "0"); r.code != 0 {
		t.Fatalf("quota set: %s", r)
	}
	var v struct {
		Name string `json:"name"`
		Spec struct {
			MaxInstances int `json:"max_instances"`
		} `json:"spec"`
	}
	mustJSON(t, s.ferry(t, "compute", "create", "-f", filepath.Join(dir, "cluster.yml"), "--set", "name=ds-zero", "--set", "max_instances=3", "-o", "json"), &v)
	if v.Name != "ds-zero" || v.Spec.MaxInstances != 3 {
		t.Errorf("compute create --set name=ds-zero --set max_instances=3 made %+v", v)
	}
	r := s.ferry(t, "compute", "create", "-f", filepath.Join(dir, "cluster.yml"), "--set", "max_instances=-1")
	if r.code == 0 || !strings.Contains(r.stderr, "max_instances") || !strings.Contains(r.stderr, "(from --set max_instances=-1)") {
		t.Errorf("a bad --set: %s", r)
	}

	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"))
	if r.code != 0 {
		t.Fatalf("job create: %s", r)
	}
	name := strings.TrimSpace(r.stdout)
	var lines []string
	for range 100 {
		r = s.ferry(t, "job", "list")
		lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) == 2 && strings.Contains(lines[1], "quota") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(lines) != 2 {
		t.Fatalf("job list: %s", r)
	}
	header := strings.Fields(strings.ReplaceAll(lines[0], "DISPLAY NAME", "DISPLAY_NAME"))
	if diff := cmp.Diff([]string{"NAME", "DISPLAY_NAME", "EXPERIMENT", "STATUS", "COMPUTE", "CREATED", "DURATION", "EXIT", "REASON"}, header); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	for _, want := range []string{name, "first try", "mnist", "Queued", "ds-zero", "quota"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("job list's row lacks %q: %q", want, lines[1])
		}
	}
	if strings.Contains(lines[1], "queued: ") {
		t.Errorf("the reason repeats the status: %q", lines[1])
	}
}
