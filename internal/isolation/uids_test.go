package isolation

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func leaseDir(t *testing.T) {
	t.Helper()
	old := LeaseDir
	LeaseDir = filepath.Join(t.TempDir(), "uids")
	t.Cleanup(func() { LeaseDir = old })
}

func TestParseUIDRange(t *testing.T) {
	r, err := ParseUIDRange(DefaultUIDs)
	if err != nil || r.First != 80000 || r.Last != 89999 || r.String() != DefaultUIDs {
		t.Fatalf("ParseUIDRange(%q) = %v, %v", DefaultUIDs, r, err)
	}
	for _, bad := range []string{"", "80000", "0-100", "500-2000", "90000-80000", "x-y", "1000-4294967295"} {
		if _, err := ParseUIDRange(bad); err == nil {
			t.Errorf("ParseUIDRange(%q) accepted", bad)
		}
	}
}

// TestLeasesAreExclusive: two attempts never hold one uid; a range that
// is all held says so; a released uid is taken again.
func TestLeasesAreExclusive(t *testing.T) {
	leaseDir(t)
	r := UIDRange{First: 80100, Last: 80101}
	a, err := Acquire(r, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire(r, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.UID == b.UID {
		t.Fatalf("both attempts hold uid %d", a.UID)
	}
	if _, err := Acquire(r, ""); !errors.Is(err, ErrNoUID) {
		t.Fatalf("a third lease of two uids: %v, want ErrNoUID", err)
	}
	if err := a.Release(""); err != nil {
		t.Fatal(err)
	}
	c, err := Acquire(r, "")
	if err != nil || c.UID != a.UID {
		t.Fatalf("after a release: %v, %v; want uid %d again", c, err, a.UID)
	}
	if u := c.User("ferry-job"); u.UID != c.UID || u.GID != c.UID || !strings.HasPrefix(u.Name, "ferry-job-") {
		t.Errorf("User = %+v", u)
	}
	c.Release("")
	b.Release("")
}

// TestLeaseOfADeadHolderIsReclaimed: a holder that died without releasing
// (its descriptor closed, as the kernel does for a killed runner) leaves
// an attempt folder open to its uid and a process of the uid running;
// the next holder of the uid closes the folder to all but root and kills
// the process before the uid is used again. A clean release does both
// itself.
func TestLeaseOfADeadHolderIsReclaimed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a process as another uid; run the tests as root (CI does)")
	}
	leaseDir(t)
	r := UIDRange{First: 80200, Last: 80200}
	attempt := filepath.Join(t.TempDir(), "attempt")
	if err := os.Mkdir(attempt, 0o711); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(r, attempt)
	if err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sleep", "300")
	left.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: l.UID, Gid: l.UID, Groups: []uint32{}}}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- left.Wait() }()
	t.Cleanup(func() { left.Process.Kill() })
	l.f.Close() // the runner died: its lock is gone, its lease not released

	next, err := Acquire(r, filepath.Join(t.TempDir(), "next"))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release("")
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the dead holder's process of the uid is still running")
	}
	if fi, err := os.Stat(attempt); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the dead holder's attempt folder: %v, %v; want 0700", fi.Mode(), err)
	}
}

func TestReleaseClosesTheFolderAndKills(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a process as another uid; run the tests as root (CI does)")
	}
	leaseDir(t)
	attempt := filepath.Join(t.TempDir(), "attempt")
	if err := os.Mkdir(attempt, 0o711); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(UIDRange{First: 80300, Last: 80300}, attempt)
	if err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sleep", "300")
	left.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: l.UID, Gid: l.UID, Groups: []uint32{}}, Setsid: true}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { left.Process.Kill() })
	if err := l.Release(attempt); err != nil {
		t.Fatal(err)
	}
	if err := left.Wait(); err == nil {
		t.Error("the attempt's process ended by itself; want it killed")
	}
	if fi, _ := os.Stat(attempt); fi.Mode().Perm() != 0o700 {
		t.Errorf("attempt folder %v, want 0700", fi.Mode())
	}
	b, _ := os.ReadFile(filepath.Join(LeaseDir, "80300"))
	if line, _, _ := strings.Cut(string(b), "\n"); line != released {
		t.Errorf("lease file starts %q, want %q", line, released)
	}
}
