//go:build unix

package inferenceserver

import (
	"os"
	"syscall"
)

// socketFile is the device and inode of the socket at path, as this
// process sees it; false when path is no socket.
func socketFile(path string) (dev, ino uint64, ok bool) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true // their types differ between systems
}
