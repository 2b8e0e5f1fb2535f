package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reasons maps each skipped path to its reason.
func reasons(ob *OutputBuild) map[string]string {
	m := map[string]string{}
	for _, s := range ob.Skipped {
		m[s.Path] = s.Reason
	}
	return m
}

func TestBuildOutputsSkipsUnsafeEntriesAndKeepsTheRest(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "outputs")
	writeTree(t, out, map[string]string{
		"normal.txt":    "hello\n",
		"sub/data.csv":  "1,2\n",
		`back\slash`:    "b",
		"bad\xffname":   "u",
		"bad\xffdir/in": "u",
	})
	writeTree(t, dir, map[string]string{"secret": "s"})
	for link, target := range map[string]string{
		"escape":    "../secret",
		"etc":       "/etc/passwd",
		"dangling":  "missing.txt",
		"inside":    "normal.txt",
		"insidedir": "sub",
		"loop/up":   "..",
	} {
		p := filepath.Join(out, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	ob, err := BuildOutputs(out, OutputOptions{})
	if err != nil {
		t.Fatalf("BuildOutputs: %v", err)
	}
	wantPaths := []string{"inside", "insidedir/data.csv", "normal.txt", "sub/data.csv"}
	if diff := cmp.Diff(wantPaths, paths(ob.Manifest)); diff != "" {
		t.Errorf("kept paths (-want +got):\n%s", diff)
	}
	if ob.Manifest.Files[0].Digest != sum("hello\n") {
		t.Errorf("the in-tree link does not carry its target's content")
	}
	got := reasons(ob)
	want := map[string]string{
		`back\slash`:    "the name contains a backslash (paths are slash-separated)",
		`"bad\xffname"`: "the name is not valid UTF-8",
		`"bad\xffdir"`:  "the directory's name is not valid UTF-8",
		"escape":        "a symlink to ../secret, outside the directory",
		"etc":           "a symlink to /etc/passwd, outside the directory",
		"dangling":      "a dangling symlink to missing.txt",
		"loop/up":       "a symlink to one of its own parent directories (a loop)",
		"fifo":          "not a regular file or directory (a FIFO)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	for d, src := range ob.Files {
		if _, err := os.Stat(src); err != nil {
			t.Errorf("digest %s: source %s: %v", d, src, err)
		}
	}
}

func TestBuildOutputsLimitsSkipBeforeReading(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.txt": "aaaa", "b.txt": "bbbbbbbb", "c.txt": "cccccccccccc"})
	f, err := os.Create(filepath.Join(dir, "sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 3 GiB on stat, nothing on disk; its apparent size counts.
	if err := f.Truncate(3 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var hashedBig atomic.Bool
	orig := hashFile
	hashFile = func(open func(string) (*os.File, error), name string, keep []byte) (string, int64, []byte, error) {
		if strings.HasSuffix(name, "sparse.bin") {
			hashedBig.Store(true)
		}
		return orig(open, name, keep)
	}
	t.Cleanup(func() { hashFile = orig })

	ob, err := BuildOutputs(dir, OutputOptions{MaxFileSize: 1 << 30, FileLimitName: "the limit of one snapshot", MaxSize: 15, SizeLimitName: "the job's output quota"})
	if err != nil {
		t.Fatal(err)
	}
	if hashedBig.Load() {
		t.Error("the file over the limit was read")
	}
	// 4+8+12 = 24 > 15: the largest (c) goes, a and b (12) stay.
	if diff := cmp.Diff([]string{"a.txt", "b.txt"}, paths(ob.Manifest)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	want := map[string]string{
		"sparse.bin": "3.0 GiB, over the limit of one snapshot of 1.0 GiB",
		"c.txt":      "12 B; with it the outputs would pass the job's output quota of 15 B",
	}
	if diff := cmp.Diff(want, reasons(ob)); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

func TestBuildOutputsListsAtMostMaxSkippedListed(t *testing.T) {
	dir := t.TempDir()
	for i := range MaxSkippedListed + 3 {
		if err := os.Symlink("nowhere", filepath.Join(dir, "l"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := BuildOutputs(dir, OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ob.Skipped) != MaxSkippedListed || ob.SkippedMore != 3 {
		t.Errorf("listed %d, more %d; want %d and 3", len(ob.Skipped), ob.SkippedMore, MaxSkippedListed)
	}
	if len(ob.Manifest.Files) != 0 || ob.Manifest.Files == nil {
		t.Errorf("manifest files = %#v, want an empty list", ob.Manifest.Files)
	}
}

func TestBuildOutputsFailsOnlyOnTheRoot(t *testing.T) {
	if _, err := BuildOutputs(filepath.Join(t.TempDir(), "none"), OutputOptions{}); err == nil {
		t.Error("BuildOutputs of a missing directory succeeded")
	}
}

func TestDisplayPath(t *testing.T) {
	for in, want := range map[string]string{
		"a/b.txt":     "a/b.txt",
		`a\b`:         `a\b`,
		"bad\xff":     `"bad\xff"`,
		"new\nline":   `"new\nline"`,
		"héllo wörld": "héllo wörld",
	} {
		if got := DisplayPath(in); got != want {
			t.Errorf("DisplayPath(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestBuildOutputsKeepsSmallFilesContent(t *testing.T) {
	dir := t.TempDir()
	small := []byte("a small output\n")
	big := bytes.Repeat([]byte("b"), keepFileMax+1)
	for name, data := range map[string][]byte{"small.txt": small, "copy.txt": small, "big.bin": big, "empty": nil} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := BuildOutputs(dir, OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{sum(string(small)): small, sum(""): {}}
	if diff := cmp.Diff(want, ob.Data); diff != "" {
		t.Errorf("Data (-want +got):\n%s", diff)
	}
}
