package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// executorPIDs are the local executors (the executors proper, not their
// guards) of server s.
func executorPIDs(s *server) []int {
	var out []int
	for _, p := range testutil.Procs() {
		if len(p.Args) > 2 && p.Args[1] == "local-executor" && p.Args[2] == "--serve" && strings.Contains(p.CmdLine(), s.work+"/") {
			out = append(out, p.PID)
		}
	}
	return out
}

// A server started from a new ferry binary does not hand attempts to the
// executor of the old one: that one finishes the attempt it runs and
// ends, and a new executor runs the new attempts.
func TestLocalExecutorDrainsForANewBinary(t *testing.T) {
	s := startServer(t, "--local-executor")
	gate := filepath.Join(jobWritableDir(t), "gate")
	file := jobFile(t, fmt.Sprintf("command: while [ ! -e %s ]; do sleep 0.05; done; echo old done\n", gate), nil)
	old := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(old, "Running")
	before := executorPIDs(s)
	if len(before) != 1 {
		t.Fatalf("executors before the new binary = %v, want one", before)
	}

	// A new binary: the same program with a byte more.
	data, err := os.ReadFile(ferryBin)
	if err != nil {
		t.Fatal(err)
	}
	s.bin = filepath.Join(t.TempDir(), "ferry-new")
	if err := os.WriteFile(s.bin, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	s.stop()
	s.start()
	r := s.mustFerry("job", "create", "-f", jobFile(t, "command: echo new done\n", nil), "--stream")
	mustContain(t, "new job", r.stdout, "new done")
	after := executorPIDs(s)
	if len(after) != 2 || !slices.Contains(after, before[0]) {
		t.Fatalf("executors after the new binary = %v, want the old %d and a new one", after, before[0])
	}
	log, _ := os.ReadFile(filepath.Join(s.work, "runs", ".executor", "executor.log"))
	mustContain(t, "executor.log", string(log), "draining")

	// The old one finishes its attempt, then ends.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(old, "Completed")
	mustContain(t, "old job", s.mustFerry("job", "stream", old).stdout, "old done")
	for deadline := time.Now().Add(30 * time.Second); slices.Contains(executorPIDs(s), before[0]); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the old executor %d did not end once its attempt had", before[0])
		}
	}
}
