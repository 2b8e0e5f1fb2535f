//go:build unix

package inferenceserver

import (
	"os"
	"path/filepath"
	"syscall"
)

// socketFile is the device and inode of the socket at path, as this
// process sees it; false when path is no socket, or when its folder is
// not private to the socket's owner: a real folder (not a link) of the
// same owner that no other account may enter (no group or other
// permission bits). The inference server makes its folder so; a socket
// in any other folder could be replaced by another account, which would
// then receive the requests, and the replica's secret with them.
func socketFile(path string) (dev, ino uint64, ok bool) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	di, err := os.Lstat(filepath.Dir(path))
	if err != nil || !di.IsDir() || di.Mode().Perm()&0o077 != 0 {
		return 0, 0, false
	}
	if dst, ok := di.Sys().(*syscall.Stat_t); !ok || dst.Uid != st.Uid {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true // their types differ between systems
}
