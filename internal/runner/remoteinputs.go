package runner

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"

	"github.com/ferry-ml/ferry/internal/fetch"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// RemoteCacheSuffix names the node's cache of fetched inputs beside its
// blob cache: CacheDir + RemoteCacheSuffix.
const RemoteCacheSuffix = "-remote"

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
func (r *runner) remoteInput(ctx context.Context, name string, in spec.Input, ri workspace.RemoteInput, dir string, inContainer bool, logw io.Writer) (string, error) {
	label := "input " + name
	if in.Mode == "direct" {
		fmt.Fprintf(logw, "ferry: %s: mode direct: the command gets %s as it is\n", label, ri.Where())
		return ri.Where(), nil
	}
	file := in.Type == "uri_file"
	c := &fetch.Cache{Dir: r.cfg.CacheDir + RemoteCacheSuffix}
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
		if _, err := c.BlobFolder(ctx, ri.Blob.Base, ri.Blob.Container, ri.Blob.Path, dir, logw, label); err != nil {
			return "", err
		}
		return dir, nil
	case ri.Folder != "":
		return folderInput(label, in, ri.Folder, dir, inContainer, logw)
	}
	return "", fmt.Errorf("%s: the workspace gave no source for it", label)
}

// folderInput links to or copies a file or folder every node reads.
func folderInput(label string, in spec.Input, src, dir string, inContainer bool, logw io.Writer) (string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("%s is not readable on this node: %w (a local_folder datastore must be at the same path on every node)", src, err)
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
		if err := copyRegular(src, dest); err != nil {
			return "", err
		}
		fmt.Fprintf(logw, "ferry: %s: copied %s\n", label, src)
		return dest, nil
	}
	n, err := copyTree(src, dir, logw, label)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(logw, "ferry: %s: copied %d files from %s\n", label, n, src)
	return dir, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// copyTree copies the folders and regular files under src into dest;
// links and special files are skipped, each with a line in the log.
func copyTree(src, dest string, logw io.Writer, label string) (int, error) {
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dest, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			n++
			return copyRegular(p, target)
		}
		fmt.Fprintf(logw, "ferry: %s: skipped %s: not a regular file or folder\n", label, rel)
		return nil
	})
	return n, err
}

func copyRegular(src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
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
