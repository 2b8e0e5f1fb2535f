package local

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The folders on the way to an attempt's (the runs dir, the job's, the
// attempt's) have runsDirMode. Each is made with one mkdir and chmodded
// only when it was there already (made by a server with another --run-as,
// or an earlier attempt's) or the process's umask would take bits off the
// mode: the runs dir once per target, the others per attempt. Before, the
// server's launch chmodded all three on every launch (bench/dispatch).

// MakeAttemptDir makes an attempt's folder dir (RUNS/JOB/ATTEMPT) and its
// job's folder with the mode the way to an attempt has when jobs run as
// runAs ("" = the runner's own account). The runs dir is made too when it
// is missing. The local executor calls it in the attempt's own goroutine,
// off the server's dispatch path.
func MakeAttemptDir(dir, runAs string) error {
	mode := runsDirMode(runAs)
	job := filepath.Dir(dir)
	err := makeDir(job, mode)
	if errors.Is(err, fs.ErrNotExist) {
		if err := makeDir(filepath.Dir(job), mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		err = makeDir(job, mode)
	}
	if err != nil {
		return err
	}
	return makeDir(dir, mode)
}

// makeDir makes dir with mode, or gives an existing dir that mode. It
// returns fs.ErrNotExist when dir's parent is missing.
func makeDir(dir string, mode os.FileMode) error {
	err := os.Mkdir(dir, mode)
	switch {
	case err == nil && mode&umask() == 0:
		return nil // made with the whole mode
	case err == nil || errors.Is(err, fs.ErrExist):
		return os.Chmod(dir, mode)
	default:
		return err
	}
}

var (
	umaskOnce sync.Once
	umaskBits os.FileMode
)

// umask is the process's file mode creation mask, read once from
// /proc/self/status (setting the mask to read it would race with files
// made meanwhile); when that cannot be read, every bit, so that each
// folder made is chmodded as before.
func umask() os.FileMode {
	umaskOnce.Do(func() {
		umaskBits = 0o777
		f, err := os.Open("/proc/self/status")
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					umaskBits = os.FileMode(n) & 0o777
				}
				return
			}
		}
	})
	return umaskBits
}

// readyRunsDir makes the runs dir with its mode, once per target (again
// after a failure).
func (t *Target) readyRunsDir() error {
	t.dirsMu.Lock()
	defer t.dirsMu.Unlock()
	if t.runsReady {
		return nil
	}
	mode := runsDirMode(t.cfg.RunAs)
	if err := os.MkdirAll(filepath.Dir(t.cfg.RunsDir), 0o755); err != nil {
		return err
	}
	if err := makeDir(t.cfg.RunsDir, mode); err != nil {
		return err
	}
	t.runsReady = true
	return nil
}
