package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/beneath"
)

// A job's output folder is walked and read by its runner, which may have
// more rights than the job (root, where jobs run as another account),
// while other processes of the job's account may still change it. So the
// walk never resolves a path the usual way: each folder is opened beneath
// the output root through internal/beneath, which follows no symlink; its
// entries are listed and stat'ed from that open folder; and what a symlink
// inside the root points to is resolved here, step by step, to a path with
// no link in it, which is what is read later, again through beneath. A
// folder swapped for a link between the walk and the read fails the read
// (the file is then skipped as unreadable); it never leads the read out.

// maxLinkHops bounds how many symlinks one resolution follows, as the
// kernel's own (40) does: past it the link is a loop.
const maxLinkHops = 40

// outWalker collects the files of an output folder opened as root.
type outWalker struct {
	root     *beneath.Dir
	rootPath string // the root's absolute, symlink-free path: links to it by absolute path stay inside
	entries  []entry
	skip     func(rel, why string)
}

// walk adds the files under the folder real (a link-free path beneath the
// root, "" for the root), whose snapshot path is parts. ancestors holds the
// real paths of real and the folders above it, to catch links to them.
func (w *outWalker) walk(real string, parts []string, ancestors map[string]bool) error {
	d, err := w.root.OpenDir(real)
	var es []beneath.Entry
	if err == nil {
		es, err = d.ReadDir()
		d.Close()
	}
	if err != nil {
		if len(parts) > 0 {
			w.skip(path.Join(parts...), "the directory cannot be read: "+errText(err))
			return nil
		}
		return err
	}
	for _, de := range es {
		name := de.Name
		if name == ".git" {
			continue
		}
		sub := append(slices.Clip(parts), name)
		rel := path.Join(sub...)
		src := path.Join(real, name)
		if de.Err != nil {
			w.skip(rel, "cannot be read: "+errText(de.Err))
			continue
		}
		fi := de.Info
		if fi.Mode()&fs.ModeSymlink != 0 {
			var why string
			if src, fi, why = w.resolve(src); why != "" {
				w.skip(rel, why)
				continue
			}
		}
		switch {
		case fi.IsDir():
			if why := pathProblem(rel); why != "" {
				w.skip(rel, "the directory's name "+why)
				continue
			}
			if ancestors[src] {
				w.skip(rel, "a symlink to one of its own parent directories (a loop)")
				continue
			}
			ancestors[src] = true
			err := w.walk(src, sub, ancestors)
			delete(ancestors, src)
			if err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if why := pathProblem(rel); why != "" {
				w.skip(rel, "the name "+why)
				continue
			}
			if len(w.entries) >= MaxFiles {
				w.skip(rel, fmt.Sprintf("past the limit of %d files", MaxFiles))
				continue
			}
			w.entries = append(w.entries, newEntry(rel, src, fi))
		default:
			w.skip(rel, "not a regular file or directory ("+kindOf(fi.Mode())+")")
		}
	}
	return nil
}

// errOutside, errLoop: why a resolution stopped.
var (
	errOutside = errors.New("outside the root")
	errLoop    = errors.New("too many levels of symbolic links")
)

// resolve follows the symlink at link (a path beneath the root whose
// folders are real) to a path beneath the root with no link in it, and
// returns that path and its lstat; why says what is wrong with the link
// when it cannot be kept.
func (w *outWalker) resolve(link string) (string, fs.FileInfo, string) {
	target, err := w.root.Readlink(link)
	if err != nil {
		return "", nil, "the symlink cannot be read: " + errText(err)
	}
	hops := 0
	real, err := w.follow(link, &hops)
	switch {
	case errors.Is(err, errOutside):
		return "", nil, fmt.Sprintf("a symlink to %s, outside the directory", target)
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, fmt.Sprintf("a dangling symlink to %s", target)
	case err != nil:
		return "", nil, fmt.Sprintf("a symlink to %s that cannot be resolved: %s", target, errText(err))
	}
	fi, err := w.root.Lstat(real)
	if err != nil {
		return "", nil, "the symlink's target cannot be read: " + errText(err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// Changed since follow looked: it is being swapped.
		return "", nil, "the symlink's target changed while it was read"
	}
	return real, fi, ""
}

// follow resolves the symlink at link, a path beneath the root, to the
// link-free path beneath the root that it names, following the links on
// the way; a path that leaves the root is errOutside. hops counts the
// links followed in the whole resolution, so that links naming others
// several times each cannot make it take long.
func (w *outWalker) follow(link string, hops *int) (string, error) {
	if *hops++; *hops > maxLinkHops {
		return "", errLoop
	}
	target, err := w.root.Readlink(link)
	if err != nil {
		return "", err
	}
	var at []string // the resolved parts so far
	if strings.HasPrefix(target, "/") {
		if target != w.rootPath && !strings.HasPrefix(target, w.rootPath+"/") {
			return "", errOutside
		}
		target = strings.TrimPrefix(strings.TrimPrefix(target, w.rootPath), "/")
	} else if dir := path.Dir(link); dir != "." {
		at = strings.Split(dir, "/")
	}
	for p := range strings.SplitSeq(target, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			if len(at) == 0 {
				return "", errOutside
			}
			at = at[:len(at)-1]
			continue
		}
		at = append(at, p)
		cur := strings.Join(at, "/")
		fi, err := w.root.Lstat(cur)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			next, err := w.follow(cur, hops)
			if err != nil {
				return "", err
			}
			at = nil
			if next != "" {
				at = strings.Split(next, "/")
			}
		}
	}
	return strings.Join(at, "/"), nil
}
