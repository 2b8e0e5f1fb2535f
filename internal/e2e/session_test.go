package e2e

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/ferry-ml/ferry/internal/testutil"
	"golang.org/x/crypto/ssh"
)

// sessionEnv is the environment of CLI calls in session tests: this
// server, and a home without SSH keys or an ssh-agent, so that what the
// tests offer is all the CLI has.
func (s *server) sessionEnv(home string) []string {
	return append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+s.home,
		"HOME="+home, "SSH_AUTH_SOCK=")
}

// ferryIn runs the CLI with stdin.
func (s *server) ferryIn(stdin string, args ...string) result {
	s.t.Helper()
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = s.sessionEnv(s.t.TempDir())
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// background is a CLI process a test started and stops.
type background struct {
	cmd         *exec.Cmd
	out, errout *syncBuffer
	done        chan struct{}
}

func (s *server) ferryBackground(args ...string) *background {
	s.t.Helper()
	b := &background{cmd: exec.Command(ferryBin, args...), out: &syncBuffer{}, errout: &syncBuffer{}, done: make(chan struct{})}
	b.cmd.Env = s.sessionEnv(s.t.TempDir())
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.errout
	if err := b.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	s.t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// stop signals the process and waits for it to exit.
func (b *background) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	_ = b.cmd.Process.Signal(sig)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%v did not exit after %v", b.cmd.Args, sig)
	}
	return b.cmd.ProcessState.ExitCode()
}

// sessionCounts are the open sessions and port-forwards compute show reports.
func (s *server) sessionCounts(name string) (sessions, forwards int) {
	s.t.Helper()
	var c struct {
		Sessions     int `json:"sessions"`
		PortForwards int `json:"port_forwards"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("compute", "show", name, "-o", "json").stdout), &c); err != nil {
		s.t.Fatal(err)
	}
	return c.Sessions, c.PortForwards
}

// startSessionServer starts a server whose instances' shells have a home
// of their own: a login shell there runs no profile of this machine's
// (which may be slow, or wait on a lock another shell left).
func startSessionServer(t *testing.T) *server {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	return startServer(t)
}

// makeInstance creates a compute instance (with extra YAML) and waits
// until it runs. The test's end stops it, so that its agent does not
// outlive the test.
func (s *server) makeInstance(name, extra string) {
	s.t.Helper()
	dir := s.t.TempDir()
	writeFiles(s.t, dir, map[string]string{"ci.yml": "name: " + name + "\ntype: computeinstance\nsize: Standard_DS1_v2\n" + extra})
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "ci.yml"))
	s.t.Cleanup(func() {
		s.ferry("compute", "stop", name)
		deadline := time.Now().Add(30 * time.Second)
		for s.computeState(name) != "Stopped" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	})
	s.waitComputeState(name, "Running")
}

func TestSessionExecAndSSH(t *testing.T) {
	s := startSessionServer(t)
	s.makeInstance("dev-box", "")

	r := s.ferry("compute", "exec", "dev-box", "--", "echo out; echo err >&2; exit 7")
	if r.code != 7 || r.stdout != "out\n" || !strings.Contains(r.stderr, "err") {
		t.Errorf("exec with exit 7: %s", r)
	}
	// Several arguments are a program and its arguments, quoted as given.
	if r := s.mustFerry("compute", "exec", "dev-box", "printf", "%s|", "a b", "it's"); r.stdout != "a b|it's|" {
		t.Errorf("exec argv: %q", r.stdout)
	}
	if r := s.ferryIn("hello\nworld\n", "compute", "exec", "dev-box", "--", "tr a-z A-Z"); r.code != 0 || r.stdout != "HELLO\nWORLD\n" {
		t.Errorf("exec with stdin: %s", r)
	}
	// Commands run in the node's directory, under the server's work dir
	// with the process provider.
	r = s.mustFerry("compute", "exec", "-e", "GREETING=hi there", "dev-box", "--", `echo "$GREETING"; pwd`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	workDir, _ := filepath.EvalSymlinks(s.work)
	if len(lines) != 2 || lines[0] != "hi there" || !strings.HasPrefix(lines[1], workDir) {
		t.Errorf("exec env and dir: %q (work dir %s)", r.stdout, workDir)
	}

	// ssh without a terminal: the shell reads stdin.
	if r := s.ferryIn("echo hi; exit 3\n", "compute", "ssh", "dev-box"); r.code != 3 || r.stdout != "hi\n" {
		t.Errorf("ssh without a terminal: %s", r)
	}

	// ssh in a terminal: the test is the terminal.
	cmd := exec.Command(ferryBin, "compute", "ssh", "dev-box")
	cmd.Env = append(s.sessionEnv(t.TempDir()), "TERM=xterm-256color")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	screen := &syncBuffer{}
	go func() { _, _ = io.Copy(screen, tty) }()
	typeLine := func(line string) {
		if _, err := io.WriteString(tty, line+"\r"); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 60*time.Second, "the open session in compute show", func() bool { n, _ := s.sessionCounts("dev-box"); return n == 1 })
	// The echo of the typed line has the quotes; only output matches.
	first := regexp.MustCompile(`tty=/dev/pts/\d+ term=xterm-256color size=30 100`)
	typeLine(`echo "tty=$(tty) term=$TERM size=$(stty size)"`)
	testutil.WaitFor(t, 60*time.Second, "the remote terminal's name, type and size", func() bool { return first.MatchString(screen.String()) })
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, "the resize to reach the remote terminal", func() bool {
		typeLine(`echo "size=$(stty size)"`)
		return strings.Contains(screen.String(), "size=40 120")
	})
	typeLine("exit 5")
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("ferry compute ssh did not exit after `exit 5`; screen:\n%s", screen)
	}
	if code := cmd.ProcessState.ExitCode(); code != 5 {
		t.Errorf("ferry compute ssh exited %d, want 5; screen:\n%s", code, screen)
	}
	testutil.WaitFor(t, 60*time.Second, "no open session in compute show", func() bool { n, _ := s.sessionCounts("dev-box"); return n == 0 })
	mustContain(t, "compute show", s.mustFerry("compute", "show", "dev-box").stdout, "open sessions:")

	r = s.ferry("compute", "exec", "local", "--", "true")
	if r.code == 0 {
		t.Errorf("exec on the local target: %s", r)
	}
	mustContain(t, "exec on local", r.stderr, "computeinstance")
}

func TestSessionPortForwardAndStoppedInstance(t *testing.T) {
	s := startSessionServer(t)
	s.makeInstance("web-box", "")
	s.mustFerry("compute", "exec", "web-box", "--", "echo hello-forward > forward-probe.txt")

	_, remote, _ := net.SplitHostPort(freeAddr(t))
	_, local, _ := net.SplitHostPort(freeAddr(t))
	web := s.ferryBackground("compute", "exec", "web-box", "--", "/usr/bin/python3", "-m", "http.server", remote, "--bind", "127.0.0.1")
	fwd := s.ferryBackground("compute", "port-forward", "web-box", local+":"+remote)
	want := fmt.Sprintf("forwarding 127.0.0.1:%s -> web-box:%s", local, remote)
	testutil.WaitFor(t, 60*time.Second, "port-forward's first line", func() bool { return strings.Contains(fwd.out.String(), want) })

	// The web server may still be starting: the forward reports refused
	// connections and goes on, so ask until it answers.
	url := "http://127.0.0.1:" + local + "/forward-probe.txt"
	var body string
	testutil.WaitFor(t, 60*time.Second, "the web server through the forward", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		body = string(data)
		return resp.StatusCode == 200
	})
	if body != "hello-forward\n" {
		t.Errorf("through the forward: %q", body)
	}
	if n, f := s.sessionCounts("web-box"); n != 1 || f != 1 {
		t.Errorf("compute show: %d sessions, %d port-forwards; want 1 and 1", n, f)
	}

	if code := fwd.stop(t, syscall.SIGINT); code != 0 {
		t.Errorf("port-forward after Ctrl-C exited %d: %s", code, fwd.errout)
	}
	testutil.WaitFor(t, 60*time.Second, "no port-forward in compute show", func() bool { _, f := s.sessionCounts("web-box"); return f == 0 })
	if c, err := net.Dial("tcp", "127.0.0.1:"+local); err == nil {
		c.Close()
		t.Error("the local port still listens after port-forward exited")
	}

	// The client of the exec going away kills the web server with it.
	web.stop(t, syscall.SIGKILL)
	testutil.WaitFor(t, 60*time.Second, "the web server to be killed with its session", func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+remote)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	testutil.WaitFor(t, 60*time.Second, "no session in compute show", func() bool { n, _ := s.sessionCounts("web-box"); return n == 0 })

	// A stopped instance takes no session, and says how to start it.
	s.mustFerry("compute", "stop", "web-box")
	s.waitComputeState("web-box", "Stopped")
	for _, args := range [][]string{
		{"compute", "exec", "web-box", "--", "true"},
		{"compute", "ssh", "web-box"},
		{"compute", "port-forward", "web-box", "0:" + remote},
	} {
		r := s.ferryIn("", args...)
		if r.code == 0 {
			t.Errorf("%v on a stopped instance: %s", args, r)
		}
		mustContain(t, strings.Join(args, " "), r.stderr, "web-box is Stopped", "ferry compute start web-box")
	}
}

// sshKeyPair writes an ed25519 private key file and returns its path and
// public key line.
func sshKeyPair(t *testing.T, path string) string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
}

func TestSessionSSHKey(t *testing.T) {
	s := startSessionServer(t)
	keys := t.TempDir()
	good := filepath.Join(keys, "good")
	bad := filepath.Join(keys, "bad")
	goodPub := sshKeyPair(t, good)
	sshKeyPair(t, bad)
	s.makeInstance("key-box", "ssh_settings:\n  ssh_key_value: "+goodPub+"\n")

	r := s.ferryIn("", "compute", "exec", "key-box", "--", "echo in")
	if r.code == 0 {
		t.Errorf("exec without a key: %s", r)
	}
	mustContain(t, "exec without a key", r.stderr, "ssh_settings.ssh_key_value", "-i")
	r = s.ferryIn("", "compute", "exec", "-i", bad, "key-box", "--", "echo in")
	if r.code == 0 {
		t.Errorf("exec with the wrong key: %s", r)
	}
	mustContain(t, "exec with the wrong key", r.stderr, "refused the key "+bad)
	if r := s.ferryIn("", "compute", "exec", "-i", good, "key-box", "--", "echo in"); r.code != 0 || r.stdout != "in\n" {
		t.Errorf("exec with the right key: %s", r)
	}
	if r := s.ferryIn("echo shell; exit 0\n", "compute", "ssh", "key-box", "-i", good); r.code != 0 || r.stdout != "shell\n" {
		t.Errorf("ssh with the right key: %s", r)
	}

	// The default key of ~/.ssh is offered when -i is not given.
	home := t.TempDir()
	sshKeyPairAt(t, good, filepath.Join(home, ".ssh", "id_ed25519"))
	cmd := exec.Command(ferryBin, "compute", "exec", "key-box", "--", "echo default key")
	cmd.Env = s.sessionEnv(home)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "default key\n" {
		t.Errorf("exec with ~/.ssh/id_ed25519: %v: %s", err, out)
	}
}

// sshKeyPairAt copies a private key file to path.
func sshKeyPairAt(t *testing.T, from, path string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
