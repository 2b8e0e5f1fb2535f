package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/ferry-ml/ferry/internal/beneath"
	"github.com/ferry-ml/ferry/internal/fetch"
	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/spec"
)

// RemoteCacheSuffix names the node's cache of fetched inputs beside its
// blob cache: CacheDir + RemoteCacheSuffix.
const RemoteCacheSuffix = "-remote"

// RemoteCacheMax bounds the node's cache of fetched inputs; the least
// recently used files above it are removed.
const RemoteCacheMax = 20 << 30

// remoteInput gets an input the workspace does not hold (resolved at
// submit: workspace.RemoteInput) into dir, the input's folder, and
// returns the value the command gets for it. Modes (docs/data.md):
//   - direct: the URL or folder itself; nothing is fetched.
//   - a URL or blob path, any other mode: downloaded (through the node's
//     cache); there is nothing to mount.
//   - a folder every node reads (local_folder datastore): ro_mount,
//     rw_mount and eval_mount link to it (a host job reads it in place;
//     a container job, which would not see it, gets a copy), download
//     and eval_download copy it.
func (r *runner) remoteInput(ctx context.Context, name string, in spec.Input, ri apitypes.RemoteInput, dir string, inContainer bool, logw io.Writer) (string, error) {
	label := "input " + name
	if in.Mode == "direct" {
		fmt.Fprintf(logw, "ferry: %s: mode direct: the command gets %s as it is\n", label, fetch.Redact(ri.Where()))
		return ri.Where(), nil
	}
	file := in.Type == "uri_file"
	c := &fetch.Cache{Dir: r.cfg.CacheDir + RemoteCacheSuffix, MaxBytes: RemoteCacheMax}
	switch {
	case ri.URL != "":
		dest := filepath.Join(dir, urlFileName(ri.URL))
		if _, err := c.File(ctx, ri.URL, dest, logw, label); err != nil {
			return "", err
		}
		if file {
			return dest, nil
		}
		// A URL is one file, even for a folder input: the folder holds it.
		fmt.Fprintf(logw, "ferry: %s: a %s input from an http(s) URL is a folder holding the one file %s\n", label, in.Type, filepath.Base(dest))
		return dir, nil
	case ri.Blob != nil && file:
		if ri.Blob.Path == "" {
			return "", fmt.Errorf("%s names a whole container; a uri_file input needs a blob's path", ri.Where())
		}
		dest := filepath.Join(dir, path.Base(ri.Blob.Path))
		if _, err := c.File(ctx, ri.Blob.URLOf(), dest, logw, label); err != nil {
			return "", err
		}
		return dest, nil
	case ri.Blob != nil:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		_, err := c.BlobFolder(ctx, ri.Blob.Base, ri.Blob.Container, ri.Blob.Path, dir, logw, label)
		if errors.Is(err, fetch.ErrEmptyFolder) && ri.Blob.Path != "" {
			// No blob under PATH/: PATH may be one blob, which a folder
			// input gets as its one file, as with a URL.
			dest := filepath.Join(dir, path.Base(ri.Blob.Path))
			if _, ferr := c.File(ctx, ri.Blob.URLOf(), dest, logw, label); ferr == nil {
				fmt.Fprintf(logw, "ferry: %s: %s is one blob, not a folder: the input's folder holds it\n", label, ri.Blob.URLOf())
				return dir, nil
			}
		}
		if err != nil {
			return "", err
		}
		return dir, nil
	case ri.Folder != "":
		return folderInput(label, in, ri.Folder, dir, inContainer, r.cfg.RunAs, logw)
	}
	return "", fmt.Errorf("%s: the workspace gave no source for it", label)
}

// folderInput links to or copies a file or folder every node reads.
// A copy is made with the runner's rights, which may be more than the
// job's (a root server's jobs run as ferry-job): what the job's account
// could not read itself is refused, so a datastore cannot reach past the
// job's own rights (the workspace's data directory, say).
func folderInput(label string, in spec.Input, src, dir string, inContainer bool, runAs *isolation.User, logw io.Writer) (string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("%s is not readable on this node: %w (a local_folder datastore must be at the same path on every node)", src, err)
	}
	check := func(p string, fi fs.FileInfo) error { return nil }
	if runAs != nil {
		if err := isolation.CheckReachable(filepath.Dir(src), runAs); err != nil {
			return "", fmt.Errorf("%s cannot be read by the job's account: %w", src, err)
		}
		check = func(p string, fi fs.FileInfo) error {
			if !readableBy(fi, runAs) {
				return fmt.Errorf("%s (mode %04o) cannot be read by the job's account %s", p, fi.Mode().Perm(), runAs.Name)
			}
			return nil
		}
	}
	if err := check(src, fi); err != nil {
		return "", err
	}
	file := in.Type == "uri_file"
	if file && fi.IsDir() {
		return "", fmt.Errorf("%s is a folder, but the input is a uri_file; write type: uri_folder", src)
	}
	if !file && !fi.IsDir() {
		return "", fmt.Errorf("%s is a file, but the input is a %s; write type: uri_file", src, in.Type)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dest := filepath.Join(dir, filepath.Base(src))
	copyIt := in.Mode == "download" || in.Mode == "eval_download" || inContainer
	if !copyIt {
		if !file {
			// The folder itself is the value; a link in the input's folder
			// shows where it came from.
			if err := os.Remove(dir); err != nil {
				return "", err
			}
			dest = dir
		}
		if err := os.Symlink(src, dest); err != nil {
			return "", err
		}
		fmt.Fprintf(logw, "ferry: %s: %s linked from %s (mode %s)\n", label, dest, src, orDefault(in.Mode, "ro_mount"))
		return dest, nil
	}
	if file {
		in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return "", err
		}
		err = copyOpened(in, src, dest, check)
		in.Close()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(logw, "ferry: %s: copied %s\n", label, src)
		return dest, nil
	}
	n, err := copyTree(src, dir, check, logw, label)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(logw, "ferry: %s: copied %d files from %s\n", label, n, src)
	return dir, nil
}

// readableBy says whether u may read fi (and, for a folder, list and
// pass it), with no supplementary groups, as jobs run.
func readableBy(fi fs.FileInfo, u *isolation.User) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || u.UID == 0 {
		return u.UID == 0
	}
	need := fs.FileMode(0o4)
	if fi.IsDir() {
		need = 0o5
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == u.UID:
		return (perm>>6)&need == need
	case st.Gid == u.GID:
		return (perm>>3)&need == need
	}
	return perm&need == need
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// copyTree copies the folders and regular files under src into dest;
// links and special files are skipped, each with a line in the log. The
// datastore's folder may be written by others (jobs among them) while it
// is copied: everything beneath src is opened through internal/beneath,
// which follows no symlink, and check sees the stat of what was opened,
// so what is checked is what is copied.
func copyTree(src, dest string, check func(string, fs.FileInfo) error, logw io.Writer, label string) (int, error) {
	root, err := beneath.Open(src)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	n := 0
	var walk func(rel string) error
	walk = func(rel string) error {
		d, err := root.OpenDir(rel)
		if err != nil {
			return err
		}
		fi, err := d.Lstat("")
		if err == nil {
			err = check(filepath.Join(src, rel), fi)
		}
		var es []beneath.Entry
		if err == nil {
			es, err = d.ReadDir()
		}
		d.Close()
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dest, rel), 0o755); err != nil {
			return err
		}
		for _, e := range es {
			sub := filepath.Join(rel, e.Name)
			switch {
			case e.Err != nil:
				return e.Err
			case e.Info.IsDir():
				if err := walk(sub); err != nil {
					return err
				}
			case e.Info.Mode().IsRegular():
				in, err := root.OpenFile(sub, os.O_RDONLY|syscall.O_NONBLOCK, 0)
				if err != nil {
					return err
				}
				err = copyOpened(in, filepath.Join(src, sub), filepath.Join(dest, sub), check)
				in.Close()
				if err != nil {
					return err
				}
				n++
			default:
				fmt.Fprintf(logw, "ferry: %s: skipped %s: not a regular file or folder\n", label, sub)
			}
		}
		return nil
	}
	return n, walk("")
}

// copyOpened copies the open file in (named name, for messages) to the new
// file dest, once check has passed the file's own stat.
func copyOpened(in *os.File, name, dest string, check func(string, fs.FileInfo) error) error {
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file", name)
	}
	if err := check(name, fi); err != nil {
		return err
	}
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// urlFileName is the name a URL's file gets: the last step of its path,
// or "download" when it has none that is a file name.
func urlFileName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "download"
	}
	base := path.Base(u.Path)
	if base == "." || base == "/" || base == "" || !filepath.IsLocal(base) {
		return "download"
	}
	return base
}
