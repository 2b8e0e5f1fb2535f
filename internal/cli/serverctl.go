package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/server"
)

// serverState is what `ferry server status` says about a data dir's server.
type serverState struct {
	Running bool   `json:"running"`
	URL     string `json:"url,omitempty"`
	PID     int    `json:"pid,omitempty"`
	DataDir string `json:"data_dir"`
	WorkDir string `json:"work_dir,omitempty"`
	Log     string `json:"log"`
	Version string `json:"version,omitempty"`
	// Problem says why a recorded server is not counted as running.
	Problem string `json:"problem,omitempty"`
}

// localServerState reads the server recorded in dir (server.json, written
// by the server once it listens and removed when it ends) and checks that
// its process lives and its API answers.
func localServerState(ctx context.Context, dir string) serverState {
	st := serverState{DataDir: dir, Log: filepath.Join(dir, "server.log")}
	data, err := os.ReadFile(filepath.Join(dir, server.InfoFile))
	if err != nil {
		return st
	}
	var info server.Info
	if err := json.Unmarshal(data, &info); err != nil || info.PID <= 0 {
		st.Problem = fmt.Sprintf("%s is not a server record; remove it", filepath.Join(dir, server.InfoFile))
		return st
	}
	st.URL, st.PID, st.WorkDir, st.Version = info.URL, info.PID, info.WorkDir, info.Version
	if !processAlive(info.PID) {
		st.Problem = fmt.Sprintf("the server recorded there (pid %d) is gone; it did not end cleanly", info.PID)
		return st
	}
	if _, ok := liveServer(ctx, dir); !ok {
		st.Problem = fmt.Sprintf("process %d lives but does not answer at %s", info.PID, info.URL)
		return st
	}
	st.Running = true
	return st
}

// processAlive says whether pid is a process that has not ended (a zombie
// has).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// isServerOf says whether pid runs `ferry server --data-dir dir`, so that a
// pid recorded long ago and reused by another program is never signaled.
func isServerOf(pid int, dir string) (bool, string) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false, ""
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	isServer := false
	for i, a := range args {
		switch {
		case a == "server" && i == 1:
			isServer = true
		case a == "--data-dir" && i+1 < len(args):
			if abs, err := filepath.Abs(args[i+1]); err == nil && isServer && abs == dir {
				return true, ""
			}
		case strings.HasPrefix(a, "--data-dir="):
			if abs, err := filepath.Abs(strings.TrimPrefix(a, "--data-dir=")); err == nil && isServer && abs == dir {
				return true, ""
			}
		}
	}
	return false, strings.Join(args, " ")
}

// serverDir is --data-dir, or the local workspace's directory.
func (a *app) serverDir(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	return a.home()
}

// noteRemote says, when FERRY_URL is set, that the other commands use that
// workspace and not the local one this command is about.
func (a *app) noteRemote() {
	if u := a.getenv("FERRY_URL"); u != "" {
		fmt.Fprintf(a.stderr, "note: FERRY_URL is set, so the other commands use the workspace at %s, not this local one\n", u)
	}
}

func (a *app) serverStatusCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether the local workspace's background server runs: its URL, pid, data dir and version",
		Long: `Say whether the server of the local workspace runs: the one the CLI
starts in the background (in $FERRY_HOME, default ~/.ferry) when no
$FERRY_URL is set, or the one of --data-dir. It exits 0 when the server
runs and answers, 3 when it does not (as LSB status commands do).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			d, err := a.serverDir(dir)
			if err != nil {
				return err
			}
			a.noteRemote()
			st := localServerState(cmd.Context(), d)
			if err := a.print(st, func(w *tabwriter.Writer) { a.showServerState(w, st) }); err != nil {
				return err
			}
			if !st.Running {
				return &exitError{code: 3}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "data-dir", "", "data dir of the server (default: the local workspace, $FERRY_HOME or ~/.ferry)")
	return cmd
}

func (a *app) showServerState(w *tabwriter.Writer, st serverState) {
	if st.Running {
		fmt.Fprintf(w, "server:\trunning\n")
	} else {
		fmt.Fprintf(w, "server:\tnot running (the next ferry command without FERRY_URL starts it)\n")
	}
	if st.Problem != "" {
		fmt.Fprintf(w, "problem:\t%s\n", st.Problem)
	}
	if st.Running {
		fmt.Fprintf(w, "url:\t%s\n", st.URL)
		fmt.Fprintf(w, "pid:\t%d\n", st.PID)
	}
	fmt.Fprintf(w, "data dir:\t%s\n", st.DataDir)
	if st.WorkDir != "" {
		fmt.Fprintf(w, "work dir:\t%s\n", st.WorkDir)
	}
	fmt.Fprintf(w, "log:\t%s\n", st.Log)
	if st.Running {
		v := orDash(st.Version)
		if st.Version != "" && st.Version != version() {
			v += " (this CLI is " + version() + "; `" + a.self + " server stop` and the next command starts this one)"
		}
		fmt.Fprintf(w, "version:\t%s\n", v)
		fmt.Fprintf(w, "stop it:\t%s server stop\n", a.self)
	}
}

func (a *app) serverStopCmd() *cobra.Command {
	var dir string
	var timeout time.Duration
	var all bool
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the local workspace's background server (SIGTERM, then wait until it has ended)",
		Long: `Stop the server of the local workspace: the one the CLI starts in the
background (in $FERRY_HOME, default ~/.ferry), or the one of --data-dir.
It sends SIGTERM and waits until the process has ended. Jobs on the local
target, compute instances, the nodes of process-provider clusters and
endpoints' replicas keep running and report back when a server runs
again; the next ferry command without FERRY_URL starts one, at the same
address (kept in $FERRY_HOME/server.addr). A server started at another
address is found again too: what runs on this machine reads its new URL
from the work dir's server.url.

With --all it stops all of that too: every process on this machine run
from the server's binaries (the local executor, runners, agents of
nodes), with SIGTERM (a runner stops its job as a cancel does), and
SIGKILL for what still runs after --timeout. Nodes of the docker, exec
and ssh providers are not processes of this machine's; delete their
computes first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := a.serverDir(dir)
			if err != nil {
				return err
			}
			a.noteRemote()
			if all {
				return a.stopAll(cmd.Context(), d, timeout)
			}
			return a.stopServer(cmd.Context(), d, timeout, false)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also stop everything the server started on this machine: the local executor, runners and their jobs, agents of instances and process-provider nodes, endpoints' replicas")
	cmd.Flags().StringVar(&dir, "data-dir", "", "data dir of the server (default: the local workspace, $FERRY_HOME or ~/.ferry)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the server (with --all: and then what it started) to end after SIGTERM")
	return cmd
}

// stopServer ends the server recorded in dir: SIGTERM, then it waits until
// the process is gone. No server there is not an error. With all, what
// the server started is stopped next (stopAll), so the last line does not
// say that it keeps running.
func (a *app) stopServer(ctx context.Context, dir string, timeout time.Duration, all bool) error {
	data, err := os.ReadFile(filepath.Join(dir, server.InfoFile))
	var info server.Info
	if err == nil {
		err = json.Unmarshal(data, &info)
	}
	if err != nil || info.PID <= 0 || !processAlive(info.PID) {
		fmt.Fprintf(a.stderr, "no Ferry workspace server runs for %s; nothing to stop\n", dir)
		return nil
	}
	if ok, what := isServerOf(info.PID, dir); !ok {
		return fmt.Errorf("process %d, recorded in %s, is not `ferry server --data-dir %s` (it is %q), so it is not stopped; if no server runs, remove that file",
			info.PID, filepath.Join(dir, server.InfoFile), dir, what)
	}
	if err := syscall.Kill(info.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop the server (pid %d): %w", info.PID, err)
	}
	fmt.Fprintf(a.stderr, "stopping the Ferry workspace server at %s (pid %d)...\n", info.URL, info.PID)
	deadline := time.Now().Add(timeout)
	for processAlive(info.PID) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the server (pid %d) is still running %s after SIGTERM; see %s, or end it at once with `kill -KILL %d`",
				info.PID, timeout, filepath.Join(dir, "server.log"), info.PID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if all {
		fmt.Fprintf(a.stderr, "stopped the Ferry workspace server (pid %d, data in %s)\n", info.PID, dir)
		return nil
	}
	fmt.Fprintf(a.stderr, "stopped the Ferry workspace server (pid %d, data in %s); jobs, instances, nodes and endpoints' replicas keep running and report back when a server runs again (`%s server stop --all` stops them too)\n", info.PID, dir, a.self)
	return nil
}
