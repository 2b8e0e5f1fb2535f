package server

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferry-ml/ferry/internal/isolation"
)

// markTopDir sets FS_TOPDIR_FL and keeps the directory's other flags; on
// a file system with such flags (ext4: the tests' TMPDIR on the CI
// machine), the mark is there after it.
func TestMarkTopDir(t *testing.T) {
	dir := t.TempDir()
	f, before := openWithFlags(t, dir)
	if before&fsTopDirFL != 0 {
		t.Fatalf("a fresh directory is marked already (flags %#x)", before)
	}
	if !markTopDir(dir) {
		t.Fatal("markTopDir did not mark the directory")
	}
	if after := flagsOf(t, f); after != before|fsTopDirFL {
		t.Errorf("flags %#x after, want %#x (the mark, and the flags it had)", after, before|fsTopDirFL)
	}
	if !markTopDir(dir) {
		t.Error("a second markTopDir says the directory is not marked")
	}
}

// A work dir made under the shared work root is made after the root is
// marked (topdir.go), so that ext4 places it in a block group of its own.
func TestSharedWorkRootIsMarkedBeforeAWorkDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the shared work root is made by a server run as root: run the tests as root")
	}
	if err := os.MkdirAll(sharedWorkRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	root, flags := openWithFlags(t, sharedWorkRoot)
	// Unmarked first, as a root made by an older server is.
	if err := unix.IoctlSetPointerInt(int(root.Fd()), unix.FS_IOC_SETFLAGS, int(flags&^fsTopDirFL)); err != nil {
		t.Fatal(err)
	}
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil { // other cannot pass
		t.Fatal(err)
	}
	other := &isolation.User{Name: "other", UID: 54321, GID: 54321}
	work, err := workDir(filepath.Join(private, "data"), "", other)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	if filepath.Dir(work) != sharedWorkRoot {
		t.Fatalf("work dir %s, want one under %s", work, sharedWorkRoot)
	}
	if flags := flagsOf(t, root); flags&fsTopDirFL == 0 {
		t.Errorf("%s's flags after a work dir was made there: %#x, want FS_TOPDIR_FL among them", sharedWorkRoot, flags)
	}
}

// openWithFlags opens dir until the test ends and reads its inode flags;
// the test is skipped where dir's file system has none.
func openWithFlags(t *testing.T, dir string) (*os.File, uint32) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Skipf("the file system of %s has no inode flags (%v): run the tests on ext4 (the CI machine's root)", dir, err)
	}
	return f, flags
}

// flagsOf reads the inode flags of f.
func flagsOf(t *testing.T, f *os.File) uint32 {
	t.Helper()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatal(err)
	}
	return flags
}
