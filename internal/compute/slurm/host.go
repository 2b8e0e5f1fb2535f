package slurm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/sshx"
)

// host runs Slurm's commands where they are submitted from: this machine
// or a login node over SSH.
type host interface {
	// run runs cmd with /bin/sh (the login shell over SSH), stdin given
	// (nil: none), and returns its stdout. A failure's error holds the
	// end of stderr; cmd and stdin never appear in it.
	run(ctx context.Context, cmd string, stdin []byte) ([]byte, error)
	// binary returns the path, on the compute nodes, of the ferry binary
	// exe, placing it in binDir first when it must be copied.
	binary(ctx context.Context, exe, binDir string) (string, error)
	close() error
}

// localHost submits on the server's own machine.
type localHost struct{ env []string }

func (h *localHost) run(ctx context.Context, cmd string, stdin []byte) ([]byte, error) {
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	// The server's environment, less its FERRY_ variables (a FERRY_TOKEN
	// of the server's shell), is what sbatch exports to the job, as the
	// local target gives its runners.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, h.env...)
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, shorten(stderr.String()))
	}
	return out, nil
}

func (h *localHost) binary(_ context.Context, exe, _ string) (string, error) { return exe, nil }

func (h *localHost) close() error { return nil }

// maxSessions bounds the SSH sessions open at once on the one connection
// to a login node: OpenSSH's MaxSessions is 10 by default.
const maxSessions = 8

// sshHost submits on a login node over one SSH connection, dialled when
// first needed and again after it broke.
type sshHost struct {
	c      *spec.Compute
	env    string // the export line that Config.Env becomes
	sshCfg sshx.Config
	sem    chan struct{}

	mu   sync.Mutex
	conn *sshx.Conn

	binMu  sync.Mutex
	copied map[string]string // local exe → its path on the login node
}

func newSSHHost(c *spec.Compute, env []string, timeout time.Duration, log *slog.Logger) *sshHost {
	s := c.SSHSettings
	if s == nil {
		s = &spec.SSHSettings{}
	}
	cfg := sshx.Config{Address: c.Address, Port: s.SSHPort, User: s.AdminUsername, Password: s.AdminPassword,
		Passphrase: s.SSHPrivateKeyPassphrase, Timeout: timeout, Log: log}
	if h, p, err := net.SplitHostPort(c.Address); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			cfg.Address, cfg.Port = h, n
		}
	}
	if s.SSHPrivateKey != "" {
		cfg.PrivateKey = []byte(s.SSHPrivateKey)
	}
	switch hk := strings.TrimSpace(c.HostKey); {
	case hk == spec.HostKeyTOFU:
		cfg.HostKey.TrustOnFirstUse = true
	case strings.HasPrefix(hk, "SHA256:"):
		cfg.HostKey.Fingerprint = hk
	default:
		cfg.HostKey.KnownHost = hk
	}
	var exports []string
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && envNameRe().MatchString(k) {
			exports = append(exports, k+"="+shellQuote(v))
		}
	}
	h := &sshHost{c: c, sshCfg: cfg, sem: make(chan struct{}, maxSessions), copied: map[string]string{}}
	if len(exports) > 0 {
		h.env = "export " + strings.Join(exports, " ") + "; "
	}
	return h
}

// connect returns the connection, dialling when there is none. A host
// key still to be learnt (trust-on-first-use) is accepted only by Check
// (tofu), which returns it for the caller to pin.
func (h *sshHost) connect(ctx context.Context, tofu bool) (*sshx.Conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil {
		return h.conn, nil
	}
	hk := strings.TrimSpace(h.c.HostKey)
	switch {
	case hk == "":
		// Learn the key to show it, then refuse: the user must decide.
		cfg := h.sshCfg
		cfg.HostKey = sshx.HostKeyPolicy{TrustOnFirstUse: true}
		offered := "its key"
		if c, err := sshx.Dial(ctx, cfg); err == nil {
			offered = c.Fingerprint()
			c.Close()
		}
		return nil, &CheckError{Field: "host_key", Msg: fmt.Sprintf(
			"is required: the login node at %s offers %s. Check it on the login node (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and set host_key to it, "+
				"or set host_key: %s to trust the key Ferry sees the first time", h.c.Address, offered, spec.HostKeyTOFU)}
	case hk == spec.HostKeyTOFU && !tofu:
		return nil, &CheckError{Field: "host_key", Msg: fmt.Sprintf("the host key of %s was never recorded (host_key: %s); attach the compute again", h.c.Address, spec.HostKeyTOFU)}
	}
	c, err := sshx.Dial(ctx, h.sshCfg)
	if err != nil {
		return nil, dialError(h.c, err)
	}
	h.conn = c
	return c, nil
}

// dialError names the field of the compute that a failed login points at.
func dialError(c *spec.Compute, err error) error {
	switch {
	case errors.Is(err, sshx.ErrAuth):
		f, what := "ssh_settings.ssh_private_key_file", "key"
		if c.SSHSettings != nil && c.SSHSettings.AdminPassword != "" {
			f, what = "ssh_settings.admin_password", "password"
		}
		return &CheckError{Field: f, Err: err, Msg: fmt.Sprintf("the login node %s refused the %s: check ssh_settings.admin_username and the %s", c.Address, what, what)}
	case errors.Is(err, sshx.ErrHostKeyMismatch):
		return &CheckError{Field: "host_key", Err: err, Msg: err.Error()}
	case errors.Is(err, sshx.ErrUnreachable):
		return &CheckError{Field: "address", Err: err, Msg: fmt.Sprintf("cannot reach the login node %s: %v", c.Address, err)}
	}
	return &CheckError{Field: "ssh_settings", Err: err, Msg: err.Error()}
}

// drop forgets a connection that failed, so the next command dials again.
func (h *sshHost) drop(c *sshx.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == c {
		h.conn.Close()
		h.conn = nil
	}
}

func (h *sshHost) run(ctx context.Context, cmd string, stdin []byte) ([]byte, error) {
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, err := h.connect(ctx, false)
	if err != nil {
		return nil, err
	}
	var in io.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	out, err := c.OutputInput(ctx, h.env+cmd, in)
	if ee := (*sshx.ExitError)(nil); err != nil && !errors.As(err, &ee) && ctx.Err() == nil {
		// Not the command's failure: the connection's. Not retried here,
		// since the command may have run (an sbatch must not run twice).
		h.drop(c)
	}
	return out, err
}

// binary copies exe into binDir on the login node, named by its digest,
// unless it is there already. work_dir is shared, so every compute node
// sees the copy; a running job keeps the copy it started with when a
// newer server brings another.
func (h *sshHost) binary(ctx context.Context, exe, binDir string) (string, error) {
	h.binMu.Lock()
	defer h.binMu.Unlock()
	if p, ok := h.copied[exe]; ok {
		return p, nil
	}
	sum, err := fileDigest(exe)
	if err != nil {
		return "", fmt.Errorf("slurm: the ferry binary: %w", err)
	}
	remote := path.Join(binDir, "ferry-"+sum[:16])
	if _, err := h.run(ctx, "test -x "+shellQuote(remote), nil); err != nil {
		if ee := (*sshx.ExitError)(nil); !errors.As(err, &ee) {
			return "", err
		}
		c, err := h.connect(ctx, false)
		if err != nil {
			return "", err
		}
		if err := c.Upload(ctx, exe, remote, 0o755); err != nil {
			return "", fmt.Errorf("slurm: copy the ferry binary to the login node: %w", err)
		}
	}
	h.copied[exe] = remote
	return remote, nil
}

// checkLogin logs in (accepting a key to be learnt, which it returns as a
// known_hosts line) and checks that the login node can run this binary.
func (h *sshHost) checkLogin(ctx context.Context) (string, error) {
	c, err := h.connect(ctx, true)
	if err != nil {
		return "", err
	}
	out, err := c.Output(ctx, "uname -s")
	if err != nil {
		return "", &CheckError{Field: "address", Err: err, Msg: fmt.Sprintf("uname -s on the login node %s: %v", h.c.Address, err)}
	}
	if osName := strings.TrimSpace(string(out)); osName != "Linux" {
		return "", &CheckError{Field: "address", Msg: fmt.Sprintf("the login node %s runs %s; Ferry's runner runs on Linux only", h.c.Address, osName)}
	}
	arch, err := c.Arch(ctx)
	if err != nil {
		return "", &CheckError{Field: "address", Err: err, Msg: err.Error()}
	}
	if arch != runtime.GOARCH || runtime.GOOS != "linux" {
		return "", &CheckError{Field: "address", Msg: fmt.Sprintf("the login node %s is linux/%s and this server is %s/%s; the runner is this server's own binary, so run the server on a machine of the cluster's architecture", h.c.Address, arch, runtime.GOOS, runtime.GOARCH)}
	}
	return c.HostKey(), nil
}

func (h *sshHost) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil
	}
	err := h.conn.Close()
	h.conn = nil
	return err
}

// fileDigest is the hex SHA-256 of a file.
func fileDigest(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	d := sha256.New()
	if _, err := io.Copy(d, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(d.Sum(nil)), nil
}
