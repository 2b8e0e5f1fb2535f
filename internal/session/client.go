package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/term"
)

// NewClient runs the client side of the SSH handshake over conn, a stream
// the Ferry server has spliced to the agent. auth are the client's keys,
// used only when the instance asks for one (none are needed otherwise).
// The host key is not checked: it is made afresh for every session, and
// the stream reaches the right agent because the server, which both sides
// authenticated with their tokens, joined it (see the package comment).
func NewClient(conn net.Conn, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	cfg := &ssh.ClientConfig{
		User:            "ferry",
		Auth:            auth,
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), //nolint:gosec // see above: the stream is authenticated by the server
		ClientVersion:   "SSH-2.0-ferry-session",
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, "ferry-session", cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// Stdio are the streams of a remote command.
type Stdio struct {
	Stdin          io.Reader // nil: none
	Stdout, Stderr io.Writer
}

// Exec runs command (a shell command line) on the instance with env added
// to its environment and returns its exit status; a command killed by a
// signal gives 128 plus the signal's number, as a shell reports it. When
// ctx ends first the session is closed, which kills the command there, and
// ctx's error is returned.
func Exec(ctx context.Context, c *ssh.Client, command string, env map[string]string, std Stdio) (int, error) {
	s, err := c.NewSession()
	if err != nil {
		return -1, err
	}
	defer s.Close()
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := s.Setenv(k, env[k]); err != nil {
			return -1, fmt.Errorf("set %s: %w", k, err)
		}
	}
	s.Stdin, s.Stdout, s.Stderr = std.Stdin, std.Stdout, std.Stderr
	if err := s.Start(command); err != nil {
		return -1, err
	}
	return wait(ctx, s)
}

// Shell runs an interactive shell on the instance and returns its exit
// status. When std.Stdin is a terminal, the shell gets a terminal too:
// the local one is put in raw mode for the session, the remote one has its
// size (and follows it on SIGWINCH) and the TERM type term ("" = xterm).
// Otherwise the shell reads its commands from std.Stdin, without a
// terminal, as `ssh host < script` does.
func Shell(ctx context.Context, c *ssh.Client, termType string, std Stdio) (int, error) {
	s, err := c.NewSession()
	if err != nil {
		return -1, err
	}
	defer s.Close()
	s.Stdin, s.Stdout, s.Stderr = std.Stdin, std.Stdout, std.Stderr
	f, ok := std.Stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		if err := s.Shell(); err != nil {
			return -1, err
		}
		return wait(ctx, s)
	}
	fd := int(f.Fd())
	w, h, err := term.GetSize(fd)
	if err != nil {
		w, h = 80, 24
	}
	if termType == "" {
		termType = "xterm"
	}
	modes := ssh.TerminalModes{ssh.ECHO: 1, ssh.TTY_OP_ISPEED: 38400, ssh.TTY_OP_OSPEED: 38400}
	if err := s.RequestPty(termType, h, w, modes); err != nil {
		return -1, fmt.Errorf("ask for a terminal: %w", err)
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return -1, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	defer func() { _ = term.Restore(fd, old) }()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			if w, h, err := term.GetSize(fd); err == nil {
				_ = s.WindowChange(h, w)
			}
		}
	}()
	if err := s.Shell(); err != nil {
		return -1, err
	}
	return wait(ctx, s)
}

// wait waits for the remote command's end, or for ctx to end, which closes
// the session.
func wait(ctx context.Context, s *ssh.Session) (int, error) {
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Close()
		return -1, ctx.Err()
	}
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		return ee.ExitStatus(), nil
	case errors.As(err, &missing):
		return -1, errors.New("the session ended without the command's exit status: the connection to the instance was cut")
	}
	return -1, err
}

// Forward accepts connections on ln and connects each to port remotePort
// on the instance's loopback interface, until ctx ends (nil) or the
// session does (an error). ln is closed when Forward returns. Connections
// the instance refuses (nothing listens there) are reported to onError and
// closed; forwarding goes on.
func Forward(ctx context.Context, c *ssh.Client, ln net.Listener, remotePort int, onError func(error)) error {
	var sessionErr error
	sessionGone := make(chan struct{})
	go func() {
		sessionErr = c.Wait()
		close(sessionGone)
	}()
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-ctx.Done():
		case <-sessionGone:
		case <-ended:
		}
		ln.Close()
	}()
	remote := net.JoinHostPort("127.0.0.1", strconv.Itoa(remotePort))
	for {
		local, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			select {
			case <-sessionGone:
				if sessionErr == nil {
					sessionErr = io.EOF
				}
				return fmt.Errorf("the session ended: %w", sessionErr)
			default:
			}
			return err
		}
		go func() {
			rc, err := c.DialContext(ctx, "tcp", remote)
			if err != nil {
				local.Close()
				if onError != nil {
					onError(fmt.Errorf("connection to port %d: %w", remotePort, err))
				}
				return
			}
			stop := context.AfterFunc(ctx, func() { rc.Close(); local.Close() })
			defer stop()
			join(local, rc)
		}()
	}
}
