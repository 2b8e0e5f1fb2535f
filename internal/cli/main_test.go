package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/server"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// ferryBin is a ferry binary built once for the tests that start servers:
// the test binary itself cannot be one, since servers start runners and
// agents from a copy of their own executable.
var ferryBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ferry-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ferryBin = filepath.Join(dir, "ferry")
	if err := testutil.BuildFerry(ferryBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testServer is a `ferry server` process started by a test.
type testServer struct {
	url, token, dir string
}

// startServer starts a server on a fresh data dir and a free loopback port,
// and stops it when the test ends.
func startServer(t *testing.T) *testServer {
	t.Helper()
	dir := t.TempDir()
	work := passableDir(t)
	var out testutil.SyncBuffer
	cmd := exec.Command(ferryBin, "server", "--data-dir", dir, "--work-dir", filepath.Join(work, "work"), "--addr", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var ts *testServer
	t.Cleanup(func() {
		if ts != nil {
			ts.endWork(t)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if url, ok := liveServer(context.Background(), dir); ok {
			tok, err := os.ReadFile(filepath.Join(dir, server.TokenFile))
			if err != nil {
				t.Fatal(err)
			}
			ts = &testServer{url: url, token: strings.TrimSpace(string(tok)), dir: dir}
			return ts
		}
		select {
		case <-exited:
			t.Fatalf("the server ended at start:\n%s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not answer within 60s:\n%s", out.String())
		}
	}
}

// client is an API client of the server with the owner's token.
func (s *testServer) client() *client.Client { return client.New(s.url, s.token) }

// passableDir is a fresh directory every account may pass through: the
// work dir of a server that runs as root, whose jobs run as ferry-job.
func passableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// result is what one CLI run printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ferry runs the CLI in this process against the server, as a user with
// FERRY_URL and FERRY_TOKEN set would.
func (s *testServer) ferry(t *testing.T, args ...string) result {
	t.Helper()
	return runCLI(t, map[string]string{"FERRY_URL": s.url, "FERRY_TOKEN": s.token}, args...)
}

// runCLI runs the CLI in this process with env as its whole environment.
func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a := newApp(&out, &errb, envOf(env))
	a.self = "ferry"
	code := a.run(context.Background(), args)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// mustJSON decodes a CLI's -o json output into v.
func mustJSON(t *testing.T, r result, v any) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("%v: %s", err, r)
	}
}

// writeFiles writes files (path: content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// envOf is getenv of an environment that holds only env.
func envOf(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// endWork ends what a test left running on the server before the server
// stops (a server that stops leaves its jobs running, to ride out a
// restart; a test that is over must not): it deletes every endpoint, so
// their deployments' replicas stop, cancels every job still active, and
// waits up to 30 s until none is.
func (ts *testServer) endWork(t *testing.T) {
	ctx := context.Background()
	c := client.New(ts.url, ts.token)
	if eps, err := c.ListOnlineEndpoints(ctx); err == nil {
		for _, e := range eps {
			_ = c.DeleteOnlineEndpoint(ctx, e.Name)
		}
	}
	active := url.Values{"status": {"Queued,Preparing,Running,Finalizing,CancelRequested"}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		jobs, err := c.ListJobs(ctx, active)
		if err != nil || len(jobs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d jobs still active 30 s after the test asked them to end", len(jobs))
			return
		}
		for _, j := range jobs {
			if j.CancelRequestedBy == "" {
				_, _ = c.CancelJob(ctx, j.Name)
			}
		}
	}
}
