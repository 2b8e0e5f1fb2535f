package beneath

import (
	"io/fs"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// statInfo is an fs.FileInfo made from a stat taken relative to a folder's
// descriptor; Sys returns the *syscall.Stat_t.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func fileInfo(name string, st *unix.Stat_t) fs.FileInfo { return &statInfo{name: name, st: *st} }

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }

// Sys returns a *syscall.Stat_t, as os.Lstat's FileInfo does, so that
// code reading owners and inodes works on either.
func (s *statInfo) Sys() any {
	// x/sys/unix and syscall declare Stat_t from the same kernel
	// structure on Linux, field for field.
	return (*syscall.Stat_t)(unsafe.Pointer(&s.st))
}

func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func slicesSort(names []string) { slices.Sort(names) }

// The cast in Sys needs the two declarations to be the same size: this
// does not compile where they are not.
var _ = [1]struct{}{}[unsafe.Sizeof(unix.Stat_t{})-unsafe.Sizeof(syscall.Stat_t{})]
