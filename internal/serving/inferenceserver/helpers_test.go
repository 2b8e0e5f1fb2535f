package inferenceserver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requirePython skips the test unless a python3 of at least 3.8 runs.
func requirePython(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(p, "-c", "import sys; sys.exit(sys.version_info < (3, 8))").Run()
	}
	if err != nil {
		t.Skipf("needs python3 ≥ 3.8 on PATH (apt-get install python3): %v", err)
	}
	return p
}

// pythonWith returns the first of python3 and Debian's /usr/bin/python3
// that imports module, or skips the test.
func pythonWith(t *testing.T, module string) string {
	t.Helper()
	for _, p := range []string{requirePython(t), "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	t.Skipf("neither python3 nor /usr/bin/python3 has %s (apt-get install python3-%s)", module, module)
	return ""
}

// syncBuffer is a buffer the replica's log goroutine writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// replica is one inference server the test started.
type replica struct {
	cmd      *exec.Cmd
	statuses <-chan Status
	stdout   *syncBuffer
	stderr   *syncBuffer
	done     chan struct{}
	waitErr  error
	dir      string // the code folder
}

// startReplica writes script as score.py in a fresh code folder and
// starts a replica of it; edit may adjust the Replica first.
func startReplica(t testing.TB, python, script string, edit func(*Replica)) *replica {
	t.Helper()
	root := t.TempDir()
	code := filepath.Join(root, "code")
	model := filepath.Join(root, "model")
	for _, d := range []string{code, model} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(code, "score.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(model, "weights.txt"), []byte("42"), 0o644); err != nil {
		t.Fatal(err)
	}
	server, err := Install(filepath.Join(root, "servers"))
	if err != nil {
		t.Fatal(err)
	}
	r := Replica{Python: python, ServerDir: server, CodeDir: code, Script: "score.py", ModelDir: model}
	if edit != nil {
		edit(&r)
	}
	c, err := r.Command()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.Args[0], c.Args[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	rep := &replica{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{}), dir: code}
	cmd.Stderr = rep.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rep.statuses = Watch(out, rep.stdout)
	go func() {
		rep.waitErr = cmd.Wait()
		close(rep.done)
	}()
	t.Cleanup(func() {
		// The replica's own process group: its workers go with it even
		// if the parent is already gone.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-rep.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-rep.done
		}
		if t.Failed() {
			t.Logf("replica stdout:\n%s\nreplica stderr:\n%s", rep.stdout, rep.stderr)
		}
	})
	return rep
}

func (r *replica) ready(t testing.TB) Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := WaitReady(ctx, r.statuses)
	if err != nil {
		<-r.done
		t.Fatalf("replica not ready: %v (exit: %v)\nstderr:\n%s", err, r.waitErr, r.stderr)
	}
	return s
}

// waitLog waits for want in the replica's stderr, which reaches the test
// through a pipe some time after the replica wrote it.
func (r *replica) waitLog(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(r.stderr.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the replica's log lacks %q", want)
		}
	}
}

// gate waits for the file name in the code folder, as a script does to
// hold a request until the test lets it go.
const gatePython = `
import os, time
def wait_for(name):
    while not os.path.exists(name):
        time.sleep(0.01)
`

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// socketDir is a folder for a replica's Unix socket: private (0700), as
// the replica requires (t.TempDir's folders may be open to others).
func socketDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sockets")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
