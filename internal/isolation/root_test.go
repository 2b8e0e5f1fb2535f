package isolation

import (
	"io/fs"
	"os"
	"syscall"
	"testing"
)

// requireRoot skips a test that needs root, except under CI (CI=true),
// which runs as root: there it fails.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and the test is not root: it starts processes as another account (CI runs as root)")
	}
	t.Skip("needs root: it starts processes as or makes files for another account")
}

func owner(fi fs.FileInfo) (uid, gid uint32) {
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}
