package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ferry-ml/ferry/internal/selfexe"
)

// runnerBinary installs the binary that runners and node agents are
// started from, in the work dir's bin/, and returns its path. It was kept
// in the data dir's bin/ before: some 55 MB on what may be a small volume
// for the store, and a new one at every upgrade (issue 29). The work dir
// holds the runs and the environments, and is on a volume sized for them;
// where it shares the binary's file system the copy is a hard link that
// takes no room. The copies older servers left, there and in the data
// dir, are removed once no process runs them.
//
// bin/ is passable (0711) like the work dir, and the binary 0755: an
// account other than the server's (the jobs', a Slurm job's on this host)
// may run it, where the data dir (0700) let none. Runners themselves start
// as the server's account and only the job's command runs as the jobs'.
func runnerBinary(dataDir, work string, log *slog.Logger) (string, error) {
	bin := filepath.Join(work, "bin")
	if err := os.MkdirAll(bin, 0o711); err != nil {
		return "", fmt.Errorf("the runners' binary: %w", err)
	}
	if err := os.Chmod(bin, 0o711); err != nil {
		return "", fmt.Errorf("the runners' binary: %w", err)
	}
	exe, err := selfexe.Install(bin)
	if err != nil {
		return "", fmt.Errorf("install the ferry binary for runners in %s: %w", bin, err)
	}
	old := filepath.Join(dataDir, "bin")
	for _, d := range []string{bin, old} {
		removed, err := selfexe.Prune(d, exe)
		if err != nil {
			log.Warn("remove older ferry binaries", "dir", d, "err", err)
		}
		for _, p := range removed {
			log.Info("removed an older ferry binary that no process runs", "path", p)
		}
	}
	_ = os.Remove(old) // only once it is empty
	return exe, nil
}
