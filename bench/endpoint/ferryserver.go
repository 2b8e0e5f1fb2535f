package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/testutil"
	"github.com/ferry-ml/ferry/internal/workload/online"
)

// ferryServer is a `ferry server` process the bench started from a
// binary it built, on a fresh data directory and a free loopback port,
// as the e2e harness starts one (internal/e2e/harness_test.go).
type ferryServer struct {
	root   string // its binary, data and work directories; removed by end
	cmd    *exec.Cmd
	done   chan struct{} // closed once cmd has ended
	url    string
	token  string // the owner's token: sent, never printed
	output *testutil.SyncBuffer
}

// startFerryServer builds ferry and starts its server with args added,
// returning once it answers /healthz.
func startFerryServer(ctx context.Context, args ...string) (*ferryServer, error) {
	root, err := os.MkdirTemp("", "ferry-bench-deployments-")
	if err != nil {
		return nil, err
	}
	// Running as root, the server runs jobs as its own account, which
	// must pass through root to reach the work directory in it.
	if err := os.Chmod(root, 0o711); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	s := &ferryServer{root: root, done: make(chan struct{}), output: &testutil.SyncBuffer{}}
	bin := filepath.Join(root, "bin", "ferry")
	data := filepath.Join(root, "data")
	for _, d := range []string{filepath.Dir(bin), data} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	if err := testutil.BuildFerry(bin); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("%w (go run the bench from inside the repository)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s.url = "http://" + addr
	s.cmd = exec.Command(bin, append([]string{"server", "--data-dir", data, "--work-dir", filepath.Join(root, "work"), "--addr", addr}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.output, s.output
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitHealthy(ctx, data); err != nil {
		s.end()
		return nil, err
	}
	tok, err := os.ReadFile(filepath.Join(data, "owner.token"))
	if err != nil {
		s.end()
		return nil, err
	}
	s.token = strings.TrimSpace(string(tok))
	return s, nil
}

// waitHealthy waits until the server has written server.json (its
// state is open) and answers /healthz.
func (s *ferryServer) waitHealthy(ctx context.Context, data string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(data, "server.json")); err == nil {
			if resp, err := http.Get(s.url + "/healthz"); err == nil {
				resp.Body.Close()
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("ferry server ended at start-up; its output:\n%s", s.output)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ferry server did not answer /healthz in 30 s; its output:\n%s", s.output)
		}
	}
}

// outputTail is the end of the server's output, for an error.
func (s *ferryServer) outputTail() string {
	out := s.output.String()
	if len(out) > 4000 {
		out = "…" + out[len(out)-4000:]
	}
	return out
}

// end stops the server and everything it started, then removes its
// directories. A server that stops leaves its pool nodes' agents and
// runners running on purpose, to ride out a restart; the bench is over,
// so it ends them itself, as the e2e harness does: it kills the ferry
// processes run from the server's copies of its binary (under root),
// except the shims and guards, which end their jobs' trees once their
// runner is gone. Then it waits until no process runs from root or in
// it (a replica's python3 works in its job's directory there), killing
// what is still left after 30 s, and says so.
func (s *ferryServer) end() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	under := func(path string) bool { return strings.HasPrefix(path, s.root+"/") }
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []testutil.Proc
		for _, p := range testutil.Procs() {
			cwd, _ := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/cwd")
			if !under(p.Exe) && !under(cwd) {
				continue
			}
			left = append(left, p)
			if under(p.Exe) && !endsByItself(p) {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				fmt.Fprintf(os.Stderr, "endpoint: killing process %d, left 30 s after the server stopped: %s\n", p.PID, p.CmdLine())
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.RemoveAll(s.root); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "endpoint:", err)
	}
}

// endsByItself tells the ferry processes that end their jobs and then
// themselves once the runner or executor they guard is gone; killing
// them first would leave their jobs' processes behind.
func endsByItself(p testutil.Proc) bool {
	if len(p.Args) > 1 && (p.Args[1] == "runner-shim" || p.Args[1] == "runner-guard") {
		return true
	}
	return len(p.Args) > 2 && p.Args[1] == "local-executor" && p.Args[2] != "--serve"
}

// replicaSecret is the secret of replica job's current attempt, derived
// from the server's workspace key (in its data dir, which the bench made)
// as the server derives it.
func (s *ferryServer) replicaSecret(ctx context.Context, c *client.Client, job string) (string, error) {
	j, err := c.GetJob(ctx, job)
	if err != nil {
		return "", err
	}
	key, err := secrets.LoadOrCreateKey(filepath.Join(s.root, "data", "workspace.key"))
	if err != nil {
		return "", err
	}
	return online.ReplicaSecret(key, job, j.Attempt).Reveal(), nil
}
