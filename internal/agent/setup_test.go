package agent

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSetupScriptIsNotWrittenThroughALink: a symlink in place of the
// node's setup folder, or of a script in it, is refused, and nothing is
// written where it points.
func TestSetupScriptIsNotWrittenThroughALink(t *testing.T) {
	for _, at := range []string{"setup", "setup/init.sh"} {
		dir, elsewhere := t.TempDir(), t.TempDir()
		if at != "setup" {
			if err := os.Mkdir(filepath.Join(dir, "setup"), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		target := elsewhere
		if at != "setup" {
			target = filepath.Join(elsewhere, "init.sh")
		}
		if err := os.Symlink(target, filepath.Join(dir, at)); err != nil {
			t.Fatal(err)
		}
		if err := writeSetupScript(dir, "init.sh", "echo hi\n"); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("a symlink at %s: %v, want ELOOP", at, err)
		}
		if es, _ := os.ReadDir(elsewhere); len(es) != 0 {
			t.Errorf("a symlink at %s: %s was written where it points", at, es[0].Name())
		}
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "setup"), 0o700)
	if err := writeSetupScript(dir, "init.sh", "echo hi\n"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "setup", "init.sh")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the script: %v, %v", fi, err)
	}
}
