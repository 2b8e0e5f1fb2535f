package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/unixsock"
)

// With Config.Executor, the local target hands its attempts to a
// long-lived `ferry local-executor` (internal/executor) instead of
// starting `ferry runner` for each: it runs them in-process, with the
// same options, and starts each job's shell itself. Starting the ferry
// binary twice per job (runner, then shim) was most of a short job's cost
// (bench/dispatch). The executor is started in its own session, so it
// outlives the server as runners do, and is found again by its socket in
// ExecutorDirName of the runs dir, private to the server's user (0700).
// One that runs another binary, or for another account, takes no new
// attempts: it ends when its attempts have, and a new one is started.

// ExecutorDirName is the executor's folder in the runs dir: its socket
// (ExecutorSocket), and its log.
const ExecutorDirName = ".executor"

// ExecutorSocket is the executor's unix socket in ExecutorDirName.
const ExecutorSocket = "sock"

// ExecutorRequest is what the target sends the executor, as one line of
// JSON (a connection carries as many as the target sends): an attempt to
// run.
type ExecutorRequest struct {
	// ID names the executor the sender wants: its binary and account. An
	// executor with another ID refuses, answering Other, and drains.
	ID        string `json:"id"`
	ServerPID int    `json:"server_pid"` // an idle executor ends when it is gone
	// RunToken is the attempt's run token: a secret, only ever sent over
	// the private socket.
	RunToken string                `json:"run_token"`
	Run      invocation.Invocation `json:"run"`
	// Assignment, when present, is the attempt's assignment as the server
	// made it at the launch: the runner does not fetch it.
	Assignment json.RawMessage `json:"assignment,omitempty"`
}

// ExecutorReply is the executor's answer, one line of JSON.
type ExecutorReply struct {
	OK    bool   `json:"ok,omitempty"`
	Other bool   `json:"other,omitempty"` // another executor's ID, or draining: start a new one
	Error string `json:"error,omitempty"`
}

// executorID is what an executor started now from the target's binary is
// known by: the binary (path, size, change time) and the account jobs run as.
func (t *Target) executorID() (string, error) {
	fi, err := os.Stat(t.cfg.Exe)
	if err != nil {
		return "", fmt.Errorf("the ferry binary for the local executor: %w", err)
	}
	return fmt.Sprintf("%s|%d|%d|%s", t.cfg.Exe, fi.Size(), fi.ModTime().UnixNano(), t.cfg.RunAs), nil
}

// launchInExecutor hands an attempt to the executor, starting one when
// none answers or the one that does is another's.
func (t *Target) launchInExecutor(inv invocation.Invocation, runToken string, assignment json.RawMessage) error {
	t.execMu.Lock()
	defer t.execMu.Unlock()
	id, err := t.executorID()
	if err != nil {
		return err
	}
	dir := filepath.Join(t.cfg.RunsDir, ExecutorDirName)
	if !t.execDirReady {
		if err := makeDir(dir, 0o700); err != nil {
			return fmt.Errorf("the local executor's folder: %w", err)
		}
		t.execDirReady = true
	}
	req := ExecutorRequest{ID: id, ServerPID: os.Getpid(), RunToken: runToken, Run: inv, Assignment: assignment}
	rep, err := t.sendExecutor(dir, req)
	if err == nil && !rep.Other {
		if !rep.OK {
			return fmt.Errorf("the local executor refused attempt %d of %s: %s", inv.Attempt, inv.Job, rep.Error)
		}
		return nil
	}
	// No executor answers, or another's: check the folder again (it may
	// have been removed) before starting one there.
	t.execDirReady = false
	t.dirsMu.Lock()
	t.runsReady = false
	t.dirsMu.Unlock()
	if err := t.readyRunsDir(); err != nil {
		return err
	}
	if err := makeDir(dir, 0o700); err != nil {
		return fmt.Errorf("the local executor's folder: %w", err)
	}
	t.execDirReady = true
	if err := t.startExecutor(dir, id); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for wait := time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		rep, err = t.sendExecutor(dir, req)
		switch {
		case err == nil && rep.OK:
			return nil
		case err == nil && !rep.Other:
			return fmt.Errorf("the local executor refused attempt %d of %s: %s", inv.Attempt, inv.Job, rep.Error)
		case time.Now().After(deadline):
			if err == nil {
				err = errors.New("another executor holds the socket and takes no new attempts")
			}
			return fmt.Errorf("the local executor started but does not answer on %s (its log is %s): %w",
				filepath.Join(dir, ExecutorSocket), filepath.Join(dir, "executor.log"), err)
		}
		time.Sleep(wait)
	}
}

// startExecutor starts `ferry local-executor` in a session of its own.
func (t *Target) startExecutor(dir, id string) error {
	logf, err := os.OpenFile(filepath.Join(dir, "executor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(t.cfg.Exe, "local-executor", "--dir", dir, "--id", id, "--run-as", t.cfg.RunAs)
	cmd.Env = withoutFerryVars(os.Environ()) // no run token: each attempt's comes over the socket
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the local executor: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap it while we live; init does after
	return nil
}

// sendExecutor sends req to the executor of dir and reads its reply, on
// the connection the last launch left open when there is one (a
// connection per launch was a twentieth of the server's CPU and of the
// executor's under bench/dispatch). A request that fails on a connection
// already used is sent again on a new one: the executor may have ended
// meanwhile, and one that took the attempt before its reply was lost
// answers a retried launch OK. An answer of Other closes the connection:
// the next request goes to whichever executor then holds the socket.
// The caller holds execMu.
func (t *Target) sendExecutor(dir string, req ExecutorRequest) (ExecutorReply, error) {
	if t.execConn != nil {
		rep, err := t.execConn.send(req)
		if err == nil && !rep.Other {
			return rep, nil
		}
		t.dropExecConn()
		if err == nil {
			return rep, nil
		}
	}
	conn, err := DialExecutor(dir)
	if err != nil {
		return ExecutorReply{}, err
	}
	t.execConn = &executorConn{conn: conn, r: bufio.NewReader(conn)}
	rep, err := t.execConn.send(req)
	if err != nil || rep.Other {
		t.dropExecConn()
	}
	return rep, err
}

// dropExecConn closes the executor connection kept open, if any.
func (t *Target) dropExecConn() {
	if t.execConn != nil {
		_ = t.execConn.conn.Close()
		t.execConn = nil
	}
}

// executorConn is a connection to the executor: one JSON line a request,
// one a reply, as many as the connection lasts.
type executorConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func (c *executorConn) send(req ExecutorRequest) (ExecutorReply, error) {
	var rep ExecutorReply
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(c.conn).Encode(req); err != nil {
		return rep, err
	}
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return rep, err
	}
	return rep, json.Unmarshal(line, &rep)
}

// DialExecutor connects to the socket of the executor of dir. A unix
// socket's path is bounded (108 bytes); a longer one is reached through
// the folder's descriptor.
func DialExecutor(dir string) (net.Conn, error) {
	return unixsock.Dial(context.Background(), &net.Dialer{Timeout: 2 * time.Second}, filepath.Join(dir, ExecutorSocket))
}
