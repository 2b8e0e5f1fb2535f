package session

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// tcpPair returns the two ends of a loopback TCP connection. (net.Pipe
// does not do: both SSH ends write their version first, and a pipe's
// writes wait for a reader.)
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	return client, server
}

// serve starts Serve on one end of a fresh connection and returns the
// other end; Serve's error comes on the channel when it returns.
func serve(t *testing.T, cfg ServerConfig) (net.Conn, <-chan error) {
	t.Helper()
	if cfg.Env == nil {
		// A home of its own: a login shell then runs none of this
		// machine's profile, which may be slow or wait on a lock.
		cfg.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cc, sc := tcpPair(t)
	done := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		done <- Serve(ctx, sc, cfg)
		close(returned)
	}()
	t.Cleanup(func() {
		cancel()
		cc.Close()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})
	return cc, done
}

// connect starts a server with cfg and returns a client of it.
func connect(t *testing.T, cfg ServerConfig, auth ...ssh.AuthMethod) *ssh.Client {
	t.Helper()
	conn, _ := serve(t, cfg)
	c, err := NewClient(conn, auth...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, c *ssh.Client, command string, env map[string]string, stdin io.Reader) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := Exec(context.Background(), c, command, env, Stdio{Stdin: stdin, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return out.String(), errb.String(), code
}

func TestExecOutputAndExitCode(t *testing.T) {
	c := connect(t, ServerConfig{})
	out, errs, code := run(t, c, "echo out; echo err >&2; exit 7", nil, nil)
	if out != "out\n" || errs != "err\n" || code != 7 {
		t.Errorf("got stdout %q, stderr %q, exit %d; want out, err, 7", out, errs, code)
	}
	// Several commands on one connection, each its own channel.
	if out, _, code := run(t, c, "true", nil, nil); out != "" || code != 0 {
		t.Errorf("true: %q, %d", out, code)
	}
	if _, _, code := run(t, c, "kill -TERM $$", nil, nil); code != 128+int(syscall.SIGTERM) {
		t.Errorf("a command killed by SIGTERM exits %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	if out, _, code := run(t, c, "no-such-command-anywhere", nil, nil); code != 127 {
		t.Errorf("an unknown command exits %d (%q), want 127", code, out)
	}
}

func TestExecStdin(t *testing.T) {
	c := connect(t, ServerConfig{})
	big := strings.Repeat("abcdefghij\n", 50000) // more than the channel's window
	out, _, code := run(t, c, "tr a-z A-Z", nil, strings.NewReader(big))
	if code != 0 || out != strings.ToUpper(big) {
		t.Errorf("tr: exit %d, %d bytes back of %d", code, len(out), len(big))
	}
	// A command that does not read its stdin still ends.
	if out, _, code := run(t, c, "echo done", nil, strings.NewReader("ignored")); out != "done\n" || code != 0 {
		t.Errorf("echo: %q %d", out, code)
	}
}

func TestExecEnvAndDir(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, ServerConfig{Dir: dir, Env: []string{"PATH=" + os.Getenv("PATH"), "BASE=from-agent"}})
	out, _, _ := run(t, c, `echo "$FOO $BASE"; pwd`, map[string]string{"FOO": "from client"}, nil)
	if want := "from client from-agent\n" + dir + "\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestShellWithoutTerminal(t *testing.T) {
	c := connect(t, ServerConfig{})
	var out bytes.Buffer
	code, err := Shell(context.Background(), c, "", Stdio{Stdin: strings.NewReader("echo hi; exit 3\n"), Stdout: &out, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "hi\n" || code != 3 {
		t.Errorf("got %q, exit %d; want hi, 3", out.String(), code)
	}
}

func TestPTYShell(t *testing.T) {
	c := connect(t, ServerConfig{})
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RequestPty("xterm-ferry-test", 24, 80, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
		t.Fatal(err)
	}
	in, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testutil.SyncBuffer
	s.Stdout = &out
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	// The echo of what is typed has the quotes; only the output matches.
	fmt.Fprintln(in, `echo "tty=$(tty) term=$TERM size=$(stty size)"`)
	first := regexp.MustCompile(`tty=/dev/pts/\d+ term=xterm-ferry-test size=24 80`)
	testutil.WaitFor(t, 15*time.Second, "the terminal's name, type and size", func() bool { return first.MatchString(out.String()) })

	if err := s.WindowChange(40, 120); err != nil {
		t.Fatal(err)
	}
	// The resize may reach the shell after it ran the line: type it again
	// until the new size shows.
	testutil.WaitFor(t, 15*time.Second, "the new size", func() bool {
		if strings.Contains(out.String(), "size=40 120") {
			return true
		}
		fmt.Fprintln(in, `echo "size=$(stty size)"`)
		return false
	})

	fmt.Fprintln(in, "exit 4")
	err = s.Wait()
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 4 {
		t.Errorf("shell ended with %v, want exit 4", err)
	}
}

// gone reports whether process pid has ended (a zombie counts: its parent
// may be a container's init that reaps late).
func gone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

func TestClientGoneKillsProcessGroup(t *testing.T) {
	for _, withPTY := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", withPTY), func(t *testing.T) {
			c := connect(t, ServerConfig{})
			s, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			if withPTY {
				if err := s.RequestPty("xterm", 24, 80, nil); err != nil {
					t.Fatal(err)
				}
			}
			out, err := s.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			// The child ignores SIGHUP, so only the SIGKILL that follows
			// ends it.
			if err := s.Start(`trap "" HUP; sleep 1000 & echo "pid=$!"; wait`); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "pid=")))
			if err != nil {
				t.Fatalf("pid line %q: %v", line, err)
			}
			if gone(pid) {
				t.Fatalf("sleep %d is not running", pid)
			}
			c.Close() // the client goes away
			testutil.WaitFor(t, 15*time.Second, fmt.Sprintf("sleep %d to be killed", pid), func() bool { return gone(pid) })
		})
	}
}

func TestFinishedCommandLeavesDetachedChildren(t *testing.T) {
	conn, done := serve(t, ServerConfig{})
	c, err := NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	// sleep does not ignore SIGHUP: a hang-up would end it at once.
	out, _, code := run(t, c, `sleep 1000 >/dev/null 2>&1 & echo $!`, nil, nil)
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || code != 0 {
		t.Fatalf("got %q, exit %d", out, code)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Serve has returned: any kill for the finished command would have
	// been sent by now.
	if gone(pid) {
		t.Errorf("a process the command left running on purpose was killed with its session")
	}
}

func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln
}

func echoOnce(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Errorf("echo: got %q, want %q", got, msg)
	}
}

func TestDirectTCPIPToLoopback(t *testing.T) {
	ln := echoServer(t)
	port := ln.Addr().(*net.TCPAddr).Port
	c := connect(t, ServerConfig{Kind: KindForward})
	for _, host := range []string{"127.0.0.1", "localhost"} {
		rc, err := c.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		echoOnce(t, rc, "hello through "+host)
		rc.Close()
	}

	// Forward: a local listener whose connections reach the remote port.
	local, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- Forward(ctx, c, local, port, func(err error) { t.Errorf("forward: %v", err) }) }()
	for i := range 3 {
		lc, err := net.Dial("tcp", local.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		echoOnce(t, lc, fmt.Sprintf("forwarded %d", i))
		lc.Close()
	}
	cancel()
	if err := <-errs; err != nil {
		t.Errorf("Forward after cancel: %v", err)
	}
	if _, err := net.Dial("tcp", local.Addr().String()); err == nil {
		t.Error("the local listener is still open after Forward returned")
	}
}

func TestForwardReportsRefusedAndEndedSession(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := closed.Addr().(*net.TCPAddr).Port
	closed.Close() // nothing listens there now
	conn, _ := serve(t, ServerConfig{Kind: KindForward})
	c, err := NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	local, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 1)
	errs := make(chan error, 1)
	go func() {
		errs <- Forward(context.Background(), c, local, port, func(err error) { refused <- err })
	}()
	lc, err := net.Dial("tcp", local.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-refused; !strings.Contains(err.Error(), "nothing answers on port") {
		t.Errorf("refused connection reported as %v", err)
	}
	if _, err := lc.Read(make([]byte, 1)); err == nil {
		t.Error("the local connection of a refused forward stays open")
	}
	conn.Close() // the session ends under Forward
	select {
	case err := <-errs:
		if err == nil || !strings.Contains(err.Error(), "session ended") {
			t.Errorf("Forward after the session ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Forward goes on after its session ended")
	}
}

func TestDirectTCPIPRefusesOtherHosts(t *testing.T) {
	c := connect(t, ServerConfig{})
	for _, addr := range []string{"10.1.2.3:80", "192.0.2.1:22", "[2001:db8::1]:443"} {
		_, err := c.Dial("tcp", addr)
		if err == nil || !strings.Contains(err.Error(), "only loopback destinations") {
			t.Errorf("dial %s: %v, want a refusal naming loopback destinations", addr, err)
		}
	}
	_, err := c.Dial("tcp", "example.com:80") // a name; Dial resolves nothing itself
	if err == nil || !strings.Contains(err.Error(), "only loopback destinations") {
		t.Errorf("dial example.com: %v", err)
	}
}

func TestKindLimitsChannels(t *testing.T) {
	fwd := connect(t, ServerConfig{Kind: KindForward})
	if _, err := fwd.NewSession(); err == nil || !strings.Contains(err.Error(), "port-forward session") {
		t.Errorf("a command on a forward session: %v", err)
	}
	ex := connect(t, ServerConfig{Kind: KindExec})
	if _, err := ex.Dial("tcp", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "command session") {
		t.Errorf("a forward on an exec session: %v", err)
	}
}

func newKey(t *testing.T) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, string(ssh.MarshalAuthorizedKey(s.PublicKey()))
}

func TestPublicKeyAuth(t *testing.T) {
	good, goodLine := newKey(t)
	bad, _ := newKey(t)
	keys, err := ParseAuthorizedKeys("# the team\n\n" + goodLine)
	if err != nil || len(keys) != 1 {
		t.Fatalf("ParseAuthorizedKeys: %v, %d keys", err, len(keys))
	}
	if _, err := ParseAuthorizedKeys(goodLine + "ssh-ed25519 not-base64\n"); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad second line: %v", err)
	}
	cfg := ServerConfig{AuthorizedKeys: keys}

	for name, auth := range map[string][]ssh.AuthMethod{"no key": nil, "another key": {ssh.PublicKeys(bad)}} {
		conn, done := serve(t, cfg)
		if _, err := NewClient(conn, auth...); err == nil {
			t.Errorf("%s: logged in", name)
		}
		if err := <-done; err == nil || !strings.Contains(err.Error(), "handshake") {
			t.Errorf("%s: Serve returned %v, want a handshake error", name, err)
		}
	}
	c := connect(t, cfg, ssh.PublicKeys(good))
	if out, _, code := run(t, c, "echo in", nil, nil); out != "in\n" || code != 0 {
		t.Errorf("with the right key: %q %d", out, code)
	}
}

// TestDialHTTP upgrades an HTTP connection as the Ferry server does, and
// runs a session over it.
func TestDialHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Upgrade") != Protocol {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"detail":"no"}`)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + Protocol + "\r\n" + AuthHeader + ": none\r\n\r\n")
		brw.Flush()
		go Serve(context.Background(), conn, ServerConfig{})
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	conn, hdr, err := DialHTTP(ctx, srv.Client(), srv.URL+"/x", "tok")
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Get(AuthHeader) != "none" {
		t.Errorf("headers of the 101: %v", hdr)
	}
	cancel() // ends the dial's context, not the stream
	c, err := NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if out, _, code := run(t, c, "echo over http", nil, nil); out != "over http\n" || code != 0 {
		t.Errorf("got %q %d", out, code)
	}

	_, _, err = DialHTTP(context.Background(), srv.Client(), srv.URL+"/x", "wrong")
	var re *RefusedError
	if !errors.As(err, &re) || re.Status != http.StatusUnauthorized || !strings.Contains(string(re.Body), "no") {
		t.Errorf("refused upgrade: %v", err)
	}
}
