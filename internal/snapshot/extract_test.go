package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/ferry-ml/ferry/internal/testutil"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/blob"
)

// storeOpener puts every source file of a build into a blob store and
// returns the store's opener.
func storeOpener(t *testing.T, srcs map[string]string) func(string) (io.ReadCloser, error) {
	t.Helper()
	s, err := blob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for d, p := range srcs {
		got, _, err := s.PutFile(p)
		if err != nil || got != d {
			t.Fatalf("PutFile(%s) = %s, %v; want %s", p, got, err, d)
		}
	}
	return func(d string) (io.ReadCloser, error) { return s.Open(d) }
}

// mapOpener serves contents from memory, keyed by digest.
func mapOpener(contents map[string]string) func(string) (io.ReadCloser, error) {
	return func(d string) (io.ReadCloser, error) {
		c, ok := contents[d]
		if !ok {
			return nil, fmt.Errorf("blob %s: %w", d, blob.ErrNotFound)
		}
		return io.NopCloser(strings.NewReader(c)), nil
	}
}

// tree lists every entry under dir as path -> kind and mode.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = fi.Mode().String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestExtractRoundTrip(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{
		"train.py": "print(1)\n", "bin/run*": "#!/bin/sh\n", "a/b/c/d.txt": "deep",
		"dup1": "same", "dup2": "same", "empty": "",
	})
	m, srcs := build(t, src, BuildOptions{})
	dest := filepath.Join(t.TempDir(), "work")
	if err := Extract(m, dest, storeOpener(t, srcs)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a": "drwxr-xr-x", "a/b": "drwxr-xr-x", "a/b/c": "drwxr-xr-x", "a/b/c/d.txt": "-rw-r--r--",
		"bin": "drwxr-xr-x", "bin/run": "-rwxr-xr-x", "dup1": "-rw-r--r--", "dup2": "-rw-r--r--",
		"empty": "-rw-r--r--", "train.py": "-rw-r--r--",
	}
	if diff := cmp.Diff(want, tree(t, dest)); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
	again, _ := build(t, dest, BuildOptions{})
	if again.ID() != m.ID() {
		t.Errorf("rebuilt extracted tree has ID %s, want %s", again.ID(), m.ID())
	}

	// Extracting again over the same tree replaces the files in place.
	if err := Extract(m, dest, storeOpener(t, srcs)); err != nil {
		t.Fatalf("second Extract: %v", err)
	}
	if diff := cmp.Diff(want, tree(t, dest)); diff != "" {
		t.Errorf("tree after second Extract (-want +got):\n%s", diff)
	}
}

func TestExtractExactModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	m := &Manifest{Files: []File{
		{Path: "d/x", Mode: 0o755, Size: 1, Digest: sum("x")},
		{Path: "ro", Mode: 0o400, Size: 1, Digest: sum("r")},
	}}
	dest := t.TempDir()
	if err := Extract(m, dest, mapOpener(map[string]string{sum("x"): "x", sum("r"): "r"})); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"d": "drwxr-xr-x", "d/x": "-rwxr-xr-x", "ro": "-r--------"}
	if diff := cmp.Diff(want, tree(t, dest)); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
}

func TestExtractDigestMismatch(t *testing.T) {
	tests := map[string]struct {
		size    int64
		content string
	}{
		"other content": {size: 4, content: "evil"},
		"too long":      {size: 4, content: "good and then some"},
		"too short":     {size: 4, content: "go"},
		"size lies":     {size: 3, content: "good"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			m := &Manifest{Files: []File{
				{Path: "ok", Mode: 0o644, Size: 2, Digest: sum("ok")},
				{Path: "sub/bad", Mode: 0o644, Size: tt.size, Digest: sum("good")},
			}}
			dest := t.TempDir()
			err := Extract(m, dest, mapOpener(map[string]string{sum("ok"): "ok", sum("good"): tt.content}))
			if !errors.Is(err, blob.ErrDigestMismatch) {
				t.Fatalf("Extract err = %v, want ErrDigestMismatch", err)
			}
			if !strings.Contains(err.Error(), "sub/bad") {
				t.Errorf("err %q does not name the file", err)
			}
			want := map[string]string{"ok": "-rw-r--r--", "sub": "drwxr-xr-x"}
			if diff := cmp.Diff(want, tree(t, dest)); diff != "" {
				t.Errorf("tree after failed Extract (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractOpenError(t *testing.T) {
	m := &Manifest{Files: []File{{Path: "x", Mode: 0o644, Size: 1, Digest: sum("x")}}}
	err := Extract(m, t.TempDir(), mapOpener(nil))
	if !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Extract err = %v, want ErrNotFound", err)
	}
}

func TestExtractValidatesFirst(t *testing.T) {
	parent := t.TempDir()
	dest := filepath.Join(parent, "dest")
	m := &Manifest{Files: []File{
		{Path: "fine", Mode: 0o644, Size: 1, Digest: sum("x")},
		{Path: "../escape", Mode: 0o644, Size: 1, Digest: sum("x")},
	}}
	opened := 0
	err := Extract(m, dest, func(string) (io.ReadCloser, error) {
		opened++
		return io.NopCloser(strings.NewReader("x")), nil
	})
	if !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("Extract err = %v, want ErrUnsafePath", err)
	}
	if opened != 0 {
		t.Errorf("opened %d blobs before validating", opened)
	}
	if _, err := os.Stat(filepath.Join(parent, "escape")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("escape was written: %v", err)
	}
}

func TestExtractRefusesPlantedSymlinks(t *testing.T) {
	tests := []struct {
		name   string
		link   string // in dest
		target string // OUT is replaced by the outside directory
		file   string // manifest path written
	}{
		{name: "dir link out", link: "pkg", target: "OUT", file: "pkg/evil.py"},
		{name: "deep dir link out", link: "a", target: "OUT", file: "a/b/c.py"},
		{name: "relative dir link out", link: "pkg", target: "../outside", file: "pkg/evil.py"},
		{name: "file link out", link: "run.sh", target: "OUT/victim", file: "run.sh"},
		{name: "dangling file link out", link: "new.sh", target: "OUT/created", file: "new.sh"},
		{name: "dir link inside", link: "pkg", target: "real", file: "pkg/x.py"},
		{name: "file link inside", link: "x", target: "real/y", file: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			outside := filepath.Join(parent, "outside")
			dest := filepath.Join(parent, "dest")
			writeTree(t, parent, map[string]string{"outside/victim": "precious", "dest/real/y": "y"})
			target := strings.Replace(tt.target, "OUT", outside, 1)
			if err := os.Symlink(target, filepath.Join(dest, tt.link)); err != nil {
				t.Fatal(err)
			}
			before := tree(t, parent)
			m := &Manifest{Files: []File{{Path: tt.file, Mode: 0o755, Size: 4, Digest: sum("evil")}}}
			err := Extract(m, dest, mapOpener(map[string]string{sum("evil"): "evil"}))
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("Extract err = %v, want ErrUnsafePath", err)
			}
			if !strings.Contains(err.Error(), tt.link) {
				t.Errorf("err %q does not name the link", err)
			}
			if diff := cmp.Diff(before, tree(t, parent)); diff != "" {
				t.Errorf("files changed (-before +after):\n%s", diff)
			}
			if data, _ := os.ReadFile(filepath.Join(outside, "victim")); !bytes.Equal(data, []byte("precious")) {
				t.Errorf("outside file now holds %q", data)
			}
		})
	}
}

func TestExtractDestIsSymlink(t *testing.T) {
	// dest itself may be a link (say /work -> /mnt/work); that is the
	// caller's choice and is followed.
	parent := t.TempDir()
	if err := os.Mkdir(filepath.Join(parent, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(parent, "dest")); err != nil {
		t.Fatal(err)
	}
	m := &Manifest{Files: []File{{Path: "a/x", Mode: 0o644, Size: 1, Digest: sum("x")}}}
	if err := Extract(m, filepath.Join(parent, "dest"), mapOpener(map[string]string{sum("x"): "x"})); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(parent, "real", "a", "x")); err != nil || string(data) != "x" {
		t.Errorf("real/a/x = %q, %v", data, err)
	}
}

func TestExtractConflictsWithExisting(t *testing.T) {
	dest := t.TempDir()
	writeTree(t, dest, map[string]string{"a": "file", "d/x": "x"})
	for _, p := range []string{"a/b", "d"} {
		m := &Manifest{Files: []File{{Path: p, Mode: 0o644, Size: 1, Digest: sum("x")}}}
		if err := Extract(m, dest, mapOpener(map[string]string{sum("x"): "x"})); err == nil {
			t.Errorf("Extract of %s over an existing file/dir succeeded", p)
		}
	}
}

// TestExtractRaceWritesNothingOutside: a folder of the destination is
// swapped with a symlink to a folder outside (renameat2 RENAME_EXCHANGE,
// in a loop) while a snapshot is extracted into it, again and again:
// whatever each step meets, no file is ever written outside.
func TestExtractRaceWritesNothingOutside(t *testing.T) {
	top := t.TempDir()
	outside := filepath.Join(top, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	var files []File
	contents := map[string]string{}
	for i := range 40 {
		c := fmt.Sprintf("content %d", i)
		contents[sum(c)] = c
		files = append(files, File{Path: fmt.Sprintf("sub/f%02d", i), Mode: 0o644, Size: int64(len(c)), Digest: sum(c)})
	}
	m := &Manifest{Files: files}
	failed := 0
	for round := range 30 {
		dest := filepath.Join(top, fmt.Sprintf("dest%d", round))
		if err := os.MkdirAll(filepath.Join(dest, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		stop := testutil.SwapWithLink(t, filepath.Join(dest, "sub"), outside)
		if err := Extract(m, dest, mapOpener(contents)); err != nil {
			failed++
		}
		stop()
		if es, _ := os.ReadDir(outside); len(es) > 0 {
			t.Fatalf("round %d wrote %s outside the destination", round, es[0].Name())
		}
	}
	if failed == 0 {
		t.Errorf("no extraction met the swapped folder in 30 rounds: the race was not run")
	}
}
