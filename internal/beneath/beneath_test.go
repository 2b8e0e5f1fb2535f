package beneath

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// modes runs f once with openat2 and once with the descriptor walk that
// stands in for it on older kernels.
func modes(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	t.Run("openat2", func(t *testing.T) {
		if _, err := unix.Openat2(unix.AT_FDCWD, ".", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC}); err == unix.ENOSYS {
			t.Skip("this kernel has no openat2 (Linux 5.6 and later have it); the walk is tested below")
		}
		f(t)
	})
	t.Run("walk", func(t *testing.T) {
		noOpenat2.Store(true)
		t.Cleanup(func() { noOpenat2.Store(false) })
		f(t)
	})
}

// tree makes root/a/b/c/file ("inside") and, beside root, a secret folder
// with the same shape ("secret"), and returns root and the secret folder.
func tree(t *testing.T) (root, secret string) {
	t.Helper()
	base := t.TempDir()
	root, secret = filepath.Join(base, "root"), filepath.Join(base, "secret")
	for _, d := range []string{root, secret} {
		if err := os.MkdirAll(filepath.Join(d, "a", "b", "c"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "a", "b", "c", "file"), "inside")
	write(t, filepath.Join(secret, "a", "b", "c", "file"), "secret")
	write(t, filepath.Join(secret, "file"), "secret")
	return root, secret
}

func write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, d *Dir, rel string) (string, error) {
	t.Helper()
	f, err := d.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

func openRoot(t *testing.T, root string) *Dir {
	t.Helper()
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestOpenReadsPlainPaths(t *testing.T) {
	modes(t, func(t *testing.T) {
		root, _ := tree(t)
		d := openRoot(t, root)
		for _, rel := range []string{"a/b/c/file", "./a/b//c/file", "a/./b/c/file"} {
			got, err := read(t, d, rel)
			if err != nil || got != "inside" {
				t.Errorf("read %q = %q, %v; want inside", rel, got, err)
			}
		}
		sub, err := d.OpenDir("a/b")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if got, err := read(t, sub, "c/file"); err != nil || got != "inside" {
			t.Errorf("read c/file beneath a/b = %q, %v", got, err)
		}
	})
}

// TestSymlinkAtEveryDepthIsRefused puts a symlink in place of each part
// of a/b/c/file in turn, to the same part of a secret tree beside the
// root, to the root itself (a link that stays inside) and to a path that
// leaves by "..": each open fails with ELOOP, and the secret is never read.
func TestSymlinkAtEveryDepthIsRefused(t *testing.T) {
	parts := []string{"a", "b", "c", "file"}
	modes(t, func(t *testing.T) {
		for depth := range parts {
			for _, kind := range []string{"absolute out", "relative out", "inside"} {
				t.Run(strings.Join(parts[:depth+1], "/")+" "+kind, func(t *testing.T) {
					root, secret := tree(t)
					at := filepath.Join(root, filepath.Join(parts[:depth+1]...))
					target := filepath.Join(secret, filepath.Join(parts[:depth+1]...))
					switch kind {
					case "relative out":
						var err error
						if target, err = filepath.Rel(filepath.Dir(at), target); err != nil {
							t.Fatal(err)
						}
					case "inside":
						// The same part, one step over: a link that
						// stays beneath the root is refused as well.
						moved := at + ".real"
						if err := os.Rename(at, moved); err != nil {
							t.Fatal(err)
						}
						target = filepath.Base(moved)
					}
					if kind != "inside" {
						if err := os.RemoveAll(at); err != nil {
							t.Fatal(err)
						}
					}
					if err := os.Symlink(target, at); err != nil {
						t.Fatal(err)
					}
					d := openRoot(t, root)
					got, err := read(t, d, "a/b/c/file")
					if !errors.Is(err, syscall.ELOOP) {
						t.Fatalf("read through a symlink at %s (%s): %q, %v; want ELOOP", at, kind, got, err)
					}
					if _, err := d.OpenDir(strings.Join(parts[:depth+1], "/")); depth < 3 && !errors.Is(err, syscall.ELOOP) {
						t.Errorf("OpenDir of the link: %v, want ELOOP", err)
					}
				})
			}
		}
	})
}

func TestUnsafePathsAreRefused(t *testing.T) {
	root, _ := tree(t)
	d := openRoot(t, root)
	for _, rel := range []string{"../secret/file", "a/../../secret/file", "/etc/passwd", "a/b/../c", "a\x00b"} {
		if _, err := d.OpenFile(rel, os.O_RDONLY, 0); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("open %q: %v, want ErrUnsafePath", rel, err)
		}
	}
	if _, err := d.OpenFile("", os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
		t.Error("creating the folder itself as a file succeeded")
	}
}

// TestDotDotThroughAnOpenedFolderStaysBeneath opens a folder beneath the
// root and then moves it out from under the root while it is open: paths
// beneath the opened folder still resolve within it, and nothing of the
// root is reachable by "..", which is refused outright.
func TestMovedFolderKeepsPathsBeneathIt(t *testing.T) {
	modes(t, func(t *testing.T) {
		root, secret := tree(t)
		d := openRoot(t, root)
		sub, err := d.OpenDir("a/b")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if err := os.Rename(filepath.Join(root, "a"), filepath.Join(secret, "moved")); err != nil {
			t.Fatal(err)
		}
		if got, err := read(t, sub, "c/file"); err != nil || got != "inside" {
			t.Errorf("read beneath the moved folder = %q, %v", got, err)
		}
		if _, err := read(t, sub, "../../file"); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("read ../../file beneath it: %v, want ErrUnsafePath", err)
		}
	})
}

func TestLstatAndReadDirDoNotFollow(t *testing.T) {
	modes(t, func(t *testing.T) {
		root, secret := tree(t)
		if err := os.Symlink(secret, filepath.Join(root, "a", "link")); err != nil {
			t.Fatal(err)
		}
		d := openRoot(t, root)
		fi, err := d.Lstat("a/link")
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("Lstat a/link = %v, %v; want a symlink", fi, err)
		}
		if _, err := d.Lstat("a/link/file"); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("Lstat through the link: %v, want ELOOP", err)
		}
		target, err := d.Readlink("a/link")
		if err != nil || target != secret {
			t.Errorf("Readlink = %q, %v; want %q", target, err, secret)
		}
		a, err := d.OpenDir("a")
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		es, err := a.ReadDir()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range es {
			if e.Err != nil {
				t.Fatalf("entry %s: %v", e.Name, e.Err)
			}
			got = append(got, e.Name+":"+e.Info.Mode().Type().String())
		}
		want := "b:d---------,link:L---------"
		if strings.Join(got, ",") != want {
			t.Errorf("ReadDir = %s, want %s", strings.Join(got, ","), want)
		}
		if st, ok := es[0].Info.Sys().(*syscall.Stat_t); !ok || st.Ino == 0 {
			t.Errorf("Sys() = %T %v, want a *syscall.Stat_t with an inode", es[0].Info.Sys(), es[0].Info.Sys())
		}
	})
}

func TestMkdirAndCreate(t *testing.T) {
	modes(t, func(t *testing.T) {
		root, secret := tree(t)
		d := openRoot(t, root)
		if err := d.Mkdir("a/new", 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := d.OpenFile("a/new/out", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := os.Stat(filepath.Join(root, "a", "new", "out")); err != nil {
			t.Fatal(err)
		}
		// A dangling link where the file is to be made is not followed
		// to make the file elsewhere.
		evil := filepath.Join(secret, "made-by-link")
		if err := os.Symlink(evil, filepath.Join(root, "a", "trap")); err != nil {
			t.Fatal(err)
		}
		if _, err := d.OpenFile("a/trap", os.O_WRONLY|os.O_CREATE, 0o600); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("create through a dangling link: %v, want ELOOP", err)
		}
		if _, err := os.Lstat(evil); err == nil {
			t.Error("the file was made where the link pointed")
		}
	})
}

// TestSwappedFolderRace swaps a folder beneath the root with a symlink to
// a secret folder (renameat2 RENAME_EXCHANGE, atomically, in a loop) while
// the file beneath it is opened again and again, as a job racing a
// privileged reader would: every open reads the real file or fails, and
// none reads the secret.
func TestSwappedFolderRace(t *testing.T) {
	modes(t, func(t *testing.T) {
		root, secret := tree(t)
		d := openRoot(t, root)
		stop := testutil.SwapWithLink(t, filepath.Join(root, "a", "b"), filepath.Join(secret, "a", "b"))
		var ok, refused int
		for range 20000 {
			got, err := read(t, d, "a/b/c/file")
			switch {
			case err == nil && got == "inside":
				ok++
			case err == nil:
				stop()
				t.Fatalf("read %q through the swapped folder", got)
			default:
				refused++
			}
		}
		stop()
		if refused == 0 {
			t.Errorf("no open met the symlink in %d tries: the race was not run", ok)
		}
		t.Logf("%d opens read the real file, %d met the link and were refused", ok, refused)
	})
}
