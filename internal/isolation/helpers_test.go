package isolation

import (
	"io/fs"
	"syscall"
)

func owner(fi fs.FileInfo) (uid, gid uint32) {
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}
