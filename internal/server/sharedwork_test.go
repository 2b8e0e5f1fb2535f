package server

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPruneSharedWorkDirsRemovesOnlyAbandonedIdleOnes(t *testing.T) {
	root := t.TempDir()
	live := t.TempDir() // a data dir that still exists
	mk := func(name, dataDir string) string {
		t.Helper()
		d := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Join(d, "runs"), 0o711); err != nil {
			t.Fatal(err)
		}
		if dataDir != "" {
			if err := recordDataDir(d, dataDir); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	gone := filepath.Join(t.TempDir(), "deleted-data")
	abandoned := mk("abandoned", gone)
	kept := mk("kept", live)
	unrecorded := mk("unrecorded", "")
	mine := mk("mine", gone)     // the starting server's own: never removed
	busy := mk("busy", gone)     // a process's command line names it, as a runner's --dir does
	inside := mk("inside", gone) // a process's current directory is in it

	named := exec.Command("sh", "-c", "sleep 60; : "+filepath.Join(busy, "runs", "job"))
	there := exec.Command("sleep", "60")
	there.Dir = filepath.Join(inside, "runs")
	for _, p := range []*exec.Cmd{named, there} {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	}

	got := pruneSharedWorkDirs(root, mine, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if diff := cmp.Diff([]string{abandoned}, got); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	for _, d := range []string{kept, unrecorded, mine, busy, inside} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if _, err := os.Stat(abandoned); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", abandoned, err)
	}
}
