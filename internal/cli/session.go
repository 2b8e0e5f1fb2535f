package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
	"golang.org/x/term"

	"github.com/ferry-ml/ferry/internal/session"
)

// sessionCmds are `compute exec`, `compute ssh` and `compute port-forward`:
// sessions with a compute instance through its agent (package session).
func (a *app) sessionCmds() []*cobra.Command {
	return []*cobra.Command{a.execCmd(), a.sshCmd(), a.portForwardCmd()}
}

func (a *app) execCmd() *cobra.Command {
	var identity string
	var env []string
	cmd := &cobra.Command{
		Use:   "exec NAME [--] COMMAND [ARG...]",
		Short: "Run a command on a compute instance; stdin is passed on and the exit code is the command's",
		Long: `Run a command on a compute instance, in its node's directory, through the
instance's agent (the machine needs no open port). One COMMAND argument is a
shell command line ('ls -l | wc -l'); several are a program and its
arguments, passed on as they are. Flags go before NAME.

stdin is passed on; the exit code is the command's (128+N when signal N
killed it). Ctrl-C ends the session, which kills the command and what it
started, unless it detached itself (nohup CMD >/dev/null 2>&1 &).`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return errors.New("say what to run: ferry compute exec NAME -- COMMAND [ARG...]")
			}
			vars := map[string]string{}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--env: %q is not KEY=VALUE", kv)
				}
				vars[k] = v
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			c, err := a.dialInstance(ctx, name, session.KindExec, identity)
			if err != nil {
				return err
			}
			defer c.Close()
			code, err := session.Exec(ctx, c, commandLine(argv), vars, session.Stdio{Stdin: os.Stdin, Stdout: a.stdout, Stderr: a.stderr})
			return a.sessionEnd(ctx, name, code, err)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVarP(&identity, "identity", "i", "", "private key for an instance that has ssh_settings.ssh_key_value")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE to add to the command's environment (repeatable)")
	return cmd
}

func (a *app) sshCmd() *cobra.Command {
	var identity string
	cmd := &cobra.Command{
		Use:   "ssh NAME [-i PRIVATE_KEY]",
		Short: "Open a shell on a compute instance (with a terminal when stdin is one)",
		Long: `Open a shell on a compute instance, in its node's directory, through the
instance's agent (the machine needs no open port). When stdin is a terminal
the shell gets one too (raw mode here; TERM and the window size, kept up to
date, there); otherwise the shell reads its commands from stdin
(ferry compute ssh NAME < script.sh). The exit code is the shell's.

An instance whose compute file has ssh_settings.ssh_key_value admits only the
holders of those keys: give the private key with -i, or have it in an
ssh-agent or in ~/.ssh/id_ed25519, id_ecdsa or id_rsa.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			c, err := a.dialInstance(ctx, name, session.KindShell, identity)
			if err != nil {
				return err
			}
			defer c.Close()
			code, err := session.Shell(ctx, c, a.getenv("TERM"), session.Stdio{Stdin: os.Stdin, Stdout: a.stdout, Stderr: a.stderr})
			return a.sessionEnd(ctx, name, code, err)
		},
	}
	cmd.Flags().StringVarP(&identity, "identity", "i", "", "private key for an instance that has ssh_settings.ssh_key_value")
	return cmd
}

func (a *app) portForwardCmd() *cobra.Command {
	var identity string
	cmd := &cobra.Command{
		Use:   "port-forward NAME LOCAL:REMOTE | PORT",
		Short: "Forward a local port to a port on a compute instance's loopback interface",
		Long: `Listen on 127.0.0.1:LOCAL and connect every connection made there to
127.0.0.1:REMOTE on the compute instance, through its agent (the machine
needs no open port): ferry compute port-forward dev-box 8888:8888, then
open http://127.0.0.1:8888. PORT alone is PORT:PORT; LOCAL 0 (or :REMOTE)
picks a free local port. Runs until Ctrl-C.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			local, remote, err := parsePorts(args[1])
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
			if err != nil {
				return fmt.Errorf("cannot listen on 127.0.0.1:%d (%w); pick another local port: ferry compute port-forward %s OTHER:%d", local, err, name, remote)
			}
			defer ln.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			c, err := a.dialInstance(ctx, name, session.KindForward, identity)
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintf(a.stdout, "forwarding 127.0.0.1:%d -> %s:%d\n", ln.Addr().(*net.TCPAddr).Port, name, remote)
			err = session.Forward(ctx, c, ln, remote, func(err error) { fmt.Fprintf(a.stderr, "port-forward: %v\n", err) })
			if err != nil {
				return fmt.Errorf("forwarding to %s:%d stopped: %w; run port-forward again", name, remote, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&identity, "identity", "i", "", "private key for an instance that has ssh_settings.ssh_key_value")
	return cmd
}

// parsePorts reads LOCAL:REMOTE, :REMOTE (any free local port) or PORT.
func parsePorts(s string) (local, remote int, err error) {
	l, r, ok := strings.Cut(s, ":")
	if !ok {
		l, r = s, s
	}
	if l == "" {
		l = "0"
	}
	bad := fmt.Errorf("ports: %q is not LOCAL:REMOTE or PORT (e.g. 8888:8888 or 8888)", s)
	if local, err = strconv.Atoi(l); err != nil || local < 0 || local > 65535 {
		return 0, 0, bad
	}
	if remote, err = strconv.Atoi(r); err != nil || remote < 1 || remote > 65535 {
		return 0, 0, bad
	}
	return local, remote, nil
}

// commandLine makes the shell command line of exec's arguments: one
// argument is a command line already; several are quoted one by one.
func commandLine(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = shellQuote(s)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sessionEnd turns the end of an exec or shell session into the CLI's
// exit: the remote exit code, 130 after Ctrl-C, or the error.
func (a *app) sessionEnd(ctx context.Context, name string, code int, err error) error {
	switch {
	case err != nil && ctx.Err() != nil:
		return &exitError{code: 130}
	case err != nil:
		return fmt.Errorf("session with compute instance %s: %w", name, err)
	case code != 0:
		return &exitError{code: code}
	}
	return nil
}

// dialInstance opens a session of kind with the instance name and logs in,
// with a key when the instance asks for one.
func (a *app) dialInstance(ctx context.Context, name, kind, identity string) (*ssh.Client, error) {
	cl, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := cl.DialSession(ctx, name, kind)
	if err != nil {
		return nil, err
	}
	var auth []ssh.AuthMethod
	if conn.KeyRequired || identity != "" {
		if auth, err = a.sshKeys(identity); err != nil {
			conn.Close()
			return nil, err
		}
		if len(auth) == 0 {
			conn.Close()
			return nil, fmt.Errorf("compute instance %s admits only the keys of its ssh_settings.ssh_key_value, and none was found here; give the private key with -i PATH", name)
		}
	}
	c, err := session.NewClient(conn, auth...)
	if err != nil {
		if conn.KeyRequired {
			what := "the keys of your ssh-agent and ~/.ssh"
			if identity != "" {
				what = "the key " + identity
			}
			return nil, fmt.Errorf("compute instance %s refused %s: it admits only the keys of its ssh_settings.ssh_key_value; give the matching private key with -i PATH (%w)", name, what, err)
		}
		return nil, fmt.Errorf("session with compute instance %s: %w", name, err)
	}
	return c, nil
}

// sshKeys are the keys to offer: the file given with -i, or else those of
// an ssh-agent and the default key files of ~/.ssh that need no passphrase.
func (a *app) sshKeys(identity string) ([]ssh.AuthMethod, error) {
	if identity != "" {
		s, err := a.readKey(identity, true)
		if err != nil {
			return nil, err
		}
		return []ssh.AuthMethod{ssh.PublicKeys(s)}, nil
	}
	var signers []ssh.Signer
	if sock := a.getenv("SSH_AUTH_SOCK"); sock != "" {
		if conn, err := net.Dial("unix", sock); err == nil {
			if ss, err := sshagent.NewClient(conn).Signers(); err == nil {
				signers = append(signers, ss...)
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		for _, f := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			if s, err := a.readKey(filepath.Join(home, ".ssh", f), false); err == nil {
				signers = append(signers, s)
			}
		}
	}
	if len(signers) == 0 {
		return nil, nil
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, nil
}

// readKey reads a private key file; an encrypted one is unlocked with a
// passphrase asked on the terminal when ask is set and there is one.
func (a *app) readKey(path string, ask bool) (ssh.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	s, err := ssh.ParsePrivateKey(data)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		fd := int(os.Stdin.Fd())
		if !ask || !term.IsTerminal(fd) {
			return nil, fmt.Errorf("private key %s is encrypted: add it to an ssh-agent (ssh-add %s), or run where a terminal can ask its passphrase", path, path)
		}
		fmt.Fprintf(a.stderr, "Enter passphrase for %s: ", path)
		pass, rerr := term.ReadPassword(fd)
		fmt.Fprintln(a.stderr)
		if rerr != nil {
			return nil, rerr
		}
		s, err = ssh.ParsePrivateKeyWithPassphrase(data, pass)
	}
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w", path, err)
	}
	return s, nil
}
