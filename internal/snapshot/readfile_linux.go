package snapshot

import (
	"errors"
	"io"
	"io/fs"
	"syscall"

	"github.com/ferry-ml/ferry/internal/beneath"
)

// openFlags open a file of a plan to read: a file (or a folder above it)
// swapped for a symlink since the walk is refused (internal/beneath), and
// one swapped for a FIFO does not block the open (O_NONBLOCK; it then
// reads as empty, so as shrunk).
const openFlags = syscall.O_RDONLY | syscall.O_NONBLOCK

// readFileInto reads the file name beneath d into buf until buf is full or the file
// ends, and returns how much it read. It uses the system calls directly:
// an os.File costs a file-status call, a poller registration and
// allocations, which a tree of many tiny files pays for many times over.
func readFileInto(d *beneath.Dir, name string, buf []byte) (int64, error) {
	fd, err := open(d, name)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		k, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return int64(n), &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if k == 0 {
			break
		}
		n += k
	}
	return int64(n), nil
}

// openFile opens the file name to read it as a stream, and returns its
// size; a file that is no longer a regular file is an error.
func openFile(d *beneath.Dir, name string) (io.ReadCloser, int64, error) {
	fd, err := open(d, name)
	if err != nil {
		return nil, 0, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, 0, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, 0, &fs.PathError{Op: "open", Path: name, Err: errors.New("no longer a regular file")}
	}
	return fdReader(fd), st.Size, nil
}

// open opens the file name beneath d, following no symlink on the way.
func open(d *beneath.Dir, name string) (int, error) {
	return d.OpenFd(name, openFlags)
}

// fdReader reads a file descriptor.
type fdReader int

func (f fdReader) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f fdReader) Close() error { return syscall.Close(int(f)) }
