package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// ferryBin is the ferry binary built once for all tests.
var ferryBin string

// runRoot is the TMPDIR of this run: every test's folders are in it.
var runRoot string

func TestMain(m *testing.M) {
	// Everything this run makes lives under one root, its TMPDIR, so that
	// the leak check (leaks_test.go) knows its own processes from those of
	// another run on the same machine. Jobs' accounts pass through it and
	// may make temporary files in it, as in /tmp.
	root, err := os.MkdirTemp("", "ferry-e2e-run-")
	if err == nil {
		err = os.Chmod(root, 0o1777)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", root)
	runRoot = root
	dir := filepath.Join(root, "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ferryBin = filepath.Join(dir, "ferry")
	if err := testutil.BuildFerry(ferryBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	code := m.Run()
	if !checkLeftovers(start) && code == 0 {
		code = 1
	}
	os.RemoveAll(root)
	os.Exit(code)
}

// syncBuffer is the buffer the harness collects processes' output in.
type syncBuffer = testutil.SyncBuffer

// server is a `ferry server` process started by a test.
type server struct {
	t      *testing.T
	dir    string
	work   string // --work-dir: jobs' directories, outside dir
	addr   string
	url    string
	token  string
	args   []string
	cmd    *exec.Cmd
	output *syncBuffer // the server's stdout and stderr
	home   string      // FERRY_HOME for CLI calls, so ~/.ferry is never used
	bin    string      // the ferry binary it is started from; "" = ferryBin
	env    []string    // added to this process's environment (SLURM_CONF for Slurm's clients)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer starts a server on a fresh data dir and free loopback port.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startServerEnv(t, nil, args...)
}

// startServerEnv is startServer with env added to the server's
// environment, kept across restarts.
func startServerEnv(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	s := &server{t: t, dir: t.TempDir(), work: workDir(t), addr: freeAddr(t), args: args, home: t.TempDir(), output: &syncBuffer{}, env: env}
	s.start()
	t.Cleanup(func() { s.end() })
	return s
}

// workDir is a server's --work-dir: a fresh directory that the account
// jobs run as when the tests run as root (ferry-job, which the server
// makes) can pass through. t.TempDir's are in a directory only the test's
// user may enter.
func workDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(passableDir(t), "work")
}

// passableDir is a fresh directory that every account may pass through
// (not list), removed when the test ends.
func passableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// jobWritableDir is a fresh directory outside the server's where a job
// may write, whichever account it runs as: for tests that watch a job
// from outside.
func jobWritableDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(passableDir(t), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// jobWritableFile is an empty file in a fresh jobWritableDir that every
// job may append to: each attempt runs as a uid of its own, so a file one
// job makes is not another's to write.
func jobWritableFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(jobWritableDir(t), name)
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	return p
}

func (s *server) start() {
	s.t.Helper()
	os.Remove(filepath.Join(s.dir, "server.json"))
	args := append([]string{"server", "--data-dir", s.dir, "--work-dir", s.work, "--addr", s.addr}, s.args...)
	if os.Getenv("FERRY_E2E_LOCAL_EXECUTOR") == "0" && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--local-executor") }) {
		args = append(args, "--local-executor=false") // the whole suite on a runner process per job
	}
	bin := ferryBin
	if s.bin != "" {
		bin = s.bin
	}
	s.cmd = exec.Command(bin, args...)
	if s.env != nil {
		s.cmd.Env = append(os.Environ(), s.env...)
	}
	s.cmd.Stdout, s.cmd.Stderr = s.output, s.output
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.url = "http://" + s.addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(s.dir, "server.json")); err == nil {
			if resp, err := http.Get(s.url + "/healthz"); err == nil {
				resp.Body.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("server did not start; its output:\n%s", s.output)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(s.dir, "owner.token"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(tok))
}

// kill9 kills the server with SIGKILL, as a crash would.
func (s *server) kill9() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
	}
}

// result is what a CLI call printed and how it exited.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s\n--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// ferry runs the CLI against this server.
func (s *server) ferry(args ...string) result {
	s.t.Helper()
	return runFerry(s.t, []string{"FERRY_URL=" + s.url, "FERRY_TOKEN=" + s.token, "FERRY_HOME=" + s.home}, args...)
}

func runFerry(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// mustFerry runs the CLI and fails the test unless it exits 0.
func (s *server) mustFerry(args ...string) result {
	s.t.Helper()
	r := s.ferry(args...)
	if r.code != 0 {
		s.t.Fatalf("ferry %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// call makes an API request with the given token ("" for none).
func (s *server) call(method, path, token string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// job is the JSON form of a job as `-o json` prints it.
type job struct {
	Name              string             `json:"name"`
	Status            string             `json:"status"`
	StatusReason      string             `json:"status_reason"`
	Compute           string             `json:"compute"`
	ExitCode          *int               `json:"exit_code"`
	Error             string             `json:"error"`
	CancelRequestedBy string             `json:"cancel_requested_by"`
	Handle            string             `json:"handle"`
	Created           *time.Time         `json:"created"`
	Started           *time.Time         `json:"started"`
	Ended             *time.Time         `json:"ended"`
	Metrics           map[string]float64 `json:"metrics"`
	History           []struct {
		To     string    `json:"to"`
		Reason string    `json:"reason"`
		Time   time.Time `json:"time"`
	} `json:"history"`
}

func (s *server) show(name string) job {
	s.t.Helper()
	r := s.mustFerry("job", "show", name, "-o", "json")
	var j job
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		s.t.Fatalf("job show -o json: %v\n%s", err, r.stdout)
	}
	return j
}

// waitStatus waits until the job is in one of the statuses.
func (s *server) waitStatus(name string, statuses ...string) job {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		j := s.show(name)
		for _, st := range statuses {
			if j.Status == st {
				return j
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s is %s, want one of %v", name, j.Status, statuses)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeFiles writes files (path -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// jobFile writes a job YAML (and extra files) into a fresh dir and returns its path.
func jobFile(t *testing.T, yaml string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if files == nil {
		files = map[string]string{}
	}
	files["job.yml"] = yaml
	writeFiles(t, dir, files)
	return filepath.Join(dir, "job.yml")
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}
