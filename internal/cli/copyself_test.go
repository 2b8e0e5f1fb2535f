package cli

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCopyExecutable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "bin", "ferry")
	if err := os.Mkdir(filepath.Dir(dest), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyExecutable(src, dest); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(dest)
	if string(data) != "binary" || fi.Mode().Perm() != 0o755 {
		t.Errorf("dest holds %q, mode %v; want the source's bytes, 0755", data, fi.Mode())
	}
	left, _ := os.ReadDir(filepath.Dir(dest))
	if len(left) != 1 {
		t.Errorf("the folder holds %d entries, want dest alone", len(left))
	}
}
