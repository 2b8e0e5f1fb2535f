package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// TestServerDiskFullPausesLogDeliveryAndLosesNothing puts the server's
// job logs on a 1 MiB file system and runs a job that prints 3 MiB: the
// job shows that its log delivery is paused because the server's disk is
// full, keeps running, and once there is room again its whole log arrives,
// in order, with nothing lost.
func TestServerDiskFullPausesLogDeliveryAndLosesNothing(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	testutil.MountTmpfs(t, logs, "1m")
	s := &server{t: t, dir: dir, work: workDir(t), addr: freeAddr(t), home: t.TempDir(), output: &syncBuffer{}}
	s.start()
	t.Cleanup(s.end)

	const lines = 30000 // of 100 bytes: 3 MiB
	file := jobFile(t, `
type: command
command: |
  python3 -c 'import sys
  for i in range(30000): sys.stdout.write("line %06d %s\n" % (i, "x" * 88))'
  echo printed-all
  while [ ! -e go-on ]; do sleep 0.1; done
  echo after-the-disk-had-room
`, nil)
	s.mustFerry("job", "create", "-f", file, "--name", "full-1")

	deadline := time.Now().Add(60 * time.Second)
	for {
		j := s.show("full-1")
		if strings.Contains(j.StatusReason, "server disk full: log delivery paused") {
			if j.Status != "Running" {
				t.Errorf("job is %s while its log waits, want Running", j.Status)
			}
			break
		}
		if time.Now().After(deadline) || j.Status == "Completed" || j.Status == "Failed" {
			t.Fatalf("job %s (%s) never showed the full disk; server output:\n%s", j.Status, j.StatusReason, s.output)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustContain(t, "server output", s.output.String(), "disk is full")

	if err := testutil.ResizeTmpfs(logs, "64m"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.work, "runs", "full-1", "1", "wd", "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j := s.waitStatus("full-1", "Completed", "Failed")
	if j.Status != "Completed" {
		t.Fatalf("job = %+v", j)
	}
	if strings.Contains(j.StatusReason, "disk full") {
		t.Errorf("reason %q still says the disk is full", j.StatusReason)
	}
	log := s.mustFerry("job", "stream", "full-1").stdout
	got := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	if len(got) != lines+2 || got[lines] != "printed-all" || got[lines+1] != "after-the-disk-had-room" {
		t.Fatalf("log has %d lines (want %d), ending %q", len(got), lines+2, got[max(0, len(got)-2):])
	}
	for i := range lines {
		if want := fmt.Sprintf("line %06d %s", i, strings.Repeat("x", 88)); got[i] != want {
			t.Fatalf("log line %d = %q, want %q", i, got[i], want)
		}
	}
}
