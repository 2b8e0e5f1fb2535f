package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// MountTmpfs mounts a tmpfs of size (as mount(8) reads it: "1m") on the
// existing directory dir, so that a test can fill a real file system;
// the test's cleanup unmounts it. It skips the test when the mount cannot
// be made (it needs root; fails under CI=true).
func MountTmpfs(t testing.TB, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		skip(t, "mounting a small tmpfs needs root; run the test as root")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		skip(t, "cannot mount a tmpfs on %s (a container without CAP_SYS_ADMIN?): %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// ResizeTmpfs changes the size of a tmpfs MountTmpfs mounted.
func ResizeTmpfs(dir, size string) error {
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("remount %s: %v: %s", dir, err, out)
	}
	return nil
}
