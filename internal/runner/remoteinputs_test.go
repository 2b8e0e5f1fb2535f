package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/spec"
)

// openDir is a fresh directory every account may list and pass, so a
// check of the job account's rights sees only what a test sets.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-runner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestFolderInputModes(t *testing.T) {
	src := filepath.Join(openDir(t), "set")
	for p, c := range map[string]string{"a.txt": "a", "sub/b.txt": "b"} {
		full := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	// ro_mount: the input is a link to the folder.
	dir := filepath.Join(t.TempDir(), "inputs", "ro")
	v, err := folderInput("input ro", spec.Input{Type: "uri_folder"}, src, dir, false, nil, &log)
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(v); err != nil || target != src {
		t.Errorf("ro_mount: %s links to %q (%v), want %s", v, target, err, src)
	}
	// download, or any mode for a container job: a copy.
	for _, c := range []struct {
		mode      string
		container bool
	}{{"download", false}, {"ro_mount", true}} {
		dir := filepath.Join(t.TempDir(), "inputs", "cp")
		v, err := folderInput("input cp", spec.Input{Type: "uri_folder", Mode: c.mode}, src, dir, c.container, nil, &log)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(v); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("%s (container %v): %s is a link, want a copy", c.mode, c.container, v)
		}
		if got, _ := os.ReadFile(filepath.Join(v, "sub", "b.txt")); string(got) != "b" {
			t.Errorf("%s: sub/b.txt = %q", c.mode, got)
		}
	}
	// The type must be what the path is.
	_, err = folderInput("input f", spec.Input{Type: "uri_file"}, src, filepath.Join(t.TempDir(), "f"), false, nil, &log)
	if err == nil || !strings.Contains(err.Error(), "write type: uri_folder") {
		t.Errorf("a folder as uri_file: %v", err)
	}
	_, err = folderInput("input f", spec.Input{Type: "uri_folder"}, filepath.Join(src, "missing"), filepath.Join(t.TempDir(), "f"), false, nil, &log)
	if err == nil || !strings.Contains(err.Error(), "not readable on this node") {
		t.Errorf("a missing folder: %v", err)
	}
}

// A copy is made with the runner's rights; what the job's account could
// not read itself is refused.
func TestFolderInputCopyKeepsTheJobsRights(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: files the job's account cannot read must be readable by the runner")
	}
	src := filepath.Join(openDir(t), "set")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "open.txt"), []byte("o"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := &isolation.User{Name: "nobody", UID: 65534, GID: 65534}
	in := spec.Input{Type: "uri_folder", Mode: "download"}
	if _, err := folderInput("input d", in, src, filepath.Join(t.TempDir(), "d"), false, job, &bytes.Buffer{}); err != nil {
		t.Fatalf("readable folder: %v", err)
	}
	if err := os.WriteFile(filepath.Join(src, "secret.txt"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := folderInput("input d", in, src, filepath.Join(t.TempDir(), "d"), false, job, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "secret.txt") || !strings.Contains(err.Error(), "cannot be read by the job's account") {
		t.Errorf("a file only root reads: %v", err)
	}
}

func TestURLFileName(t *testing.T) {
	for in, want := range map[string]string{
		"https://h/a/b.csv?x=1": "b.csv",
		"https://h/":            "download",
		"https://h":             "download",
		"https://h/a%20b.txt":   "a b.txt",
		"https://h/..":          "download",
	} {
		if got := urlFileName(in); got != want {
			t.Errorf("urlFileName(%q) = %q, want %q", in, got, want)
		}
	}
}
