package runner

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ferry-ml/ferry/internal/isolation"
)

// A job that runs as another account (Config.RunAs) must reach its own
// directories and nothing of the runner's: the attempt's directory is
// passable but not listable (0711, the runner's), and what the job works
// in is the account's: the working directory with the code, the inputs,
// the named outputs, the log spool (a container job opens it by path) and
// a HOME when the account has none; the folders at the top of those are
// 0700, so no other account reaches what is beneath them. runner.log
// stays the runner's.

// shareAttemptDir makes the attempt's directory passable by the job's
// account and gives it the spool.
func (r *runner) shareAttemptDir() error {
	u := r.cfg.RunAs
	if u == nil {
		return nil
	}
	if err := os.Chmod(r.cfg.Dir, 0o711); err != nil {
		return err
	}
	return os.Lchown(r.spool, int(u.UID), int(u.GID))
}

// giveToJob gives the job's account its directories, once the runner has
// written the code and the inputs into them.
func (r *runner) giveToJob() error {
	u := r.cfg.RunAs
	if u == nil {
		return nil
	}
	if _, err := os.Stat(u.Home); err != nil {
		if err := os.MkdirAll(filepath.Join(r.cfg.Dir, HomeName), 0o700); err != nil {
			return err
		}
	}
	for _, name := range []string{WorkDirName, "inputs", "named-outputs", HomeName} {
		dir := filepath.Join(r.cfg.Dir, name)
		err := isolation.ChownTree(dir, u)
		if err == nil {
			// The attempt's own: no other account passes through.
			err = os.Chmod(dir, 0o700)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// jobHome is HOME of a job that runs as another account: the account's
// home, or one in the attempt's directory when it has none.
func (r *runner) jobHome() string {
	if fi, err := os.Stat(r.cfg.RunAs.Home); err == nil && fi.IsDir() {
		return r.cfg.RunAs.Home
	}
	return filepath.Join(r.cfg.Dir, HomeName)
}

// credential is what the job's host processes run with: nil, the
// runner's own, or the account's.
func (r *runner) credential() *syscall.Credential {
	if r.cfg.RunAs == nil {
		return nil
	}
	return r.cfg.RunAs.Credential()
}
