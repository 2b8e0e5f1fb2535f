package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// With RunAs, runners are told to start jobs as that account, and the
// way from the node's directory to the attempt's is passable (0711) by it.
func TestRunAsReachesRunnersAndTheWayIsPassable(t *testing.T) {
	fakeNvidiaSMI(t, "", 0)
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	startAgent(t, fs, dir, func(c *Config) { c.RunAs = "nobody" })
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, RunToken: "run-secret-1"}}
	})
	rd := runDir(dir, "j", 1)
	pid := runnerPID(t, rd)
	args := readLines(t, filepath.Join(rd, "args"))
	if d := cmp.Diff([]string{"--run-as", "nobody"}, args[len(args)-2:]); d != "" {
		t.Errorf("runner arguments end (-want +got):\n%s", d)
	}
	for _, d := range []string{dir, filepath.Join(dir, "runs"), filepath.Dir(rd), rd} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o711 {
			t.Errorf("%s has mode %04o, want 0711", d, fi.Mode().Perm())
		}
	}
	if err := os.WriteFile(filepath.Join(rd, "exit"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "the runner to end", func() bool { return !running(pid) })
}
