package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputRegistersDataAsset: a command job's output with name and
// version (Azure's way to register a job's output) is a data asset once
// the job completes; `ferry data show` names the job and the output, and
// a later job reads it as azureml:NAME:VERSION.
func TestOutputRegistersDataAsset(t *testing.T) {
	s := startServer(t)
	job := jobFile(t, `command: mkdir -p ${{outputs.cleaned}} && echo "row 1" > ${{outputs.cleaned}}/rows.txt && echo done
compute: local
outputs:
  cleaned:
    type: uri_folder
    name: cleaned-rows
    version: "3"
`, nil)
	r := s.mustFerry("job", "create", "-f", job, "--name", "regout", "--stream")
	mustContain(t, "the job's log", r.stdout, "output cleaned registered as data asset azureml:cleaned-rows:3")
	show := s.mustFerry("data", "show", "cleaned-rows@latest").stdout
	mustContain(t, "data show", show, "version:", "3", "output cleaned of job regout", "ferry.job=regout")
	dl := t.TempDir()
	s.mustFerry("data", "download", "cleaned-rows", "--version", "3", "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "cleaned-rows", "rows.txt")); err != nil || string(got) != "row 1\n" {
		t.Errorf("the registered output's rows.txt: %q, %v", got, err)
	}
	reader := jobFile(t, `command: cat ${{inputs.rows}}/rows.txt
compute: local
inputs:
  rows: {type: uri_folder, path: "azureml:cleaned-rows:3"}
`, nil)
	mustContain(t, "a job reading the registered output", s.mustFerry("job", "create", "-f", reader, "--stream").stdout, "row 1")
	if r := s.ferry("job", "create", "-f", job, "--name", "badver", "--set", "outputs.cleaned.version=latest"); r.code == 0 || !strings.Contains(r.stderr, "latest is a label") {
		t.Errorf("version latest: %s", r)
	}
}
