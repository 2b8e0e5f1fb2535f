package selfexe

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// installInto, set, makes the test binary a process that installs itself
// into the folder it names and prints the path, as `ferry agent` does.
const installInto = "SELFEXE_TEST_INSTALL_INTO"

func TestMain(m *testing.M) {
	if dir := os.Getenv(installInto); dir != "" {
		p, err := Install(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(p)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func fileHash(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Install makes one copy per binary, named by its content, a hard link
// where it can be; and a process started from that copy (a node agent
// started from the server's) makes none of its own: each agent once kept
// another 55 MB.
func TestInstallOnceAndNotAgainFromTheCopy(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bin")
	p, err := Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := fileHash(t, self)
	if want := filepath.Join(dir, "ferry-"+sum[:16]); p != want {
		t.Fatalf("Install = %s, want %s", p, want)
	}
	if got := fileHash(t, p); got != sum {
		t.Fatalf("the copy's content differs from the binary's")
	}
	if again, err := Install(dir); err != nil || again != p {
		t.Fatalf("a second Install = %s, %v; want %s", again, err, p)
	}
	a, _ := os.Stat(self)
	b, _ := os.Stat(p)
	if a.Sys().(*syscall.Stat_t).Dev == b.Sys().(*syscall.Stat_t).Dev && a.Mode().Perm()&0o555 == 0o555 && !os.SameFile(a, b) {
		t.Errorf("the copy on the binary's own file system is not a hard link to it: it takes room")
	}

	// The copy, run, installs itself into another folder: it is a copy
	// already, so it answers its own path and writes nothing.
	other := filepath.Join(t.TempDir(), "node", "bin")
	cmd := exec.Command(p, "-test.run=^$")
	cmd.Env = append(os.Environ(), installInto+"="+other)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the copy's Install: %v", err)
	}
	if string(out) != p {
		t.Errorf("Install run from the copy = %q, want the copy itself %q", out, p)
	}
	if ents, err := os.ReadDir(other); !os.IsNotExist(err) {
		t.Errorf("Install run from the copy wrote %v (%v)", ents, err)
	}
}

// Prune removes the copies of older binaries that no process runs, keeps
// the current one and one that a live process runs, and leaves other
// files alone.
func TestPruneKeepsWhatRuns(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to run a copy of")
	}
	dir := t.TempDir()
	copyOf := func(name string) string {
		t.Helper()
		f, err := os.Open(sleep)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p := filepath.Join(dir, name)
		if err := WriteExecutable(f, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	current := copyOf("ferry-1111111111111111")
	running := copyOf("ferry-2222222222222222")
	idle := copyOf("ferry-3333333333333333")
	other := copyOf("not-a-copy")
	cmd := exec.Command(running, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	removed, err := Prune(dir, current)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{idle}) {
		t.Errorf("Prune removed %v, want only %s", removed, idle)
	}
	for _, p := range []string{current, running, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("Prune removed %s: %v", strings.TrimPrefix(p, dir), err)
		}
	}

	// Once it no longer runs, the next Prune removes it.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if removed, err := Prune(dir, current); err != nil || !slices.Equal(removed, []string{running}) {
		t.Errorf("Prune after the process ended removed %v (%v), want %s", removed, err, running)
	}
}
