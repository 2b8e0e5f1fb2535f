package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/beneath"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/timerslack"
)

// setupOutputLimit bounds how much of a failed setup script's output is
// reported: its end, where the error usually is.
const setupOutputLimit = 16 << 10

// setupState holds the result of the node's setup scripts for heartbeats.
type setupState struct {
	mu     sync.Mutex
	result *nodeproto.SetupResult
}

func (s *setupState) set(r nodeproto.SetupResult) {
	s.mu.Lock()
	s.result = &r
	s.mu.Unlock()
}

func (s *setupState) get() *nodeproto.SetupResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.result
}

// writeSetupScript writes a setup script into dir/setup, which the agent
// (root, where jobs run as another account) runs: through
// internal/beneath, so a symlink in place of the folder or the file,
// wherever it came from, is refused rather than written through.
func writeSetupScript(dir, name, content string) error {
	d, err := beneath.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	f, err := d.OpenFile("setup/"+name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o700)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o700); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runSetup runs the setup scripts in order in dir/setup, each with its
// timeout, and stops at the first that fails.
func runSetup(ctx context.Context, dir string, scripts []nodeproto.SetupScript, env []string) nodeproto.SetupResult {
	work := filepath.Join(dir, "setup")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nodeproto.SetupResult{Script: "setup", ExitCode: -1, Output: err.Error()}
	}
	for _, sc := range scripts {
		env := slices.Clone(env)
		argv := []string{"bash", "-c", sc.Command}
		if sc.Content != "" {
			file := filepath.Join(work, filepath.Base(sc.Name)+".sh")
			if err := writeSetupScript(dir, filepath.Base(file), sc.Content); err != nil {
				return nodeproto.SetupResult{Script: sc.Name, ExitCode: -1, Output: err.Error()}
			}
			// The command, if any, gives the script its arguments, as Azure
			// passes them.
			argv = []string{"bash", "-c", `f="$1"; shift; eval "set -- $FERRY_SETUP_ARGS"; exec bash "$f" "$@"`, "setup", file}
			env = append(env, "FERRY_SETUP_ARGS="+sc.Command)
		}
		timeout := time.Duration(sc.TimeoutSeconds) * time.Second
		if timeout <= 0 {
			timeout = 30 * time.Minute
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		var out bytes.Buffer
		cmd := exec.CommandContext(sctx, argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = work, append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		err := timerslack.StartUser(cmd.Start)
		if err == nil {
			err = cmd.Wait()
		}
		timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			continue
		}
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) && !timedOut {
			code = ee.ExitCode()
		}
		b := out.Bytes()
		if len(b) > setupOutputLimit {
			b = b[len(b)-setupOutputLimit:]
		}
		return nodeproto.SetupResult{Script: sc.Name, ExitCode: code, TimedOut: timedOut, Output: string(b)}
	}
	return nodeproto.SetupResult{OK: true}
}
