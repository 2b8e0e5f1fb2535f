package snapshot

import (
	"io/fs"
	"os"
	"syscall"
)

// statOf returns what the stat cache keys a file by; false when the
// FileInfo does not say it.
func statOf(fi fs.FileInfo) (fileStat, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStat{}, false
	}
	return fileStat{
		size:  fi.Size(),
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
		ino:   st.Ino,
		dev:   st.Dev,
	}, true
}

// ownedByMe reports whether this process's user owns the file.
func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
