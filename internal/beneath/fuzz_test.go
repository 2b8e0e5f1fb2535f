package beneath

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FuzzOpen opens arbitrary paths beneath a folder that holds symlinks of
// every kind (out by absolute and relative targets, to its own parent, in
// loops, dangling, inside): whatever the path, an open either fails or
// gives a file or folder that lies beneath the root, found by its inode
// among those of the root's real entries, and never the secret beside it.
func FuzzOpen(f *testing.F) {
	for _, seed := range []string{
		"file", "dir/file", "out/secret", "up/secret", "rel/secret", "loop/x", "dangling",
		"in/file", "dir/../file", "../secret", "/etc/passwd", ".", "", "dir/./file", "dir//file",
		"self/self/self/file", "dir/in/file",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	base := f.TempDir()
	root, secretDir := filepath.Join(base, "root"), filepath.Join(base, "secret")
	for _, d := range []string{filepath.Join(root, "dir"), secretDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		filepath.Join(root, "file"):        "root file",
		filepath.Join(root, "dir", "file"): "dir file",
		filepath.Join(secretDir, "secret"): "secret",
		filepath.Join(base, "secret-file"): "secret",
	} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	links := map[string]string{
		"out":      secretDir,
		"up":       "../secret",
		"rel":      "dir/../../secret",
		"loop":     "loop",
		"dangling": "nowhere",
		"in":       "dir",
		"self":     ".",
		"dir/in":   "../dir",
		"dir/up":   "../../secret-file",
		"dir/root": "/",
	}
	for at, target := range links {
		if err := os.Symlink(target, filepath.Join(root, at)); err != nil {
			f.Fatal(err)
		}
	}
	allowed := map[uint64]bool{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			allowed[fi.Sys().(*syscall.Stat_t).Ino] = true
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	d, err := Open(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	f.Fuzz(func(t *testing.T, rel string, walkOnly bool) {
		noOpenat2.Store(walkOnly)
		defer noOpenat2.Store(false)
		file, err := d.OpenFile(rel, os.O_RDONLY, 0)
		if err != nil {
			return
		}
		defer file.Close()
		fi, err := file.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if ino := fi.Sys().(*syscall.Stat_t).Ino; !allowed[ino] {
			t.Fatalf("open %q gave inode %d, which is not beneath the root", rel, ino)
		}
		if fi.Mode().IsRegular() {
			b, _ := io.ReadAll(file)
			if string(b) == "secret" {
				t.Fatalf("open %q read the secret", rel)
			}
		}
	})
}
