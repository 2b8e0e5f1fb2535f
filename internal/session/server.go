package session

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"
)

// Kinds of sessions. The server relays each as one stream and counts it as
// a session (exec, shell) or a port-forward; Serve holds the client to its
// kind, so that the counts say what is really open.
const (
	KindExec    = "exec"
	KindShell   = "shell"
	KindForward = "forward"
)

// Times that are not worth a setting.
const (
	handshakeTimeout = 30 * time.Second // from the stream to an SSH connection
	killGrace        = 2 * time.Second  // SIGHUP to SIGKILL of an abandoned command
	drainAfterExit   = time.Second      // a terminal's last output after its shell exits
	dialTimeout      = 10 * time.Second // a forwarded connection to a local port
)

// ServerConfig is how Serve runs commands and which clients it admits.
type ServerConfig struct {
	// Dir is the working directory of commands and shells ("" = the
	// agent's own).
	Dir string
	// Env is the environment of commands and shells, to which a client's
	// env requests and, with a terminal, TERM are added (nil = os.Environ()).
	Env []string
	// Credential is the account commands and shells run as (nil = the
	// agent's own); Dir must be reachable by it.
	Credential *syscall.Credential
	// Shell runs commands (Shell -c COMMAND) and interactive shells
	// ("" = /bin/bash, else /bin/sh).
	Shell string
	// AuthorizedKeys, when not empty, are the only public keys a client
	// may log in with; when empty, no client authentication is asked for.
	AuthorizedKeys []ssh.PublicKey
	// Kind is the kind of session the server relays: KindForward admits
	// only forwarding (direct-tcpip) channels, KindExec and KindShell only
	// session channels, "" both.
	Kind string
	// Log hears about sessions (default: nowhere).
	Log *slog.Logger
}

// ParseAuthorizedKeys reads public keys in OpenSSH's authorized_keys form,
// one per line ("ssh-ed25519 AAAA... comment"); blank lines and lines that
// start with # are skipped.
func ParseAuthorizedKeys(text string) ([]ssh.PublicKey, error) {
	var keys []ssh.PublicKey
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("line %d is not an OpenSSH public key (as in ~/.ssh/id_ed25519.pub): %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Serve is the agent's side of one session: an SSH server on conn that
// runs commands ("exec"), shells ("shell", with a PTY after "pty-req") and
// forwards connections to loopback ports ("direct-tcpip"). It returns when
// the client closes the connection or ctx ends, which closes it; commands
// that are still running then are killed with their process group. conn
// is closed when Serve returns.
func Serve(ctx context.Context, conn net.Conn, cfg ServerConfig) error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
		if _, err := os.Stat("/bin/bash"); err == nil {
			cfg.Shell = "/bin/bash"
		}
	}
	defer conn.Close()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	sc := &ssh.ServerConfig{ServerVersion: "SSH-2.0-ferry-session"}
	if len(cfg.AuthorizedKeys) == 0 {
		sc.NoClientAuth = true
	} else {
		sc.PublicKeyCallback = func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			for _, k := range cfg.AuthorizedKeys {
				if bytes.Equal(k.Marshal(), key.Marshal()) {
					return &ssh.Permissions{}, nil
				}
			}
			return nil, fmt.Errorf("public key %s is not one of the instance's ssh_settings.ssh_key_value", ssh.FingerprintSHA256(key))
		}
	}
	sc.AddHostKey(hostKey)

	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	slow := time.AfterFunc(handshakeTimeout, func() { conn.Close() })
	sconn, chans, reqs, err := ssh.NewServerConn(conn, sc)
	slow.Stop()
	if err != nil {
		return fmt.Errorf("session handshake: %w", err)
	}
	defer sconn.Close()
	go ssh.DiscardRequests(reqs)

	// Forwarded connections end with the SSH connection, even when the
	// local end of one keeps quiet.
	connCtx, connGone := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			if cfg.Kind == KindForward {
				_ = nc.Reject(ssh.Prohibited, "this is a port-forward session; run commands with `ferry compute exec` or `ferry compute ssh`")
				continue
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Go(func() { serveSession(&cfg, ch, creqs) })
		case "direct-tcpip":
			if cfg.Kind == KindExec || cfg.Kind == KindShell {
				_ = nc.Reject(ssh.Prohibited, "this is a command session; forward ports with `ferry compute port-forward`")
				continue
			}
			wg.Go(func() { serveForward(connCtx, &cfg, nc) })
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "ferry sessions offer session and direct-tcpip channels only")
		}
	}
	connGone()
	wg.Wait()
	return nil
}

// ---- session channels: exec and shell ----

// ptyRequest is the payload of "pty-req" (RFC 4254 section 6.2).
type ptyRequest struct {
	Term             string
	Cols, Rows, W, H uint32
	Modes            string
}

// windowChange is the payload of "window-change" (RFC 4254 section 6.7).
type windowChange struct {
	Cols, Rows, W, H uint32
}

// command is what runs on one session channel.
type command struct {
	cfg *ServerConfig
	ch  ssh.Channel
	env []string
	pty *ptyRequest // nil: no terminal

	mu       sync.Mutex
	started  bool
	pgid     int      // the command's process group (its pid), once started
	master   *os.File // the PTY's master side, with a terminal
	finished bool     // it exited and its output is all sent: nothing to kill
}

// serveSession answers the requests of one session channel until the
// client closes it. A command still running then is killed, with its
// process group: a client that goes away takes its commands with it.
func serveSession(cfg *ServerConfig, ch ssh.Channel, reqs <-chan *ssh.Request) {
	c := &command{cfg: cfg, ch: ch}
	for req := range reqs {
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			ok := ssh.Unmarshal(req.Payload, &kv) == nil && validEnvName(kv.Name)
			if ok {
				c.env = append(c.env, kv.Name+"="+kv.Value)
			}
			reply(req, ok)
		case "pty-req":
			var p ptyRequest
			ok := ssh.Unmarshal(req.Payload, &p) == nil && !c.isStarted()
			if ok {
				c.pty = &p
			}
			reply(req, ok)
		case "window-change":
			var w windowChange
			reply(req, ssh.Unmarshal(req.Payload, &w) == nil && c.resize(w.Rows, w.Cols, w.W, w.H))
		case "signal":
			var s struct{ Name string }
			reply(req, ssh.Unmarshal(req.Payload, &s) == nil && c.signal(s.Name))
		case "exec", "shell":
			var line string
			if req.Type == "exec" {
				var e struct{ Command string }
				if ssh.Unmarshal(req.Payload, &e) != nil {
					reply(req, false)
					continue
				}
				line = e.Command
			}
			if c.isStarted() {
				reply(req, false)
				continue
			}
			// The command starts only after the reply: its exit status must
			// not reach the client before the answer to its request.
			reply(req, true)
			c.start(line, req.Type == "shell")
		default:
			reply(req, false)
		}
	}
	c.abandon()
}

func reply(req *ssh.Request, ok bool) {
	if req.WantReply {
		_ = req.Reply(ok, nil)
	}
}

func validEnvName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "=\x00")
}

func (c *command) isStarted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// start runs line (or a shell) and, in the background, sends its output,
// its exit status and the end of the channel. A command that cannot be
// started is reported on stderr with exit status 127, as a shell does.
func (c *command) start(line string, shell bool) {
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	var args []string
	switch {
	case !shell:
		args = []string{"-c", line}
	case c.pty != nil:
		args = []string{"-l"} // an interactive login shell, as ssh gives
	}
	cmd := exec.Command(c.cfg.Shell, args...)
	cmd.Dir = c.cfg.Dir
	cmd.Env = append(append([]string{}, c.cfg.Env...), c.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cfg.Credential} // startPTY adds a session of its own
	var err error
	if c.pty != nil {
		err = c.startPTY(cmd)
	} else {
		err = c.startPipes(cmd)
	}
	if err != nil {
		fmt.Fprintf(c.ch.Stderr(), "ferry: cannot start %s: %v\r\n", c.cfg.Shell, err)
		c.finish(exitStatus(127))
	}
}

// startPipes runs cmd in its own process group with pipes for its stdin,
// stdout and stderr. Its output is sent until the pipes close, which may
// be after cmd exits when something it started in the background holds
// them, as with OpenSSH.
func (c *command) startPipes(cmd *exec.Cmd) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr.Setpgid = true
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return err
	}
	c.mu.Lock()
	c.pgid = cmd.Process.Pid
	c.mu.Unlock()
	go func() {
		_, _ = io.Copy(inW, c.ch)
		inW.Close()
	}()
	var out sync.WaitGroup
	out.Go(func() { _, _ = io.Copy(c.ch, outR); outR.Close() })
	out.Go(func() { _, _ = io.Copy(c.ch.Stderr(), errR); errR.Close() })
	go func() {
		werr := cmd.Wait()
		out.Wait()
		c.finish(statusOf(cmd, werr))
	}()
	return nil
}

// startPTY runs cmd on a new pseudo-terminal, as the leader of its own
// session and process group, with the size and TERM the client asked for.
func (c *command) startPTY(cmd *exec.Cmd) error {
	if c.pty.Term != "" {
		cmd.Env = append(cmd.Env, "TERM="+c.pty.Term)
	}
	master, err := pty.StartWithSize(cmd, winsize(c.pty.Rows, c.pty.Cols, c.pty.W, c.pty.H))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.pgid, c.master = cmd.Process.Pid, master
	c.mu.Unlock()
	go func() { _, _ = io.Copy(master, c.ch) }()
	copied := make(chan struct{})
	go func() {
		// Reading the master fails with EIO once no process holds the
		// terminal any more: that is its end of file.
		_, _ = io.Copy(c.ch, master)
		close(copied)
	}()
	go func() {
		werr := cmd.Wait()
		select {
		case <-copied:
		case <-time.After(drainAfterExit):
			// Something the shell left behind holds the terminal. OpenSSH
			// hangs up the terminal when the shell exits; so do we.
			c.kill(syscall.SIGHUP)
		}
		c.mu.Lock()
		c.master = nil
		master.Close()
		c.mu.Unlock()
		c.finish(statusOf(cmd, werr))
	}()
	return nil
}

// finish sends the exit status of the command and closes the channel.
func (c *command) finish(st exitMsg) {
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
	if st.signal != "" {
		_, _ = c.ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{Signal: st.signal}))
	} else {
		_, _ = c.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(st.code)}))
	}
	_ = c.ch.Close()
}

// abandon is called when the client has closed the channel (or the whole
// connection): a command that has not finished is hung up on and, if it
// is still there after killGrace, killed, with its whole process group.
func (c *command) abandon() {
	c.mu.Lock()
	running := c.started && !c.finished && c.pgid > 0
	c.mu.Unlock()
	if !running {
		return
	}
	c.cfg.Log.Info("session closed by the client; killing its command", "pgid", c.pgid)
	c.kill(syscall.SIGHUP)
	c.kill(syscall.SIGCONT) // stopped processes act on SIGHUP only once continued
	go func() {
		time.Sleep(killGrace)
		c.kill(syscall.SIGKILL)
	}()
}

func (c *command) kill(sig syscall.Signal) {
	c.mu.Lock()
	pgid := c.pgid
	c.mu.Unlock()
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

func (c *command) resize(rows, cols, w, h uint32) bool {
	if c.pty == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		// Before the shell starts: it starts with this size.
		c.pty.Rows, c.pty.Cols, c.pty.W, c.pty.H = rows, cols, w, h
		return true
	}
	// Under the lock, so that the master is not closed meanwhile.
	return c.master != nil && pty.Setsize(c.master, winsize(rows, cols, w, h)) == nil
}

func (c *command) signal(name string) bool {
	sig, ok := signalsByName[name]
	if !ok || !c.isStarted() {
		return false
	}
	c.kill(sig)
	return true
}

func winsize(rows, cols, w, h uint32) *pty.Winsize {
	clamp := func(n uint32) uint16 { return uint16(min(n, 65535)) }
	return &pty.Winsize{Rows: clamp(rows), Cols: clamp(cols), X: clamp(w), Y: clamp(h)}
}

// exitMsg is how a command ended: an exit code, or the name of the signal
// that killed it (as SSH names signals: "TERM", not "SIGTERM").
type exitMsg struct {
	code   int
	signal string
}

func exitStatus(code int) exitMsg { return exitMsg{code: code} }

func statusOf(cmd *exec.Cmd, err error) exitMsg {
	ps := cmd.ProcessState
	if ps == nil {
		return exitStatus(255)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		for name, sig := range signalsByName {
			if sig == ws.Signal() {
				return exitMsg{signal: name}
			}
		}
		return exitStatus(128 + int(ws.Signal()))
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return exitStatus(255)
	}
	return exitStatus(ps.ExitCode())
}

// signalsByName are the signals RFC 4254 section 6.10 names.
var signalsByName = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP,
	"ILL": syscall.SIGILL, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

// ---- direct-tcpip: port forwarding to loopback ----

// serveForward connects a forwarding channel to a port on this machine's
// loopback interface. Other destinations are refused: a session reaches
// the instance, not the networks the instance can reach.
func serveForward(ctx context.Context, cfg *ServerConfig, nc ssh.NewChannel) {
	var d struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &d); err != nil || d.Port == 0 || d.Port > 65535 {
		_ = nc.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	addrs, ok := loopback(d.Host)
	if !ok {
		_ = nc.Reject(ssh.Prohibited, fmt.Sprintf("only loopback destinations (127.0.0.1, ::1, localhost) can be forwarded; %s is not one", d.Host))
		return
	}
	port := strconv.Itoa(int(d.Port))
	var conn net.Conn
	var err error
	dialer := net.Dialer{Timeout: dialTimeout}
	for _, a := range addrs {
		if conn, err = dialer.DialContext(ctx, "tcp", net.JoinHostPort(a, port)); err == nil {
			break
		}
	}
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("nothing answers on port %d of the instance: %v", d.Port, err))
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		conn.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	stop := context.AfterFunc(ctx, func() { ch.Close(); conn.Close() })
	defer stop()
	cfg.Log.Debug("forwarding", "port", d.Port)
	join(ch, conn)
}

// loopback returns the addresses to dial for host when it names this
// machine's loopback interface.
func loopback(host string) ([]string, bool) {
	if strings.EqualFold(host, "localhost") {
		return []string{"127.0.0.1", "::1"}, true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil || !ip.IsLoopback() {
		return nil, false
	}
	return []string{ip.String()}, true
}

// join copies both ways between two connections (a forwarding channel and
// a TCP connection), passing on half-closes, and closes both when both
// directions are done.
func join(a, b io.ReadWriteCloser) {
	var wg sync.WaitGroup
	wg.Go(func() { copyThenCloseWrite(a, b) })
	wg.Go(func() { copyThenCloseWrite(b, a) })
	wg.Wait()
	a.Close()
	b.Close()
}

func copyThenCloseWrite(dst, src io.ReadWriteCloser) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		dst.Close()
	}
}
