package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// countHashes counts the files read by hashFile until the test ends.
func countHashes(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	orig := hashFile
	hashFile = func(open func(string) (*os.File, error), name string, keep []byte) (string, int64, []byte, error) {
		n.Add(1)
		return orig(open, name, keep)
	}
	t.Cleanup(func() { hashFile = orig })
	return &n
}

// statTree writes n small files and returns the folder.
func statTree(t *testing.T, n int) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the stat cache needs Linux's change times and inodes")
	}
	dir := t.TempDir()
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.py", i)), fmt.Appendf(nil, "print(%d)\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// later is a clock an hour ahead: the files a test just wrote are not in
// the racy window of a build it starts.
func later() time.Time { return time.Now().Add(time.Hour) }

func buildCached(t *testing.T, dir string, c *StatCache) *Manifest {
	t.Helper()
	m, _, err := Build(dir, BuildOptions{Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestStatCacheReadsOnlyWhatChanged(t *testing.T) {
	dir := statTree(t, 20)
	c := NewStatCache(filepath.Join(t.TempDir(), "cache"), later)
	first := buildCached(t, dir, c)
	hashes := countHashes(t)
	if d := cmp.Diff(first, buildCached(t, dir, c)); d != "" {
		t.Errorf("second build (-first +second):\n%s", d)
	}
	if hashes.Load() != 0 {
		t.Errorf("the second build read %d files, want none", hashes.Load())
	}
	if err := os.WriteFile(filepath.Join(dir, "f03.py"), []byte("print('changed, and longer')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := buildCached(t, dir, c)
	if hashes.Load() != 1 {
		t.Errorf("after one file changed the build read %d files, want 1", hashes.Load())
	}
	if got := m.Files[3]; got.Path != "f03.py" || got.Digest != sha([]byte("print('changed, and longer')\n")) {
		t.Errorf("changed file: %+v", got)
	}
	// The other digests came from the cache and are right.
	if d := cmp.Diff(Manifest{Files: append(append([]File{}, first.Files[:3]...), first.Files[4:]...)},
		Manifest{Files: append(append([]File{}, m.Files[:3]...), m.Files[4:]...)}); d != "" {
		t.Errorf("unchanged files (-first +now):\n%s", d)
	}
}

// A file hashed in the same moment it was written could change again in
// that clock tick without its size or times changing: it is not trusted
// until it is older than the build that hashed it by racyMargin.
func TestStatCacheRehashesRacyFiles(t *testing.T) {
	dir := statTree(t, 5)
	c := NewStatCache(filepath.Join(t.TempDir(), "cache"), time.Now)
	buildCached(t, dir, c)
	hashes := countHashes(t)
	buildCached(t, dir, c)
	if hashes.Load() != 5 {
		t.Errorf("a build right after the files were written read %d files again, want all 5", hashes.Load())
	}
}

// A file rewritten with the same size and its modification time put back
// (os.Chtimes) still has a new change time, and a file replaced by another
// (an editor's rename) a new inode: both are read again.
func TestStatCacheSeesSameSizeRestoredMtime(t *testing.T) {
	dir := statTree(t, 3)
	c := NewStatCache(filepath.Join(t.TempDir(), "cache"), later)
	buildCached(t, dir, c)
	hashes := countHashes(t)

	inPlace := filepath.Join(dir, "f01.py")
	fi, err := os.Stat(inPlace)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inPlace, []byte("print(9)\n"), 0o644); err != nil { // same length as "print(1)\n"
		t.Fatal(err)
	}
	if err := os.Chtimes(inPlace, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}

	replaced := filepath.Join(dir, "f02.py")
	fi2, err := os.Stat(replaced)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".swap")
	if err := os.WriteFile(tmp, []byte("print(8)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi2.ModTime(), fi2.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, replaced); err != nil {
		t.Fatal(err)
	}

	m := buildCached(t, dir, c)
	want := []string{sha([]byte("print(0)\n")), sha([]byte("print(9)\n")), sha([]byte("print(8)\n"))}
	for i, f := range m.Files {
		if f.Digest != want[i] {
			t.Errorf("%s: digest %s, want that of its new content %s", f.Path, f.Digest, want[i])
		}
	}
	if hashes.Load() != 2 {
		t.Errorf("read %d files, want the 2 changed ones", hashes.Load())
	}
}

// A cache file that is damaged, cut short, writable by others or not a
// regular file is ignored: the build reads every file and gets the true
// digests, even where the file holds well-formed lies.
func TestStatCacheIgnoresBadCacheFiles(t *testing.T) {
	dir := statTree(t, 4)
	c := NewStatCache(filepath.Join(t.TempDir(), "cache"), later)
	truth := buildCached(t, dir, c)
	tree, err := Walk(dir, BuildOptions{Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	name := c.fileName(tree.key)
	// A cache that says every file holds "lies".
	lies := make([]File, len(tree.entries))
	for i, e := range tree.entries {
		lies[i] = File{Path: e.rel, Size: e.size, Digest: sha([]byte("lies"))}
	}
	poison := func(t *testing.T) []byte {
		t.Helper()
		if err := c.save(tree.key, later(), tree.entries, lies); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	// The well-formed lies are believed from a good cache file: that is
	// what the cases below must undo.
	poison(t)
	if m := buildCached(t, dir, c); m.Files[0].Digest != sha([]byte("lies")) {
		t.Fatalf("the poisoned cache was not used (%s); the cases below prove nothing", m.Files[0].Digest)
	}
	cases := map[string]func(t *testing.T){
		"one byte changed": func(t *testing.T) {
			data := poison(t)
			data[len(data)/2] ^= 1
			writeCache(t, name, data, 0o600)
		},
		"cut short": func(t *testing.T) {
			data := poison(t)
			writeCache(t, name, data[:len(data)-10], 0o600)
		},
		"writable by others": func(t *testing.T) {
			data := poison(t)
			writeCache(t, name, data, 0o666)
		},
		"another format": func(t *testing.T) {
			data := poison(t)
			copy(data, "FERRYSC9")
			writeCache(t, name, data, 0o600)
		},
		"a symlink": func(t *testing.T) {
			data := poison(t)
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			writeCache(t, elsewhere, data, 0o600)
			if err := os.Remove(name); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, name); err != nil {
				t.Fatal(err)
			}
		},
	}
	for what, spoil := range cases {
		t.Run(what, func(t *testing.T) {
			spoil(t)
			hashes := countHashes(t)
			if d := cmp.Diff(truth, buildCached(t, dir, c)); d != "" {
				t.Errorf("build with a bad cache (-truth +got):\n%s", d)
			}
			if hashes.Load() != 4 {
				t.Errorf("read %d files, want all 4", hashes.Load())
			}
		})
	}
}

func writeCache(t *testing.T, name string, data []byte, mode os.FileMode) {
	t.Helper()
	os.Remove(name)
	if err := os.WriteFile(name, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// buildFile is Build for a single file.
func buildFile(name string, opt BuildOptions) (*Manifest, map[string]string, error) {
	t, err := WalkFile(name, opt)
	if err != nil {
		return nil, nil, err
	}
	return t.Hash(nil)
}

// A single file (WalkFile) is cached as a folder is.
func TestStatCacheKeepsSingleFiles(t *testing.T) {
	dir := statTree(t, 1)
	c := NewStatCache(filepath.Join(t.TempDir(), "cache"), later)
	name := filepath.Join(dir, "f00.py")
	if _, _, err := buildFile(name, BuildOptions{Cache: c}); err != nil {
		t.Fatal(err)
	}
	hashes := countHashes(t)
	m, _, err := buildFile(name, BuildOptions{Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	if hashes.Load() != 0 || m.Files[0].Digest != sha([]byte("print(0)\n")) {
		t.Errorf("second WalkFile: %d reads, digest %s", hashes.Load(), m.Files[0].Digest)
	}
}

func FuzzParseStatCache(f *testing.F) {
	dir := f.TempDir()
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte{byte(i)}, 0o644); err != nil {
			f.Fatal(err)
		}
	}
	c := NewStatCache(filepath.Join(f.TempDir(), "cache"), later)
	tree, err := Walk(dir, BuildOptions{Cache: c})
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := tree.Hash(nil); err != nil {
		f.Fatal(err)
	}
	if data, err := os.ReadFile(c.fileName(tree.key)); err == nil {
		f.Add(data)
	}
	f.Add([]byte(statCacheMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = parseStatCache(data, tree.key)
	})
}
