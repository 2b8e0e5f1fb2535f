package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUnsafeOutputsAreSkippedAndTheRestKept runs a job whose ./outputs
// holds, beside an ordinary file, every kind of entry that cannot be
// uploaded safely and files over the limits: the job still completes, the
// ordinary file and the in-tree symlink download, and the log and `job
// show` list each skipped entry with its reason.
func TestUnsafeOutputsAreSkippedAndTheRestKept(t *testing.T) {
	s := startServer(t, "--output-quota", "1MiB")
	file := jobFile(t, `
type: command
command: |
  set -e
  cd outputs
  echo hi > normal.txt
  ln -s /etc/passwd escape
  ln -s missing.txt dangling
  echo b > 'back\slash'
  echo u > $'bad\xffname'
  ln -s normal.txt inside
  mkdir sub && echo deep > sub/deep.txt && ln -s ../normal.txt sub/up
  truncate -s 3G huge.bin
  truncate -s 2M medium.bin
  echo done
`, nil)
	r := s.mustFerry("job", "create", "-f", file, "--stream", "--name", "outs-1")
	mustContain(t, "log", r.stdout,
		"done",
		"ferry: skipped outputs/escape: a symlink to /etc/passwd, outside the directory",
		"ferry: skipped outputs/dangling: a dangling symlink to missing.txt",
		`ferry: skipped outputs/back\slash: the name contains a backslash`,
		`ferry: skipped outputs/"bad\xffname": the name is not valid UTF-8`,
		"ferry: skipped outputs/huge.bin: 3.0 GiB, over the limit of one output snapshot of 1.0 GiB",
		"ferry: skipped outputs/medium.bin: 2.0 MiB; with it the outputs would pass the job's output quota of 1.0 MiB",
		"ferry: 6 output entries were skipped and the rest uploaded")

	j := s.show("outs-1")
	if j.Status != "Completed" {
		t.Fatalf("job is %s (%s: %s), want Completed", j.Status, j.StatusReason, j.Error)
	}
	var full struct {
		Outputs struct {
			Skipped []struct{ Output, Path, Reason string } `json:"skipped"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("job", "show", "outs-1", "-o", "json").stdout), &full); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for _, sk := range full.Outputs.Skipped {
		skipped = append(skipped, sk.Output+"/"+sk.Path)
	}
	want := []string{"outputs/back\\slash", "outputs/\"bad\\xffname\"", "outputs/dangling", "outputs/escape", "outputs/huge.bin", "outputs/medium.bin"}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("skipped outputs (-want +got):\n%s", diff)
	}
	mustContain(t, "job show", s.mustFerry("job", "show", "outs-1").stdout,
		"skipped outputs:", "6 (not uploaded; the rest were)",
		"outputs/escape", "a symlink to /etc/passwd, outside the directory")

	dl := t.TempDir()
	s.mustFerry("job", "download", "outs-1", "--download-path", dl)
	for p, want := range map[string]string{
		"normal.txt":   "hi\n",
		"inside":       "hi\n",
		"sub/deep.txt": "deep\n",
		"sub/up":       "hi\n",
	} {
		got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", p))
		if err != nil || string(got) != want {
			t.Errorf("downloaded %s = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"escape", "dangling", "huge.bin", "medium.bin"} {
		if _, err := os.Lstat(filepath.Join(dl, "artifacts", "outputs", p)); !os.IsNotExist(err) {
			t.Errorf("skipped %s was downloaded (%v)", p, err)
		}
	}
}
