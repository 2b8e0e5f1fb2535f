// Package sshx reaches an existing machine over SSH, as Ferry's attached
// machine (virtualmachine) target and ssh node provider need: log in with
// a password or a key against a pinned host key, run commands, copy files
// over SFTP, and tunnel the agent's connection back to the server.
//
// Errors are classified with sentinels (ErrConfig, ErrUnreachable,
// ErrHostKeyMismatch, ErrAuth) and never contain the password, the private
// key or its passphrase. A Conn is safe for concurrent use.
package sshx

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

var (
	// ErrConfig is wrapped by errors in a Config (a missing field, a key
	// that does not parse, a wrong passphrase).
	ErrConfig = errors.New("ssh: invalid settings")
	// ErrUnreachable is wrapped when no TCP connection or SSH handshake to
	// the machine can be made.
	ErrUnreachable = errors.New("ssh: machine unreachable")
	// ErrHostKeyMismatch is wrapped when the machine offers a host key
	// other than the pinned one. The connection is refused.
	ErrHostKeyMismatch = errors.New("ssh: host key mismatch")
	// ErrAuth is wrapped when the machine refuses the password or key.
	ErrAuth = errors.New("ssh: authentication failed")
)

// DefaultTimeout bounds the TCP connection and SSH handshake of Dial when
// Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// HostKeyPolicy says which host key the machine must present. Exactly one
// decision is required: a pinned key (KnownHost), a pinned fingerprint
// (Fingerprint, both may be given and both must then match), or
// TrustOnFirstUse.
type HostKeyPolicy struct {
	// KnownHost is one or more known_hosts lines ("host ssh-ed25519
	// AAAA...", as ssh-keyscan prints) or authorized_keys-style lines
	// ("ssh-ed25519 AAAA..."). The host field is not checked: the pin
	// belongs to one target, whatever name reaches it. Any listed key is
	// accepted.
	KnownHost string
	// Fingerprint is a "SHA256:..." fingerprint as ssh-keygen -lf prints.
	Fingerprint string
	// TrustOnFirstUse accepts any key. The caller records Conn.HostKey()
	// and pins it (as KnownHost) from then on.
	TrustOnFirstUse bool
}

// Config says how to reach and log in to a machine. Password, PrivateKey
// and Passphrase are secrets: Config formats and logs with them redacted.
type Config struct {
	Address string // host name or IP address
	Port    int    // 22 when zero
	User    string
	// Password and/or PrivateKey (PEM, OpenSSH or PKCS#1/PKCS#8) with its
	// Passphrase when it is encrypted. At least one is required; with both
	// the key is tried first.
	Password   string
	PrivateKey []byte
	Passphrase string
	HostKey    HostKeyPolicy
	// Timeout bounds connecting and the handshake; DefaultTimeout when
	// zero.
	Timeout time.Duration
	// Log, when set, receives connection events at debug and info level.
	// Secrets are never logged.
	Log *slog.Logger
}

// Format prints the Config with its secrets redacted, for every verb.
func (c Config) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "{Address:%s Port:%d User:%s Password:%s PrivateKey:%s Passphrase:%s HostKey:%+v Timeout:%s}",
		c.Address, c.Port, c.User, redact(c.Password != ""), redact(len(c.PrivateKey) > 0), redact(c.Passphrase != ""), c.HostKey, c.Timeout)
}

// LogValue logs the Config with its secrets redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("address", c.Address), slog.Int("port", c.Port), slog.String("user", c.User),
		slog.String("password", redact(c.Password != "")), slog.String("private_key", redact(len(c.PrivateKey) > 0)),
		slog.String("passphrase", redact(c.Passphrase != "")))
}

func redact(set bool) string {
	if set {
		return "[secret]"
	}
	return "[none]"
}

var (
	_ fmt.Formatter  = Config{}
	_ slog.LogValuer = Config{}
)

// Conn is a logged-in SSH connection to one machine.
type Conn struct {
	client  *ssh.Client
	name    string // user@host:port, for messages
	hostKey ssh.PublicKey
	addr    string
	log     *slog.Logger

	mu   sync.Mutex
	sftp *sftp.Client
}

// Dial connects and logs in. It refuses a Config without a host key
// decision, and a machine whose host key is not the pinned one.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	if cfg.Port == 0 {
		cfg.Port = 22
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr := net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port))
	name := cfg.User + "@" + addr
	auth, err := validate(cfg)
	if err != nil {
		return nil, err
	}
	pin, err := parsePolicy(cfg.HostKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: host_key: %v", ErrConfig, name, err)
	}

	// With only a fingerprint we do not know the key's type, and a server
	// presents one key per handshake, chosen by algorithm; so try each key
	// type in turn until one matches, before calling it a mismatch.
	var (
		offered []ssh.PublicKey
		lastErr error
	)
	for _, algos := range pin.algorithmSets() {
		c, key, err := dial(ctx, cfg, addr, name, auth, pin, algos)
		if err == nil {
			log.Info("ssh connected", "machine", name, "host_key", ssh.FingerprintSHA256(key))
			return &Conn{client: c, name: name, hostKey: key, addr: addr, log: log}, nil
		}
		lastErr = err
		var mm *mismatch
		switch {
		case errors.As(err, &mm):
			offered = append(offered, mm.offered)
		case errors.Is(err, errNoCommonAlgorithm):
			// The server has no key of this type; try the next.
		default:
			log.Debug("ssh dial failed", "machine", name, "err", err)
			return nil, err
		}
	}
	if len(offered) == 0 {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, lastErr)
	}
	err = mismatchError(name, pin, offered)
	log.Warn("ssh host key refused", "machine", name, "err", err)
	return nil, err
}

func validate(cfg Config) ([]ssh.AuthMethod, error) {
	name := cfg.User + "@" + net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port))
	switch {
	case cfg.Address == "":
		return nil, fmt.Errorf("%w: address is required", ErrConfig)
	case cfg.User == "":
		return nil, fmt.Errorf("%w: %s: admin_username is required", ErrConfig, cfg.Address)
	case cfg.Port < 1 || cfg.Port > 65535:
		return nil, fmt.Errorf("%w: %s: ssh_port must be 1-65535 (got %d)", ErrConfig, cfg.Address, cfg.Port)
	case cfg.Password == "" && len(cfg.PrivateKey) == 0:
		return nil, fmt.Errorf("%w: %s: give a password or a private key", ErrConfig, name)
	}
	var auth []ssh.AuthMethod
	if len(cfg.PrivateKey) > 0 {
		signer, err := parseKey(cfg.PrivateKey, cfg.Passphrase)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: private key: %s", ErrConfig, name, err)
		}
		auth = append(auth, ssh.PublicKeys(signer))
	}
	if cfg.Password != "" {
		pw := cfg.Password
		auth = append(auth, ssh.Password(pw),
			// Servers with PAM often ask for the password this way.
			ssh.KeyboardInteractive(func(_, _ string, questions []string, _ []bool) ([]string, error) {
				answers := make([]string, len(questions))
				for i := range answers {
					answers[i] = pw
				}
				return answers, nil
			}))
	}
	return auth, nil
}

// parseKey returns an error message that is safe to show: it never quotes
// the key, whose parse errors from x/crypto could in principle carry bytes
// of it.
func parseKey(pem []byte, passphrase string) (ssh.Signer, error) {
	var signer ssh.Signer
	var err error
	if passphrase == "" {
		signer, err = ssh.ParsePrivateKey(pem)
	} else {
		signer, err = ssh.ParsePrivateKeyWithPassphrase(pem, []byte(passphrase))
	}
	var missing *ssh.PassphraseMissingError
	switch {
	case err == nil:
		return signer, nil
	case errors.As(err, &missing):
		return nil, errors.New("the key is encrypted; give its passphrase")
	case errors.Is(err, x509.IncorrectPasswordError):
		return nil, errors.New("the passphrase does not decrypt the key")
	case passphrase != "" && strings.Contains(err.Error(), "not encrypted"):
		return nil, errors.New("a passphrase was given but the key is not encrypted")
	default:
		return nil, errors.New("not a PEM private key that ssh understands (OpenSSH, PKCS#1 or PKCS#8)")
	}
}

var errNoCommonAlgorithm = errors.New("no common host key algorithm")

func dial(ctx context.Context, cfg Config, addr, name string, auth []ssh.AuthMethod, pin *pinned, algos []string) (*ssh.Client, ssh.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var d net.Dialer
	tcp, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	// ssh.NewClientConn takes no context: bound the handshake with a
	// deadline, and close the socket if ctx ends first.
	if dl, ok := ctx.Deadline(); ok {
		_ = tcp.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { tcp.Close() })
	defer stop()

	var (
		offered     ssh.PublicKey
		keyAccepted bool
		mm          *mismatch
	)
	config := &ssh.ClientConfig{
		User: cfg.User,
		Auth: auth,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			offered = key
			if !pin.accepts(key) {
				mm = &mismatch{offered: key}
				return mm
			}
			keyAccepted = true
			return nil
		},
		HostKeyAlgorithms: algos,
	}
	c, chans, reqs, err := ssh.NewClientConn(tcp, addr, config)
	if err != nil {
		tcp.Close()
		switch {
		case mm != nil:
			return nil, nil, mm
		case ctx.Err() != nil && !keyAccepted:
			return nil, nil, fmt.Errorf("%w: %s: handshake: %v", ErrUnreachable, addr, ctx.Err())
		case keyAccepted && strings.Contains(err.Error(), "unable to authenticate"):
			// x/crypto has no error type for this; its message is the only
			// sign, and it holds nothing secret.
			return nil, nil, fmt.Errorf("%w: ssh: user %s at %s: password or key refused", ErrAuth, cfg.User, addr)
		case !keyAccepted && strings.Contains(err.Error(), "no common algorithm for host key"):
			return nil, nil, fmt.Errorf("%w: %s: %v", errNoCommonAlgorithm, addr, err)
		case keyAccepted:
			return nil, nil, fmt.Errorf("ssh: %s: login: %w", name, err)
		default:
			return nil, nil, fmt.Errorf("%w: %s: ssh handshake: %v", ErrUnreachable, addr, err)
		}
	}
	_ = tcp.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), offered, nil
}

// mismatch carries the offered key out of the host key callback.
type mismatch struct{ offered ssh.PublicKey }

func (m *mismatch) Error() string { return "host key mismatch" }

func mismatchError(name string, pin *pinned, offered []ssh.PublicKey) error {
	var off []string
	for _, k := range offered {
		off = append(off, k.Type()+" "+ssh.FingerprintSHA256(k))
	}
	return fmt.Errorf("%w: %s offered %s, but host_key pins %s. If the machine was reinstalled or its key changed on purpose, "+
		"check the new key on the machine itself (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and update host_key; "+
		"otherwise someone may be intercepting the connection",
		ErrHostKeyMismatch, name, strings.Join(off, " and "), pin.describe())
}

// HostKey returns the machine's host key as a known_hosts line
// ("[host]:port ssh-ed25519 AAAA..."), to pin as HostKeyPolicy.KnownHost.
func (c *Conn) HostKey() string {
	return knownhosts.Line([]string{knownhosts.Normalize(c.addr)}, c.hostKey)
}

// Fingerprint returns the SHA256 fingerprint of the machine's host key
// ("SHA256:..."), as ssh-keygen -l prints it.
func (c *Conn) Fingerprint() string { return ssh.FingerprintSHA256(c.hostKey) }

// ExitError is the error of a remote command that ran and did not exit 0.
type ExitError struct {
	Code   int    // exit status; -1 when it was killed by a signal or none was sent
	Signal string // the signal that ended it ("KILL"), if any
}

func (e *ExitError) Error() string {
	if e.Signal != "" {
		return "ssh: remote command killed by signal " + e.Signal
	}
	if e.Code < 0 {
		return "ssh: remote command ended without an exit status"
	}
	return "ssh: remote command exited with status " + strconv.Itoa(e.Code)
}

// Run runs cmd through the remote user's shell, copying its output to
// stdout and stderr (either may be nil to discard it). A non-zero exit is
// an *ExitError. When ctx ends, the command's whole process group is
// killed (SIGKILL) and Run returns ctx's error.
func (c *Conn) Run(ctx context.Context, cmd string, stdout, stderr io.Writer) error {
	return c.RunInput(ctx, cmd, nil, stdout, stderr)
}

// RunInput is Run with stdin (nil: none). Data that must not appear on a
// command line, such as a token, reaches the remote command this way.
func (c *Conn) RunInput(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	s, err := c.client.NewSession()
	if err != nil {
		return fmt.Errorf("ssh: %s: new session: %w", c.name, err)
	}
	defer s.Close()
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	pid := &pidWriter{w: stderr, known: make(chan struct{})}
	s.Stdin, s.Stdout, s.Stderr = stdin, stdout, pid
	// sshd starts the shell in a new session (setsid), so its PID is the
	// process group of everything the command starts. The shell reports it
	// on stderr's first line, which pidWriter strips, so that a cancel can
	// kill the group: OpenSSH ignores the signal request for root logins.
	if err := s.Start(pidPrefix + "$$ >&2; " + cmd); err != nil {
		return fmt.Errorf("ssh: %s: start command: %w", c.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		c.kill(s, pid)
		return fmt.Errorf("ssh: %s: command cancelled: %w", c.name, ctx.Err())
	}
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		code := ee.ExitStatus()
		if ee.Signal() != "" {
			code = -1
		}
		return &ExitError{Code: code, Signal: ee.Signal()}
	case errors.As(err, &missing):
		return &ExitError{Code: -1}
	default:
		return fmt.Errorf("ssh: %s: %w", c.name, err)
	}
}

const pidPrefix = "echo ferry-pid:"

// kill ends a cancelled command: the signal request (enough for non-root
// users), then a kill of its process group from a second session.
func (c *Conn) kill(s *ssh.Session, pid *pidWriter) {
	_ = s.Signal(ssh.SIGKILL)
	select {
	case <-pid.known:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		k, err := c.client.NewSession()
		if err != nil {
			break
		}
		defer k.Close()
		done := make(chan struct{})
		go func() { _ = k.Run("kill -KILL -- -" + strconv.Itoa(pid.pid)); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
	default:
		// The shell has not reported its PID yet; closing the session is
		// all that is left.
	}
	s.Close()
}

// pidWriter takes the "ferry-pid:N" line off the front of stderr and
// passes the rest on.
type pidWriter struct {
	w     io.Writer
	buf   []byte
	done  bool
	pid   int
	known chan struct{}
}

func (p *pidWriter) Write(b []byte) (int, error) {
	if p.done {
		return p.w.Write(b)
	}
	n := len(b)
	p.buf = append(p.buf, b...)
	i := bytes.IndexByte(p.buf, '\n')
	if i < 0 && len(p.buf) < 64 {
		return n, nil
	}
	p.done = true
	rest := p.buf
	if i >= 0 {
		if v, ok := strings.CutPrefix(string(p.buf[:i]), "ferry-pid:"); ok {
			if pid, err := strconv.Atoi(v); err == nil && pid > 1 {
				p.pid = pid
				close(p.known)
			}
			rest = p.buf[i+1:]
		}
	}
	p.buf = nil
	if len(rest) > 0 {
		if _, err := p.w.Write(rest); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Output runs cmd like Run and returns its stdout; on failure the error
// includes the end of its stderr.
func (c *Conn) Output(ctx context.Context, cmd string) ([]byte, error) {
	return c.OutputInput(ctx, cmd, nil)
}

// OutputInput is Output with stdin (nil: none), as RunInput.
func (c *Conn) OutputInput(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	var out, errb bytes.Buffer
	if err := c.RunInput(ctx, cmd, stdin, &out, &errb); err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 2000 {
			msg = "..." + msg[len(msg)-2000:]
		}
		if msg != "" {
			return out.Bytes(), fmt.Errorf("%w: %s", err, msg)
		}
		return out.Bytes(), err
	}
	return out.Bytes(), nil
}

// Arch returns the machine's architecture as a GOARCH ("amd64", "arm64",
// ...), from uname -m.
func (c *Conn) Arch(ctx context.Context) (string, error) {
	out, err := c.Output(ctx, "uname -m")
	if err != nil {
		return "", fmt.Errorf("ssh: %s: uname -m: %w", c.name, err)
	}
	m := strings.TrimSpace(string(out))
	if a, ok := goarch(m); ok {
		return a, nil
	}
	return "", fmt.Errorf("ssh: %s: unsupported machine architecture %q (from uname -m); Ferry's agent is built for amd64, arm64, 386, arm, ppc64le, s390x, riscv64 and loong64", c.name, m)
}

func goarch(machine string) (string, bool) {
	switch machine {
	case "x86_64", "amd64":
		return "amd64", true
	case "aarch64", "arm64":
		return "arm64", true
	case "i386", "i486", "i586", "i686":
		return "386", true
	case "armv6l", "armv7l", "armv7", "armv6", "arm":
		return "arm", true
	case "ppc64le", "s390x", "riscv64", "loong64":
		return machine, true
	case "loongarch64":
		return "loong64", true
	}
	return "", false
}

func (c *Conn) sftpClient() (*sftp.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sftp != nil {
		return c.sftp, nil
	}
	s, err := sftp.NewClient(c.client)
	if err != nil {
		return nil, fmt.Errorf("ssh: %s: start sftp (is the sftp subsystem enabled in sshd_config?): %w", c.name, err)
	}
	c.sftp = s
	return s, nil
}

// Upload copies the local file to remotePath with the given mode, making
// missing parent directories. It writes a temporary file next to
// remotePath and renames it over remotePath, so the remote side never sees
// a partial file (a running binary it replaces keeps its old inode). When
// ctx ends the transfer stops and the temporary file is removed.
func (c *Conn) Upload(ctx context.Context, localPath, remotePath string, mode os.FileMode) (err error) {
	fail := func(what string, err error) error {
		return fmt.Errorf("ssh: %s: upload %s to %s: %s: %w", c.name, localPath, remotePath, what, err)
	}
	if remotePath == "" || strings.HasSuffix(remotePath, "/") {
		return fail("remote path", errors.New("must name a file"))
	}
	src, err := os.Open(localPath)
	if err != nil {
		return fail("open", err)
	}
	defer src.Close()
	sc, err := c.sftpClient()
	if err != nil {
		return err
	}
	if dir := path.Dir(remotePath); dir != "." && dir != "/" {
		if err := sc.MkdirAll(dir); err != nil {
			return fail("make directory "+dir, err)
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(path.Dir(remotePath), "."+path.Base(remotePath)+".ferry-tmp-"+hex.EncodeToString(rnd[:]))
	dst, err := sc.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return fail("create", err)
	}
	defer func() {
		if err != nil {
			_ = sc.Remove(tmp)
		}
	}()
	// sftp takes no context: closing the file makes a copy in progress
	// fail.
	stop := context.AfterFunc(ctx, func() { dst.Close() })
	_, err = dst.ReadFrom(src)
	stopped := !stop()
	if ctx.Err() != nil && (err != nil || stopped) {
		dst.Close()
		return fail("copy", ctx.Err())
	}
	if err != nil {
		dst.Close()
		return fail("copy", err)
	}
	if err = dst.Chmod(mode.Perm()); err != nil {
		dst.Close()
		return fail("chmod", err)
	}
	if err = dst.Close(); err != nil {
		return fail("close", err)
	}
	if err = ctx.Err(); err != nil {
		return fail("copy", err)
	}
	if err = sc.PosixRename(tmp, remotePath); err != nil {
		return fail("rename into place", err)
	}
	return nil
}

// RemoveAll removes remotePath and everything under it; a path that does
// not exist is not an error. It refuses "", "/" and "." to keep a bad
// setting from wiping a machine.
func (c *Conn) RemoveAll(ctx context.Context, remotePath string) error {
	switch path.Clean(remotePath) {
	case "", ".", "/", "..":
		return fmt.Errorf("%w: %s: refusing to remove %q", ErrConfig, c.name, remotePath)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sc, err := c.sftpClient()
	if err != nil {
		return err
	}
	if _, err := sc.Lstat(remotePath); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := sc.RemoveAll(remotePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ssh: %s: remove %s: %w", c.name, remotePath, err)
	}
	return nil
}

// ReverseForward listens on remoteAddr on the machine ("127.0.0.1:0" picks
// a free port) and forwards each connection made there to localAddr on
// this side, through the SSH connection; an agent on the machine thus
// reaches a server it has no route to. It returns the address bound on the
// machine. Forwarding stops when ctx ends or the Conn is closed.
func (c *Conn) ReverseForward(ctx context.Context, remoteAddr, localAddr string) (string, error) {
	ln, err := c.client.Listen("tcp", remoteAddr)
	if err != nil {
		return "", fmt.Errorf("ssh: %s: listen on %s on the machine (AllowTcpForwarding in sshd_config?): %w", c.name, remoteAddr, err)
	}
	bound := ln.Addr().String()
	c.log.Info("ssh reverse forward", "machine", c.name, "remote", bound, "local", localAddr)
	context.AfterFunc(ctx, func() { ln.Close() })
	go func() {
		for {
			rc, err := ln.Accept()
			if err != nil {
				return
			}
			go c.forward(ctx, rc, localAddr)
		}
	}()
	return bound, nil
}

func (c *Conn) forward(ctx context.Context, remote net.Conn, localAddr string) {
	defer remote.Close()
	var d net.Dialer
	local, err := d.DialContext(ctx, "tcp", localAddr)
	if err != nil {
		c.log.Warn("ssh reverse forward: cannot reach local side", "machine", c.name, "local", localAddr, "err", err)
		return
	}
	defer local.Close()
	stop := context.AfterFunc(ctx, func() { local.Close(); remote.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(local, remote)
		if tc, ok := local.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(remote, local)
		// An ssh channel half-closes with CloseWrite too.
		if cw, ok := remote.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// WriteFile writes data to remotePath with mode, which is set before any
// byte is written (a secret is never readable by others, not even for a
// moment). The parent directory must exist.
func (c *Conn) WriteFile(ctx context.Context, remotePath string, data []byte, mode os.FileMode) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sc, err := c.sftpClient()
	if err != nil {
		return err
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("ssh: %s: write %s: %s: %w", c.name, remotePath, what, err)
	}
	f, err := sc.OpenFile(remotePath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fail("create", err)
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		f.Close()
		return fail("chmod", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fail("write", err)
	}
	if err := f.Close(); err != nil {
		return fail("close", err)
	}
	return nil
}

// Home returns the login user's home directory on the machine (where SFTP
// starts).
func (c *Conn) Home() (string, error) {
	sc, err := c.sftpClient()
	if err != nil {
		return "", err
	}
	wd, err := sc.Getwd()
	if err != nil {
		return "", fmt.Errorf("ssh: %s: home directory: %w", c.name, err)
	}
	return wd, nil
}

// Wait blocks until the connection is closed, by either side.
func (c *Conn) Wait() error { return c.client.Wait() }

// Close closes the connection, its SFTP session and its forwards.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.sftp != nil {
		c.sftp.Close()
		c.sftp = nil
	}
	c.mu.Unlock()
	return c.client.Close()
}
