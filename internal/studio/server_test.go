package studio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
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

// ferryBin is a ferry binary built once: the servers the tests start are
// real `ferry server` processes, which start runners from a copy of their
// own executable (a test binary cannot stand in for it).
var ferryBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ferry-studio-test-")
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

type testServer struct {
	url, token, dir string
	work            string               // a directory every account can pass through
	addr            string               // --addr; "" = 127.0.0.1:0
	output          *testutil.SyncBuffer // what the server printed
	stop            func()               // ends the server
}

func (s *testServer) client() *client.Client { return client.New(s.url, s.token) }

// startServer starts `ferry server` on a fresh data dir and a free
// loopback port, and stops it (after ending its jobs) when the test ends.
func startServer(t *testing.T) *testServer {
	t.Helper()
	return startServerEnv(t, nil)
}

// startServerEnv is startServer with env added to the server's
// environment (a Slurm test cluster's SLURM_CONF).
func startServerEnv(t *testing.T, env []string) *testServer {
	t.Helper()
	return startServerAt(t, env, "127.0.0.1:0")
}

// startServerAt is startServerEnv listening on addr: a Kubernetes
// compute is attached only to a server its pods can reach, at an address
// that is not loopback.
func startServerAt(t *testing.T, env []string, addr string) *testServer {
	t.Helper()
	dir := t.TempDir()
	work, err := os.MkdirTemp("", "ferry-studio-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o711); err != nil { // a root server's jobs run as ferry-job
		t.Fatal(err)
	}
	ts := &testServer{dir: dir, work: work, addr: addr}
	ts.launch(t, env)
	t.Cleanup(func() {
		if ts.url != "" {
			endJobs(t, ts.client())
		}
		ts.stop()
	})
	return ts
}

// launch starts `ferry server` on ts's data dir and waits until it answers.
func (ts *testServer) launch(t *testing.T, env []string) {
	t.Helper()
	var out testutil.SyncBuffer
	os.Remove(filepath.Join(ts.dir, server.InfoFile))
	cmd := exec.Command(ferryBin, "server", "--data-dir", ts.dir, "--work-dir", filepath.Join(ts.work, "work"), "--addr", ts.addr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ts.output, ts.url = &out, ""
	ts.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		var info server.Info
		data, err := os.ReadFile(filepath.Join(ts.dir, server.InfoFile))
		if err == nil && json.Unmarshal(data, &info) == nil && info.URL != "" {
			tok, terr := os.ReadFile(filepath.Join(ts.dir, server.TokenFile))
			if terr == nil && client.New(info.URL, string(tok)).Health(context.Background()) == nil {
				ts.url, ts.token = info.URL, strings.TrimSpace(string(tok))
				return
			}
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

// restart stops the server and starts it again on the same data dir.
func (ts *testServer) restart(t *testing.T) {
	t.Helper()
	ts.stop()
	ts.launch(t, nil)
}

// endJobs cancels the jobs still active and waits for them to end.
func endJobs(t *testing.T, c *client.Client) {
	ctx := context.Background()
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

// ferry runs the CLI against the server and returns its output.
func (s *testServer) ferry(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ferry %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// noRedirects is an HTTP client that shows redirects instead of
// following them, with a cookie jar.
func noRedirects(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
