// Package beneath resolves paths inside a folder that someone less trusted
// than the caller can write, without following any symlink.
//
// Ferry's privileged code (a root runner, the server) reads and writes
// inside folders a job can change while it works: a job's outputs, its
// working directory, its inputs. A path such as outputs/sub/file, resolved
// the usual way, follows a symlink that the job put at outputs/sub a moment
// before, and so leads wherever the job likes: the data directory, root's
// files. Checking each part first (lstat, then open) does not help, since
// the job can swap a folder for a link between the check and the open
// (renameat2 with RENAME_EXCHANGE does it atomically, in a loop).
//
// So every path here is resolved component by component from a directory
// that is already open, and a symlink anywhere on the way, the last part
// included, is an error (ELOOP) instead of being followed: with openat2's
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the kernel has it (Linux
// 5.6), else by a walk that opens each folder with O_NOFOLLOW |
// O_DIRECTORY relative to the one before. A folder swapped after it was
// opened no longer matters: what was opened is the folder that was there.
//
// Hard links are not paths and cannot be told from the original here; what
// a job wrote is read with the job's own rights for that (internal/runner),
// so a hard link to a file the job could not read is not readable either.
//
// Go's os.Root confines paths too, but it follows symlinks that stay
// inside the root; a job's folder has no symlink worth following for
// privileged code, so this package refuses them all and keeps the one
// rule simple to state and to test.
package beneath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnsafePath is wrapped by the error for a path that is not a plain
// relative path beneath its folder: absolute, with "..", or with a NUL.
var ErrUnsafePath = errors.New("not a relative path beneath the folder")

// Dir is an open directory that paths are resolved beneath. Its methods
// are safe for concurrent use; Close must be called once it is no longer
// needed.
type Dir struct {
	f *os.File
}

// Open opens the directory path as a Dir. path itself is trusted: the
// caller made it or it lies where no one less trusted can write, so
// symlinks in it are followed. It is opened with O_PATH: paths beneath it
// are resolved with search permission on it alone, as a path lookup
// through it would be (a folder of mode 0711 is enough).
func Open(path string) (*Dir, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{f: os.NewFile(uintptr(fd), path)}, nil
}

// OpenUnder opens the directory rel beneath the trusted directory base
// (see Open) without following a symlink on the way from base to it.
func OpenUnder(base, rel string) (*Dir, error) {
	b, err := Open(base)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return b.OpenDir(rel)
}

// Name is the path the directory was opened by, for messages.
func (d *Dir) Name() string { return d.f.Name() }

// Fd is the directory's descriptor, valid until Close.
func (d *Dir) Fd() int { return int(d.f.Fd()) }

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// OpenFile opens rel beneath d with flag (os.O_RDONLY, os.O_WRONLY|os.O_CREATE,
// ...) and perm, as os.OpenFile does, except that a symlink anywhere on the
// way, the last part included, fails with an error wrapping syscall.ELOOP.
// O_CLOEXEC is always added.
func (d *Dir) OpenFile(rel string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := d.openat(rel, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), d.join(rel)), nil
}

// OpenFd is OpenFile returning the bare descriptor, for callers that read
// with system calls directly (a tree of many tiny files pays for an
// os.File's poller registration and allocations many times over). The
// caller closes it.
func (d *Dir) OpenFd(rel string, flag int) (int, error) {
	return d.openat(rel, flag, 0)
}

// OpenDir opens the directory rel beneath d ("" or "." is d itself, opened
// again) as a Dir.
func (d *Dir) OpenDir(rel string) (*Dir, error) {
	fd, err := d.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	return &Dir{f: os.NewFile(uintptr(fd), d.join(rel))}, nil
}

// Lstat returns the file information of rel beneath d, not following rel
// itself if it is a symlink (its folders are resolved as everywhere here).
func (d *Dir) Lstat(rel string) (fs.FileInfo, error) {
	if parts, err := Split(rel); err == nil && len(parts) == 0 {
		return d.f.Stat()
	}
	parent, name, done, err := d.parentOf("lstat", rel, syscall.EINVAL)
	if err != nil {
		return nil, err
	}
	defer done()
	return parent.lstatName(name, rel)
}

// lstatName stats the entry name of d itself, not following it.
func (d *Dir) lstatName(name, display string) (fs.FileInfo, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(d.Fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lstat", Path: d.join(display), Err: err}
		}
		return fileInfo(name, &st), nil
	}
}

// Readlink returns the target of the symlink rel beneath d.
func (d *Dir) Readlink(rel string) (string, error) {
	parent, name, done, err := d.parentOf("readlink", rel, syscall.EINVAL)
	if err != nil {
		return "", err
	}
	defer done()
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(parent.Fd(), name, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: d.join(rel), Err: err}
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Entry is a directory entry listed by ReadDir, with the lstat of the
// entry made relative to the open directory (a symlink is reported as
// one, not followed).
type Entry struct {
	Name string
	Info fs.FileInfo // nil when Err is set
	Err  error       // the entry could not be stat'ed (it went away, say)
}

// ReadDir lists d's entries, sorted by name, each with its lstat.
func (d *Dir) ReadDir() ([]Entry, error) {
	// A second descriptor: reading a directory moves its offset, and d
	// may be listed again or used by another goroutine meanwhile.
	again, err := d.OpenDir(".")
	if err != nil {
		return nil, err
	}
	defer again.Close()
	names, err := again.f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slicesSort(names)
	out := make([]Entry, 0, len(names))
	for _, name := range names {
		fi, err := again.lstatName(name, name)
		out = append(out, Entry{Name: name, Info: fi, Err: err})
	}
	return out, nil
}

// IsEmpty says whether d has no entries.
func (d *Dir) IsEmpty() (bool, error) {
	again, err := d.OpenDir(".")
	if err != nil {
		return false, err
	}
	defer again.Close()
	_, err = again.f.Readdirnames(1)
	if err == io.EOF {
		return true, nil
	}
	return false, err
}

// Mkdir makes the directory rel beneath d with perm (before the umask).
func (d *Dir) Mkdir(rel string, perm fs.FileMode) error {
	parent, name, done, err := d.parentOf("mkdir", rel, syscall.EEXIST)
	if err != nil {
		return err
	}
	defer done()
	if err := unix.Mkdirat(parent.Fd(), name, uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "mkdir", Path: d.join(rel), Err: err}
	}
	return nil
}

// parentOf opens the folder that holds rel's last part and returns it
// with that part, and done, which closes the folder when it is not d. An
// empty rel (d itself, which has no name in d) fails op with empty.
func (d *Dir) parentOf(op, rel string, empty syscall.Errno) (parent *Dir, name string, done func(), err error) {
	parts, err := Split(rel)
	if err != nil || len(parts) == 0 {
		if err == nil {
			err = empty
		}
		return nil, "", nil, &fs.PathError{Op: op, Path: rel, Err: err}
	}
	if len(parts) == 1 {
		return d, parts[0], func() {}, nil
	}
	parent, err = d.OpenDir(strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", nil, err
	}
	return parent, parts[len(parts)-1], func() { parent.Close() }, nil
}

// Rename renames from to to, both beneath d; neither's folders may be
// symlinks, and the last parts are names in them (a symlink at from is
// renamed itself; one at to is replaced), as rename(2) has them.
func (d *Dir) Rename(from, to string) error {
	fp, fname, fdone, err := d.parentOf("rename", from, syscall.EINVAL)
	if err != nil {
		return err
	}
	defer fdone()
	tp, tname, tdone, err := d.parentOf("rename", to, syscall.EINVAL)
	if err != nil {
		return err
	}
	defer tdone()
	if err := unix.Renameat(fp.Fd(), fname, tp.Fd(), tname); err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(from), New: d.join(to), Err: err}
	}
	return nil
}

// Remove removes the file or empty folder rel beneath d (a symlink
// itself, never what it points to).
func (d *Dir) Remove(rel string) error {
	parent, name, done, err := d.parentOf("remove", rel, syscall.EINVAL)
	if err != nil {
		return err
	}
	defer done()
	err = unix.Unlinkat(parent.Fd(), name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(parent.Fd(), name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: d.join(rel), Err: err}
	}
	return nil
}

// Chmod sets the mode of the folder rel beneath d, through a descriptor
// of it (a symlink in its place fails to open).
func (d *Dir) Chmod(rel string, mode fs.FileMode) error {
	sub, err := d.OpenDir(rel)
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.f.Chmod(mode)
}

// Split checks that rel is a plain relative path and returns its parts,
// without "" and "." parts ("" and "." give none). A path that is absolute,
// has a ".." part or a NUL byte is refused with ErrUnsafePath.
func Split(rel string) ([]string, error) {
	if strings.HasPrefix(rel, "/") {
		return nil, fmt.Errorf("%q: absolute: %w", rel, ErrUnsafePath)
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return nil, fmt.Errorf("%q: holds a NUL byte: %w", rel, ErrUnsafePath)
	}
	var parts []string
	for p := range strings.SplitSeq(rel, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("%q: holds \"..\": %w", rel, ErrUnsafePath)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func (d *Dir) join(rel string) string {
	if rel == "" || rel == "." {
		return d.f.Name()
	}
	return d.f.Name() + "/" + rel
}

// noOpenat2 is set once openat2 is found missing (ENOSYS: a kernel older
// than 5.6, or a seccomp filter that refuses it, as some container
// runtimes' do with EPERM); the walk is used from then on. Tests set it to
// test the walk.
var noOpenat2 atomic.Bool

// how is what openat2 is asked to resolve with: beneath the folder, no
// symlink anywhere, no /proc magic link.
const how = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat opens rel beneath d.
func (d *Dir) openat(rel string, flag int, mode uint32) (int, error) {
	parts, err := Split(rel)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	flag |= unix.O_CLOEXEC
	if len(parts) == 0 {
		if flag&(unix.O_CREAT|unix.O_WRONLY|unix.O_RDWR) != 0 {
			return -1, &fs.PathError{Op: "open", Path: d.join(rel), Err: unix.EISDIR}
		}
		parts = []string{"."}
	}
	clean := strings.Join(parts, "/")
	if !noOpenat2.Load() {
		fd, err := retry(func() (int, error) {
			// No O_NOFOLLOW: with O_DIRECTORY it makes a last part
			// that is a link fail with ENOTDIR, where
			// RESOLVE_NO_SYMLINKS says ELOOP for every part alike.
			return unix.Openat2(d.Fd(), clean, &unix.OpenHow{Flags: uint64(flag), Mode: uint64(mode), Resolve: how})
		})
		switch err {
		case nil:
			return fd, nil
		case unix.ENOSYS, unix.EPERM:
			// EPERM from openat2 itself is a filter's answer; a file
			// that may not be opened gives EACCES. The walk below
			// says which it was.
			if err == unix.ENOSYS || !walkAllowed(d, parts, flag, mode) {
				noOpenat2.Store(true)
			} else {
				return -1, &fs.PathError{Op: "open", Path: d.join(rel), Err: err}
			}
		default:
			return -1, &fs.PathError{Op: "open", Path: d.join(rel), Err: err}
		}
	}
	fd, err := walk(d.Fd(), parts, flag|unix.O_NOFOLLOW, mode)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: d.join(rel), Err: err}
	}
	return fd, nil
}

// walkAllowed is true when the walk, too, is refused with EPERM: then
// openat2's EPERM was the file's own, not a filter's.
func walkAllowed(d *Dir, parts []string, flag int, mode uint32) bool {
	fd, err := walk(d.Fd(), parts, flag|unix.O_NOFOLLOW, mode)
	if err == nil {
		unix.Close(fd)
		return false
	}
	return err == unix.EPERM
}

// walk opens parts beneath dirfd one at a time: each folder with O_PATH
// (passing through needs search permission only, as a path lookup does),
// O_DIRECTORY and O_NOFOLLOW, so a symlink fails with ENOTDIR, which is
// turned into ELOOP, as openat2 says it; the last part with flag, which
// holds O_NOFOLLOW.
func walk(dirfd int, parts []string, flag int, mode uint32) (int, error) {
	cur := dirfd
	closeCur := func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}
	defer func() { closeCur() }()
	for _, p := range parts[:len(parts)-1] {
		next, err := retry(func() (int, error) {
			return unix.Openat(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		if err == unix.ENOTDIR && isSymlink(cur, p) {
			err = unix.ELOOP
		}
		if err != nil {
			return -1, err
		}
		closeCur()
		cur = next
	}
	last := parts[len(parts)-1]
	fd, err := retry(func() (int, error) { return unix.Openat(cur, last, flag, mode) })
	if err == unix.ENOTDIR && flag&unix.O_DIRECTORY != 0 && isSymlink(cur, last) {
		err = unix.ELOOP
	}
	return fd, err
}

func isSymlink(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// retry calls open until it is not interrupted; openat2 also answers
// EAGAIN when a rename elsewhere raced the lookup, and is asked again.
func retry(open func() (int, error)) (int, error) {
	for i := 0; ; i++ {
		fd, err := open()
		if err == unix.EINTR || (err == unix.EAGAIN && i < 100) {
			continue
		}
		return fd, err
	}
}
