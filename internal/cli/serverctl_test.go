package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/server"
)

// goRunCopy puts a copy of ferry where `go run` leaves its builds
// (TMPDIR/go-buildN/b001/exe/ferry) and returns its path.
func goRunCopy(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "go-build")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	exe := filepath.Join(dir, "b001", "exe", "ferry")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(ferryBin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return exe
}

// stopHomeServer ends the server recorded in home, if any, and waits for
// it: a test that failed half-way leaves none running.
func stopHomeServer(home string) {
	data, err := os.ReadFile(filepath.Join(home, server.InfoFile))
	if err != nil {
		return
	}
	var info server.Info
	if json.Unmarshal(data, &info) != nil || info.PID <= 0 {
		return
	}
	_ = syscall.Kill(info.PID, syscall.SIGTERM)
	for i := 0; i < 300 && processAlive(info.PID); i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// A first-hour user runs `go run ./cmd/ferry quickstart` with no ferry on
// the PATH: every command the quickstart suggests must work as written,
// and it says that it left a server running and how to stop it; `server
// status` and `server stop` then show and end that server.
func TestQuickstartFromGoRunThenServerStatusAndStop(t *testing.T) {
	home := filepath.Join(passableDir(t), "home") // its -work sibling is where ferry-job can reach
	t.Cleanup(func() { stopHomeServer(home) })
	exe := goRunCopy(t)
	cmd := exec.Command(exe, "quickstart")
	cmd.Env = []string{"FERRY_HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("quickstart: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	stderr := errb.String()
	for _, want := range []string{
		"`go run ./cmd/ferry job show ",
		"`go run ./cmd/ferry job create -f ",
		"goes on running in the background",
		"`go run ./cmd/ferry server stop` stops it",
		"go build -o ferry ./cmd/ferry",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("quickstart's stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "`ferry ") {
		t.Errorf("quickstart suggests a `ferry` command, but there is no ferry on the PATH:\n%s", stderr)
	}

	env := map[string]string{"FERRY_HOME": home}
	var st serverState
	mustJSON(t, runCLI(t, env, "server", "status", "-o", "json"), &st)
	if !st.Running || st.PID <= 0 || !strings.HasPrefix(st.URL, "http://127.0.0.1:") || st.Version == "" {
		t.Fatalf("status of the running server: %+v", st)
	}
	if diff := cmp.Diff(serverState{Running: true, URL: st.URL, PID: st.PID, DataDir: home, WorkDir: home + "-work", Log: filepath.Join(home, "server.log"), Version: st.Version}, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	r := runCLI(t, env, "server", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "running") || !strings.Contains(r.stdout, st.URL) {
		t.Errorf("status table: %s", r)
	}

	r = runCLI(t, env, "server", "stop")
	if r.code != 0 || !strings.Contains(r.stderr, "stopped the Ferry workspace server") {
		t.Fatalf("stop: %s", r)
	}
	if processAlive(st.PID) {
		t.Errorf("server pid %d still runs after stop said it stopped", st.PID)
	}
	if _, err := os.Stat(filepath.Join(home, server.InfoFile)); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the server ended: %v", server.InfoFile, err)
	}

	r = runCLI(t, env, "server", "status")
	if r.code != 3 || !strings.Contains(r.stdout, "not running") {
		t.Errorf("status after stop: %s", r)
	}
	r = runCLI(t, env, "server", "stop")
	if r.code != 0 || !strings.Contains(r.stderr, "nothing to stop") {
		t.Errorf("second stop: %s", r)
	}
}

// A pid in server.json that is now another program is never signaled.
func TestServerStopLeavesAnUnrelatedProcessAlone(t *testing.T) {
	home := t.TempDir()
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	data, _ := json.Marshal(server.Info{URL: "http://127.0.0.1:1", PID: other.Process.Pid})
	if err := os.WriteFile(filepath.Join(home, server.InfoFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, map[string]string{"FERRY_HOME": home}, "server", "stop")
	if r.code == 0 || !strings.Contains(r.stderr, "is not `ferry server --data-dir") {
		t.Errorf("stop of a pid that is not a server: %s", r)
	}
	if !processAlive(other.Process.Pid) {
		t.Error("stop signaled a process that is not a ferry server")
	}
	r = runCLI(t, map[string]string{"FERRY_HOME": home}, "server", "status")
	if r.code != 3 || !strings.Contains(r.stdout, "does not answer") {
		t.Errorf("status: %s", r)
	}
}

func TestSelfCommand(t *testing.T) {
	for _, c := range []struct{ exe, argv0, want string }{
		{"/tmp/go-build123/b001/exe/ferry", "/tmp/go-build123/b001/exe/ferry", "go run ./cmd/ferry"},
		{"/root/.cache/go-build/ab/abcdef-d/ferry", "ferry", "go run ./cmd/ferry"},
		{"/usr/local/bin/ferry", "ferry", "ferry"},
		{"/home/me/src/ferry/ferry", "./ferry", "./ferry"},
		{"/tmp/ferry", "/tmp/ferry", "/tmp/ferry"},
	} {
		if got := selfCommand(c.exe, c.argv0, "/tmp", "/root/.cache/go-build"); got != c.want {
			t.Errorf("selfCommand(%q, %q) = %q, want %q", c.exe, c.argv0, got, c.want)
		}
	}
}

// ferryIn runs the ferry binary on the local workspace in home.
func ferryIn(t *testing.T, home string, args ...string) result {
	t.Helper()
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = append(os.Environ(), "FERRY_HOME="+home, "FERRY_URL=", "FERRY_TOKEN=")
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

// The server the CLI starts for a FERRY_HOME comes back at the address it
// first had, after `server stop` and after a crash: what it started calls
// that address. The address is the one recorded in server.addr.
func TestLocalWorkspaceKeepsItsAddress(t *testing.T) {
	home := filepath.Join(passableDir(t), "home")
	t.Cleanup(func() { stopHomeServer(home) })
	urlOf := func() serverState {
		t.Helper()
		var st serverState
		r := ferryIn(t, home, "server", "status", "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || !st.Running {
			t.Fatalf("status: %v %s", err, r)
		}
		return st
	}
	if r := ferryIn(t, home, "job", "list"); r.code != 0 {
		t.Fatalf("first command: %s", r)
	}
	first := urlOf()
	recorded, err := os.ReadFile(filepath.Join(home, localAddrFile))
	if err != nil || "http://"+strings.TrimSpace(string(recorded)) != first.URL {
		t.Fatalf("%s holds %q (%v); the server is at %s", localAddrFile, recorded, err, first.URL)
	}
	if r := ferryIn(t, home, "server", "stop"); r.code != 0 {
		t.Fatalf("stop: %s", r)
	}
	if r := ferryIn(t, home, "job", "list"); r.code != 0 {
		t.Fatalf("the command after stop: %s", r)
	}
	second := urlOf()
	if second.URL != first.URL || second.PID == first.PID {
		t.Fatalf("after stop the server is pid %d at %s; was pid %d at %s", second.PID, second.URL, first.PID, first.URL)
	}
	// A crash leaves server.json behind; the next server is still there.
	if err := syscall.Kill(second.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for processAlive(second.PID) {
		time.Sleep(20 * time.Millisecond)
	}
	if r := ferryIn(t, home, "job", "list"); r.code != 0 {
		t.Fatalf("the command after a crash: %s", r)
	}
	if third := urlOf(); third.URL != first.URL {
		t.Fatalf("after a crash the server is at %s; was at %s", third.URL, first.URL)
	}
}

// A local workspace whose address another program holds is not started
// elsewhere: the error names the address, the port and how to move it.
func TestLocalWorkspaceAddressTaken(t *testing.T) {
	home := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	if err := os.WriteFile(filepath.Join(home, localAddrFile), []byte(addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, map[string]string{"FERRY_HOME": home}, "job", "list")
	if r.code == 0 {
		t.Fatalf("a workspace whose address is taken started: %s", r)
	}
	for _, want := range []string{"address " + addr + " is taken", "port " + port, filepath.Join(home, localAddrFile), "on this machine find it there", "scoring URIs change"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the error lacks %q: %s", want, r)
		}
	}
	if _, err := os.Stat(filepath.Join(home, server.InfoFile)); !os.IsNotExist(err) {
		t.Errorf("a server started anyway: %v", err)
	}

	// An address that is not one is refused naming the file.
	if err := os.WriteFile(filepath.Join(home, localAddrFile), []byte("localhost\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, map[string]string{"FERRY_HOME": home}, "job", "list")
	if r.code == 0 || !strings.Contains(r.stderr, localAddrFile+`: "localhost" is not an address HOST:PORT`) {
		t.Errorf("a server.addr that is no address: %s", r)
	}
}
