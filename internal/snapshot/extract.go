package snapshot

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/ferry-ml/ferry/internal/beneath"
	"github.com/ferry-ml/ferry/internal/blob"
)

// Extract writes the files of m under dest, creating dest and any
// directories (mode 0755) as needed, and giving each file its mode. open
// returns the content of a digest; Extract checks each file's size and
// SHA-256 while copying, and a mismatch is an error wrapping
// blob.ErrDigestMismatch that leaves no partial file behind.
//
// m is validated first. Every path beneath dest is resolved through
// internal/beneath, which follows no symlink, so no write can leave dest
// even if the folder is changed while it is written; Extract also refuses
// (ErrUnsafePath) to write into or over any symlink it finds inside dest,
// even one pointing within it, and says so by name. An existing regular file at a manifest path is replaced
// atomically. Files that share a digest are copied separately (not
// hard-linked), so a job changing one does not change the others.
func Extract(m *Manifest, dest string, open func(digest string) (io.ReadCloser, error)) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("extract snapshot: %w", err)
	}
	root, err := beneath.Open(dest)
	if err != nil {
		return fmt.Errorf("extract snapshot: %w", err)
	}
	defer root.Close()
	x := extractor{root: root, dirs: map[string]bool{".": true}, open: open}
	for _, f := range m.sorted() {
		if err := x.file(f); err != nil {
			return fmt.Errorf("extract snapshot into %s: %s: %w", dest, f.Path, err)
		}
	}
	return nil
}

type extractor struct {
	root *beneath.Dir
	dirs map[string]bool // directories known to be real directories, not links
	open func(digest string) (io.ReadCloser, error)
}

// dir makes sure the directory (a clean slash path) exists as a real
// directory, creating it and its parents as needed.
func (x *extractor) dir(p string) error {
	if x.dirs[p] {
		return nil
	}
	if err := x.dir(path.Dir(p)); err != nil {
		return err
	}
	fi, err := x.root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := x.root.Mkdir(p, 0o755); err != nil {
			return err
		}
		// Mkdir's mode is subject to the umask; snapshots are 0755.
		if err := x.root.Chmod(p, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink in the destination; refusing to write through it", ErrUnsafePath, p)
	case !fi.IsDir():
		return fmt.Errorf("%s exists in the destination and is not a directory", p)
	}
	x.dirs[p] = true
	return nil
}

// file writes one file: into a temporary file beside it, checked, then
// renamed into place, so the path holds either nothing, its old content or
// the complete new content.
func (x *extractor) file(f File) error {
	if err := x.dir(path.Dir(f.Path)); err != nil {
		return err
	}
	name := f.Path
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink in the destination; refusing to write through it", ErrUnsafePath, f.Path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s exists in the destination and is not a regular file", f.Path)
	}

	tmp := path.Join(path.Dir(name), ".ferry-extract-"+rand.Text())
	out, err := x.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			out.Close()
			x.root.Remove(tmp)
		}
	}()
	if err := x.copy(out, f); err != nil {
		return err
	}
	if err := out.Chmod(fs.FileMode(f.Mode)); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := x.root.Rename(tmp, name); err != nil {
		return err
	}
	done = true
	return nil
}

// copy writes the content of f's digest to out, checking size and digest.
func (x *extractor) copy(out io.Writer, f File) error {
	in, err := x.open(f.Digest)
	if err != nil {
		return err
	}
	defer in.Close()
	h := sha256.New()
	// One byte over the size is enough to know the content is too long.
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(in, f.Size+1))
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("content of %s is %s bytes, manifest says %d: %w", f.Digest, sizeWord(n, f.Size), f.Size, blob.ErrDigestMismatch)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.Digest {
		return fmt.Errorf("content has sha256 %s, manifest says %s: %w", got, f.Digest, blob.ErrDigestMismatch)
	}
	return nil
}

func sizeWord(n, want int64) string {
	if n > want {
		return "more than " + fmt.Sprint(want)
	}
	return fmt.Sprint(n)
}
