package cli

import (
	"path/filepath"
	"strings"
	"testing"
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
