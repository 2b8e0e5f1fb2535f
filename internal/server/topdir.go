package server

import (
	"os"

	"golang.org/x/sys/unix"
)

// The shared work root holds one work dir per data dir, and a server
// starting there removes the work dirs of data dirs that are gone
// (sharedwork.go): thousands of attempt folders at once after a burst of
// small jobs. On ext4 without a journal, the allocator skips, one by one,
// every inode of a block group freed in the last minutes when it makes a
// new one (ext4's recently_deleted), and a new work dir and all its
// attempt folders went to the block group of the ones just removed: in
// bench/dispatch, run after run, the local executor's CPU per job went from
// 1.5 ms to 4–6 ms, nearly all of it in making the attempts' six inodes.
// Marked as a top of directory hierarchies (chattr +T, FS_TOPDIR_FL), the
// root makes ext4's Orlov allocator place each new work dir as it places
// a directory at the root of the file system: in a block group of its
// own, with free inodes and few directories. Other file systems ignore
// or refuse the flag, which changes nothing there.

// fsTopDirFL is FS_TOPDIR_FL of linux/fs.h (golang.org/x/sys/unix has no
// name for it).
const fsTopDirFL = 0x00020000

// markTopDir marks dir as a top of directory hierarchies for the file
// system's allocator, keeping its other flags. It says whether dir has
// the mark now; a file system without such flags leaves it unmarked.
func markTopDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false
	}
	if flags&fsTopDirFL != 0 {
		return true
	}
	return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopDirFL)) == nil
}
