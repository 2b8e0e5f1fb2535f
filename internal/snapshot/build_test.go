package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeTree creates files under dir; a name ending in "*" is made executable
// (the star is dropped).
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, "*") {
			name, mode = strings.TrimSuffix(name, "*"), 0o755
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func paths(m *Manifest) []string {
	var ps []string
	for _, f := range m.Files {
		ps = append(ps, f.Path)
	}
	return ps
}

func build(t *testing.T, dir string, opt BuildOptions) (*Manifest, map[string]string) {
	t.Helper()
	m, srcs, err := Build(dir, opt)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return m, srcs
}

func TestBuildBasics(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"train.py":        "print('hi')\n",
		"run.sh*":         "#!/bin/sh\n",
		"pkg/a.py":        "a",
		"pkg/copy.py":     "a",
		"pkg/deep/b.txt":  "b",
		".git/HEAD":       "ref: refs/heads/main\n",
		"sub/.git/config": "x",
		"empty":           "",
	})
	if err := os.MkdirAll(filepath.Join(dir, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, srcs := build(t, dir, BuildOptions{})
	want := &Manifest{Files: []File{
		{Path: "empty", Mode: 0o644, Size: 0, Digest: sum("")},
		{Path: "pkg/a.py", Mode: 0o644, Size: 1, Digest: sum("a")},
		{Path: "pkg/copy.py", Mode: 0o644, Size: 1, Digest: sum("a")},
		{Path: "pkg/deep/b.txt", Mode: 0o644, Size: 1, Digest: sum("b")},
		{Path: "run.sh", Mode: 0o755, Size: 10, Digest: sum("#!/bin/sh\n")},
		{Path: "train.py", Mode: 0o644, Size: 12, Digest: sum("print('hi')\n")},
	}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	if len(srcs) != 5 {
		t.Errorf("srcs has %d digests, want 5: %v", len(srcs), srcs)
	}
	for d, p := range srcs {
		if !filepath.IsAbs(p) {
			t.Errorf("src %s is not absolute", p)
		}
		data, err := os.ReadFile(p)
		if err != nil || sum(string(data)) != d {
			t.Errorf("src %s does not hold %s (%v)", p, d, err)
		}
	}
}

func TestBuildIDStableAndSensitive(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.py": "aaaa", "b/c.py": "cccc"})
	m1, _ := build(t, dir, BuildOptions{})
	m2, _ := build(t, dir, BuildOptions{})
	if m1.ID() != m2.ID() {
		t.Error("ID changed across rebuilds of the same tree")
	}
	other := t.TempDir()
	writeTree(t, other, map[string]string{"a.py": "aaaa", "b/c.py": "cccc"})
	if m3, _ := build(t, other, BuildOptions{}); m3.ID() != m1.ID() {
		t.Error("equal trees in different places have different IDs")
	}
	writeTree(t, dir, map[string]string{"b/c.py": "cccd"})
	if m4, _ := build(t, dir, BuildOptions{}); m4.ID() == m1.ID() {
		t.Error("ID unchanged after a one-byte change")
	}
	writeTree(t, dir, map[string]string{"b/c.py": "cccc"})
	if err := os.Chmod(filepath.Join(dir, "a.py"), 0o700); err != nil {
		t.Fatal(err)
	}
	if m5, _ := build(t, dir, BuildOptions{}); m5.ID() == m1.ID() {
		t.Error("ID unchanged after making a file executable")
	}
}

func TestBuildIgnoreFiles(t *testing.T) {
	base := map[string]string{
		"main.py":           "m",
		"debug.log":         "l",
		"keep.log":          "k",
		"build/out.bin":     "o",
		"src/build/gen.py":  "g",
		"src/build.py":      "b",
		"data/x.csv":        "x",
		"sub/data/y.csv":    "y",
		"a/b/c/cache.tmp":   "t",
		"notes/readme.md":   "r",
		".git/objects/pack": "p",
	}
	rules := "# comment\n\n*.log\n!keep.log\nbuild/\n/data\n**/*.tmp\r\n"
	want := []string{"ID", "keep.log", "main.py", "notes/readme.md", "src/build.py", "sub/data/y.csv"}

	for _, name := range ignoreFiles {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, base)
			writeTree(t, dir, map[string]string{name: rules})
			m, _ := build(t, dir, BuildOptions{UseIgnoreFiles: true})
			w := append([]string{name}, want[1:]...)
			slices.Sort(w)
			if diff := cmp.Diff(w, paths(m)); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
			// Without UseIgnoreFiles only .git is left out.
			m, _ = build(t, dir, BuildOptions{})
			if got := len(m.Files); got != len(base) {
				t.Errorf("without ignore files: %d files, want %d: %v", got, len(base), paths(m))
			}
		})
	}
}

func TestBuildIgnorePrecedence(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{
			name: "ferryignore wins over the others",
			files: map[string]string{
				".ferryignore": "a\n", ".amlignore": "b\n", ".gitignore": "c\n",
				"a": "", "b": "", "c": "",
			},
			want: []string{".amlignore", ".ferryignore", ".gitignore", "b", "c"},
		},
		{
			name: "amlignore wins over gitignore",
			files: map[string]string{
				".amlignore": "b\n", ".gitignore": "c\n",
				"a": "", "b": "", "c": "",
			},
			want: []string{".amlignore", ".gitignore", "a", "c"},
		},
		{
			name: "an empty ferryignore still wins",
			files: map[string]string{
				".ferryignore": "", ".gitignore": "*\n",
				"a": "",
			},
			want: []string{".ferryignore", ".gitignore", "a"},
		},
		{
			name: "only the root's file counts",
			files: map[string]string{
				"sub/.gitignore": "x\n", "sub/x": "", "x": "",
			},
			want: []string{"sub/.gitignore", "sub/x", "x"},
		},
		{
			name: "ignore file may ignore itself",
			files: map[string]string{
				".gitignore": ".gitignore\n", "a": "",
			},
			want: []string{"a"},
		},
		{
			name: "a file in an ignored directory cannot be re-included",
			files: map[string]string{
				".gitignore": "out/\n!out/keep\n", "out/keep": "", "out/drop": "", "a": "",
			},
			want: []string{".gitignore", "a"},
		},
		{
			name: "negation after a glob",
			files: map[string]string{
				".gitignore": "*.bin\n!weights/small.bin\n", "weights/big.bin": "", "weights/small.bin": "", "x.bin": "",
			},
			want: []string{".gitignore", "weights/small.bin"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, tt.files)
			m, _ := build(t, dir, BuildOptions{UseIgnoreFiles: true})
			if diff := cmp.Diff(tt.want, paths(m)); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildSymlinkInsideFollowed(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"real/tool.sh*": "#!/bin/sh\n", "real/data.txt": "d"})
	for link, target := range map[string]string{
		"link.txt":      "real/data.txt",
		"linkdir":       "real",
		"abs.txt":       filepath.Join(dir, "real", "data.txt"),
		"real/back.txt": "../real/data.txt",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	m, srcs := build(t, dir, BuildOptions{})
	want := []string{"abs.txt", "link.txt", "linkdir/back.txt", "linkdir/data.txt", "linkdir/tool.sh", "real/back.txt", "real/data.txt", "real/tool.sh"}
	if diff := cmp.Diff(want, paths(m)); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	for _, f := range m.Files {
		if strings.HasSuffix(f.Path, "tool.sh") && f.Mode != 0o755 {
			t.Errorf("%s: mode %#o, want 0755", f.Path, f.Mode)
		}
		if strings.HasSuffix(f.Path, ".txt") && f.Digest != sum("d") {
			t.Errorf("%s: not the target's content", f.Path)
		}
	}
	for _, p := range srcs {
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("src %s is not a resolved regular file (%v)", p, err)
		}
	}
}

func TestBuildSymlinkLoop(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a/f": "f"})
	if err := os.Symlink("..", filepath.Join(dir, "a", "up")); err != nil {
		t.Fatal(err)
	}
	_, _, err := Build(dir, BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), "a/up") || !strings.Contains(err.Error(), "loop") {
		t.Fatalf("Build err = %v, want a loop error naming a/up", err)
	}
	// Ignoring the link makes the tree buildable.
	writeTree(t, dir, map[string]string{".ferryignore": "up\n"})
	m, _ := build(t, dir, BuildOptions{UseIgnoreFiles: true})
	if diff := cmp.Diff([]string{".ferryignore", "a/f"}, paths(m)); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
}

func TestBuildSymlinkOutsideRefused(t *testing.T) {
	tests := map[string]string{
		"absolute file":   "OUTSIDE/secret",
		"relative dir":    "../outside",
		"relative file":   "../outside/secret",
		"dangling out":    "/nonexistent/ferry/target",
		"dangling up":     "../../nowhere",
		"in and out":      "../proj/../outside/secret",
		"root's own name": "../proj2",
	}
	for name, target := range tests {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "proj")
			writeTree(t, parent, map[string]string{"proj/main.py": "m", "outside/secret": "s", "proj2/x": "x"})
			target = strings.Replace(target, "OUTSIDE", filepath.Join(parent, "outside"), 1)
			if err := os.Symlink(target, filepath.Join(dir, "evil")); err != nil {
				t.Fatal(err)
			}
			_, _, err := Build(dir, BuildOptions{})
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("Build err = %v, want ErrUnsafePath", err)
			}
			if !strings.Contains(err.Error(), "evil") || !strings.Contains(err.Error(), target) {
				t.Errorf("err %q does not name the link and its target", err)
			}
			writeTree(t, dir, map[string]string{".gitignore": "evil\n"})
			if _, _, err := Build(dir, BuildOptions{UseIgnoreFiles: true}); err != nil {
				t.Errorf("ignored link still refused: %v", err)
			}
		})
	}
}

func TestBuildDanglingInside(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("missing", filepath.Join(dir, "broken")); err != nil {
		t.Fatal(err)
	}
	_, _, err := Build(dir, BuildOptions{})
	if err == nil || errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), "broken") {
		t.Errorf("Build err = %v, want a resolve error naming the link", err)
	}
}

func TestBuildRootIsSymlink(t *testing.T) {
	parent := t.TempDir()
	writeTree(t, parent, map[string]string{"real/a": "a"})
	if err := os.Symlink("real", filepath.Join(parent, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../real/a", filepath.Join(parent, "real", "b")); err != nil {
		t.Fatal(err)
	}
	m, _ := build(t, filepath.Join(parent, "link"), BuildOptions{})
	if diff := cmp.Diff([]string{"a", "b"}, paths(m)); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
}

func TestBuildTooLarge(t *testing.T) {
	dir := t.TempDir()
	sizes := map[string]int64{
		"ckpt/model.pt": 700 << 20, "data/train.bin": 300 << 20, "data/val.bin": 50 << 20,
		"logs/run.log": 2 << 20, "notes.txt": 1 << 20, "main.py": 1 << 10, "small": 10,
	}
	for name, size := range sizes {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		// Sparse: big on stat, nothing on disk.
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	var hashed atomic.Int64
	orig := hashFile
	hashFile = func(open func(string) (*os.File, error), name string, keep []byte) (string, int64, []byte, error) {
		hashed.Add(1)
		return orig(open, name, keep)
	}
	t.Cleanup(func() { hashFile = orig })

	_, _, err := Build(dir, BuildOptions{MaxSize: 100 << 20})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Build err = %v, want ErrTooLarge", err)
	}
	if n := hashed.Load(); n != 0 {
		t.Errorf("%d files hashed before the size check", n)
	}
	msg := err.Error()
	for _, s := range []string{
		"1.0 GiB", "100.0 MiB",
		"ckpt/model.pt (700.0 MiB)", "data/train.bin (300.0 MiB)", "data/val.bin (50.0 MiB)",
		"logs/run.log (2.0 MiB)", "notes.txt (1.0 MiB)",
		"add them to .ferryignore (or .amlignore/.gitignore) or raise the limit",
	} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
	if strings.Contains(msg, "main.py") || strings.Contains(msg, "small") {
		t.Errorf("message %q names more than the 5 largest files", msg)
	}
	// Largest first.
	if strings.Index(msg, "model.pt") > strings.Index(msg, "train.bin") {
		t.Errorf("message %q does not list the largest first", msg)
	}

	// Ignoring the big ones brings it under the limit.
	writeTree(t, dir, map[string]string{".ferryignore": "ckpt/\n*.bin\n"})
	m, _ := build(t, dir, BuildOptions{MaxSize: 100 << 20, UseIgnoreFiles: true})
	if m.TotalSize() > 100<<20 {
		t.Errorf("TotalSize %d over the limit", m.TotalSize())
	}
}

func TestWalkFile(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"in/data.csv": "1,2,3\n"})
	m, srcs, err := buildFile(filepath.Join(dir, "in", "data.csv"), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Manifest{Files: []File{{Path: "data.csv", Mode: 0o644, Size: 6, Digest: sum("1,2,3\n")}}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	if srcs[sum("1,2,3\n")] == "" {
		t.Error("no source for the file's digest")
	}
	if _, _, err := buildFile(filepath.Join(dir, "in"), BuildOptions{}); err == nil {
		t.Error("WalkFile of a directory succeeded")
	}
	if _, _, err := buildFile(filepath.Join(dir, "in", "data.csv"), BuildOptions{MaxSize: 3}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("WalkFile over the limit: err = %v, want ErrTooLarge", err)
	}
}

func TestBuildRefusesUnsafeNames(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{`back\slash`: "x"})
	_, _, err := Build(dir, BuildOptions{})
	if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), `back\\slash`) {
		t.Errorf("Build err = %v, want ErrUnsafePath naming the file", err)
	}
}

// Include puts another tree's files under a folder of the tree, and
// refuses a path both hold.
func TestTreeInclude(t *testing.T) {
	code, extra := t.TempDir(), t.TempDir()
	for p, body := range map[string]string{"main.py": "print(1)\n", "lib/a.py": "A = 1\n"} {
		full := filepath.Join(code, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(extra, "b.py"), []byte("B = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree, err := Walk(code, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := Walk(extra, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.Include(other, "lib"); err != nil {
		t.Fatal(err)
	}
	m, _, err := tree.Hash(nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	if got := strings.Join(paths, ","); got != "lib/a.py,lib/b.py,main.py" {
		t.Errorf("paths = %s, want lib/a.py, lib/b.py and main.py", got)
	}
	again, err := Walk(extra, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.Include(again, "lib"); err == nil || !strings.Contains(err.Error(), "lib/b.py") {
		t.Errorf("err = %v, want one naming lib/b.py", err)
	}
}
