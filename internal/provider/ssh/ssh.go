// Package ssh is the node provider for machines that already exist and are
// reached over SSH: an attached machine (type virtualmachine) is a pool of
// one of them, an ssh fleet (a cluster with provider: {type: ssh, hosts:
// [...]}) a pool of several.
//
// Launching a node on a machine logs in, copies the ferry binary built for
// the machine's architecture over SFTP into ~/.ferry-agent/NODE, and starts
// `ferry agent` there under the login user. The agent reaches the server
// directly when it can; when it cannot (the probe `ferry probe URL` fails
// on the machine), it reaches it through a reverse tunnel over the same SSH
// connection, which this package keeps open and re-opens after it drops or
// the server restarts. Terminating a node kills every process running from
// its directory, removes the directory (and ~/.ferry-agent when nothing
// else is left in it) and runs the fleet's power-off command, if any.
//
// What the provider knows about its machines (host, directory, agent PID,
// tunnel port) is kept in one JSON file per machine under Config.StateDir,
// so List and Terminate work after a server restart. Secrets are not in
// those files.
package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/sshx"
)

// TOFU is the host key setting that trusts a machine's key the first time
// and pins it from then on (see provider.Checker).
const TOFU = "trust-on-first-use"

// RemoteRoot is the directory, under the login user's home, that holds the
// nodes Ferry runs on a machine.
const RemoteRoot = ".ferry-agent"

// Host is one machine.
type Host struct {
	Address string
	Port    int // 22 when zero
	// HostKey is a known_hosts line, a SHA256:... fingerprint, or TOFU.
	HostKey string
	// Field is where this host is configured, for error messages:
	// "" for an attached machine, "provider.hosts[2]" in a fleet.
	Field string
}

func (h Host) addr() string {
	p := h.Port
	if p == 0 {
		p = 22
	}
	return net.JoinHostPort(h.Address, strconv.Itoa(p))
}

func (h Host) field(f string) string {
	if h.Field == "" {
		return f
	}
	return h.Field + "." + f
}

// Login is how Ferry logs in to the machines.
type Login struct {
	User       string
	Password   secrets.Secret
	PrivateKey secrets.Secret
	Passphrase secrets.Secret
	// Field is where the login is configured: "ssh_settings" or
	// "provider.ssh_settings".
	Field string
}

// Config configures the provider of one pool.
type Config struct {
	Pool  string
	Hosts []Host
	Login Login
	// Exe is this server's ferry binary, for machines of its architecture;
	// Binaries is a directory of ferry-linux-ARCH builds for the others.
	Exe, Binaries string
	// StateDir keeps one record per machine.
	StateDir string
	// ServerAddr is the host:port the server listens on, which a reverse
	// tunnel leads to.
	ServerAddr string
	// PowerOff, when set, is run on a fleet machine after its node is
	// terminated (e.g. "sudo poweroff").
	PowerOff string
	// Tunnels is shared by every ssh provider of the server, so that a
	// machine's tunnel is kept once whatever provider value made it.
	Tunnels *Tunnels
	// DialTimeout bounds connecting (sshx.DefaultTimeout when zero);
	// ProbeTimeout bounds the agent's probe of the server (5 s when zero).
	DialTimeout, ProbeTimeout time.Duration
	Log                       *slog.Logger
}

// Provider launches nodes on existing machines over SSH.
type Provider struct {
	cfg Config
	mu  sync.Mutex // serialises picking a free host with saving its record
}

// New makes the provider of one pool and re-opens the tunnels of its
// machines that had one (after a server restart).
func New(cfg Config) (*Provider, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 5 * time.Second
	}
	if cfg.Tunnels == nil {
		cfg.Tunnels = NewTunnels()
	}
	if cfg.Login.User == "" {
		return nil, fmt.Errorf("%s.admin_username: is required", cfg.Login.Field)
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("hosts: no machine to run on")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg}
	recs, err := p.records(cfg.Pool)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.TunnelPort != 0 {
			if h, ok := p.host(r.Host); ok {
				cfg.Tunnels.keep(r.ID, p.sshConfig(h), r.TunnelPort, cfg.ServerAddr, cfg.Log)
			}
		}
	}
	return p, nil
}

// Type implements provider.Provider.
func (p *Provider) Type() string { return "ssh" }

// record is what the provider keeps about one machine it runs a node on.
type record struct {
	ID         string    `json:"id"`
	Pool       string    `json:"pool"`
	Host       string    `json:"host"` // address:port
	Dir        string    `json:"dir"`  // the node's directory on the machine
	PID        int       `json:"pid"`  // the agent's
	TunnelPort int       `json:"tunnel_port,omitempty"`
	Created    time.Time `json:"created"`
}

func (p *Provider) recordPath(id string) string {
	return filepath.Join(p.cfg.StateDir, id+".json")
}

func (p *Provider) records(pool string) ([]record, error) {
	ents, err := os.ReadDir(p.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	var out []record
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(p.cfg.StateDir, e.Name()))
		if err != nil {
			continue
		}
		var r record
		if json.Unmarshal(raw, &r) != nil || (pool != "" && r.Pool != pool) {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func (p *Provider) save(r record) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := p.recordPath(r.ID) + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p.recordPath(r.ID))
}

func (p *Provider) host(addr string) (Host, bool) {
	for _, h := range p.cfg.Hosts {
		if h.addr() == addr {
			return h, true
		}
	}
	return Host{}, false
}

func (p *Provider) sshConfig(h Host) sshx.Config {
	c := sshx.Config{
		Address: h.Address, Port: h.Port, User: p.cfg.Login.User,
		Password: p.cfg.Login.Password.Reveal(), Passphrase: p.cfg.Login.Passphrase.Reveal(),
		Timeout: p.cfg.DialTimeout, Log: p.cfg.Log,
	}
	if k := p.cfg.Login.PrivateKey.Reveal(); k != "" {
		c.PrivateKey = []byte(k)
	}
	switch hk := strings.TrimSpace(h.HostKey); {
	case hk == TOFU:
		c.HostKey.TrustOnFirstUse = true
	case strings.HasPrefix(hk, "SHA256:"):
		c.HostKey.Fingerprint = hk
	default:
		c.HostKey.KnownHost = hk
	}
	return c
}

// dial logs in to h. Its errors are *provider.CheckError values naming the
// field to fix.
func (p *Provider) dial(ctx context.Context, h Host) (*sshx.Conn, error) {
	if strings.TrimSpace(h.HostKey) == "" {
		// Learn the key to show it, then refuse: the user must decide.
		cfg := p.sshConfig(h)
		cfg.HostKey = sshx.HostKeyPolicy{TrustOnFirstUse: true}
		offered := "its key"
		if c, err := sshx.Dial(ctx, cfg); err == nil {
			offered = c.Fingerprint()
			c.Close()
		}
		return nil, &provider.CheckError{Field: h.field("host_key"), Msg: fmt.Sprintf(
			"is required: the machine at %s offers %s. Check it on the machine itself (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and set host_key to it, "+
				"or set host_key: %s to trust the key Ferry sees the first time", h.addr(), offered, TOFU)}
	}
	c, err := sshx.Dial(ctx, p.sshConfig(h))
	if err == nil {
		return c, nil
	}
	login := p.cfg.Login
	switch {
	case errors.Is(err, sshx.ErrAuth):
		f, what := login.Field+".ssh_private_key_file", "key"
		if login.Password != "" {
			f, what = login.Field+".admin_password", "password"
		}
		return nil, &provider.CheckError{Field: f, Err: err, Msg: fmt.Sprintf(
			"%s@%s refused the %s: check %s.admin_username and the %s (and that the machine allows %s logins)", login.User, h.addr(), what, login.Field, what, what)}
	case errors.Is(err, sshx.ErrHostKeyMismatch):
		return nil, &provider.CheckError{Field: h.field("host_key"), Err: err, Msg: err.Error()}
	case errors.Is(err, sshx.ErrUnreachable):
		return nil, &provider.CheckError{Field: h.field("address"), Err: err, Msg: fmt.Sprintf("cannot reach %s: %v", h.addr(), err)}
	default:
		return nil, &provider.CheckError{Field: login.Field, Err: err, Msg: err.Error()}
	}
}

// Check implements provider.Checker: it logs in to every host, checks it
// is a Linux machine Ferry has a binary for, and returns the keys of TOFU
// hosts to pin.
func (p *Provider) Check(ctx context.Context) ([]string, error) {
	pins := make([]string, len(p.cfg.Hosts))
	for i, h := range p.cfg.Hosts {
		c, err := p.dial(ctx, h)
		if err != nil {
			return nil, err
		}
		_, err = p.binaryFor(ctx, c, h)
		if err == nil && strings.TrimSpace(h.HostKey) == TOFU {
			pins[i] = c.HostKey()
		}
		c.Close()
		if err != nil {
			return nil, err
		}
	}
	return pins, nil
}

// binaryFor returns the local ferry binary to copy to the machine.
func (p *Provider) binaryFor(ctx context.Context, c *sshx.Conn, h Host) (string, error) {
	out, err := c.Output(ctx, "uname -s")
	if err != nil {
		return "", &provider.CheckError{Field: h.field("address"), Err: err, Msg: fmt.Sprintf("uname -s on %s: %v", h.addr(), err)}
	}
	if osName := strings.TrimSpace(string(out)); osName != "Linux" {
		return "", &provider.CheckError{Field: h.field("address"), Msg: fmt.Sprintf("%s runs %s; Ferry's agent runs on Linux machines only", h.addr(), osName)}
	}
	arch, err := c.Arch(ctx)
	if err != nil {
		return "", &provider.CheckError{Field: h.field("address"), Err: err, Msg: err.Error()}
	}
	return p.binaryForArch(arch, h)
}

func (p *Provider) binaryForArch(arch string, h Host) (string, error) {
	if arch == runtime.GOARCH && runtime.GOOS == "linux" && p.cfg.Exe != "" {
		return p.cfg.Exe, nil
	}
	name := "ferry-linux-" + arch
	if p.cfg.Binaries != "" {
		b := filepath.Join(p.cfg.Binaries, name)
		if _, err := os.Stat(b); err == nil {
			return b, nil
		}
	}
	return "", &provider.CheckError{Field: h.field("address"), Msg: fmt.Sprintf(
		"%s is a linux/%s machine and this server has no ferry binary for it: build one (GOOS=linux GOARCH=%s go build -o %s ./cmd/ferry) and put it in the server's --agent-binaries directory",
		h.addr(), arch, arch, name)}
}

// Launch implements provider.Provider.
func (p *Provider) Launch(ctx context.Context, r provider.LaunchRequest) (provider.Machine, error) {
	p.mu.Lock()
	h, err := p.freeHost()
	if err != nil {
		p.mu.Unlock()
		return provider.Machine{}, err
	}
	// Claim the host before the slow part, so a concurrent Launch picks
	// another one.
	rec := record{ID: r.Name, Pool: p.cfg.Pool, Host: h.addr(), Created: time.Now().UTC()}
	if err := p.save(rec); err != nil {
		p.mu.Unlock()
		return provider.Machine{}, err
	}
	p.mu.Unlock()
	m, err := p.launch(ctx, r, h, &rec)
	if err != nil {
		os.Remove(p.recordPath(rec.ID))
		return provider.Machine{}, err
	}
	return m, nil
}

func (p *Provider) freeHost() (Host, error) {
	recs, err := p.records(p.cfg.Pool)
	if err != nil {
		return Host{}, err
	}
	used := map[string]bool{}
	for _, r := range recs {
		used[r.Host] = true
	}
	for _, h := range p.cfg.Hosts {
		if !used[h.addr()] {
			return h, nil
		}
	}
	return Host{}, fmt.Errorf("all %d machines of %s run a node already", len(p.cfg.Hosts), p.cfg.Pool)
}

func (p *Provider) launch(ctx context.Context, r provider.LaunchRequest, h Host, rec *record) (m provider.Machine, err error) {
	if strings.TrimSpace(h.HostKey) == TOFU {
		return m, fmt.Errorf("%s: host_key of %s was never recorded; delete and attach the compute again", p.cfg.Pool, h.addr())
	}
	c, err := p.dial(ctx, h)
	if err != nil {
		return m, err
	}
	keepConn := false
	defer func() {
		if !keepConn {
			c.Close()
		}
	}()
	bin, err := p.binaryFor(ctx, c, h)
	if err != nil {
		return m, err
	}
	home, err := c.Home()
	if err != nil {
		return m, err
	}
	rec.Dir = path.Join(home, RemoteRoot, r.Name)
	defer func() {
		if err != nil {
			// Leave nothing behind from a failed launch.
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = p.cleanup(cctx, c, rec.Dir)
		}
	}()
	if _, err = c.Output(ctx, "mkdir -p -m 700 "+shq(rec.Dir)); err != nil {
		return m, fmt.Errorf("make %s on %s: %w", rec.Dir, h.addr(), err)
	}
	if err = c.Upload(ctx, bin, path.Join(rec.Dir, "ferry"), 0o755); err != nil {
		return m, err
	}

	args := append([]string(nil), r.AgentArgs...)
	server := argValue(args, "--server")
	if server == "" {
		return m, errors.New("ssh provider: the agent arguments have no --server")
	}
	// Can the machine reach the server? Ask the agent's own binary.
	probe := fmt.Sprintf("%s probe --timeout %s %s", shq(path.Join(rec.Dir, "ferry")), p.cfg.ProbeTimeout, shq(server))
	if _, perr := c.Output(ctx, probe); perr != nil {
		if p.cfg.ServerAddr == "" {
			return m, fmt.Errorf("%s cannot reach the server at %s (%v), and no tunnel address is configured", h.addr(), server, perr)
		}
		port, terr := p.cfg.Tunnels.open(ctx, rec.ID, c, p.sshConfig(h), p.cfg.ServerAddr, p.cfg.Log)
		if terr != nil {
			return m, fmt.Errorf("%s cannot reach the server at %s, and a reverse tunnel could not be opened: %w", h.addr(), server, terr)
		}
		keepConn = true
		rec.TunnelPort = port
		setArg(args, "--server", "http://127.0.0.1:"+strconv.Itoa(port))
		p.cfg.Log.Info("ssh node reaches the server through a reverse tunnel", "node", r.Name, "machine", h.addr(), "port", port)
	}
	defer func() {
		if err != nil && rec.TunnelPort != 0 {
			p.cfg.Tunnels.close(rec.ID)
		}
	}()
	args = append(args, "--dir", path.Join(rec.Dir, "node"))
	if argValue(args, "--address") == "" {
		args = append(args, "--address", h.Address)
	}

	// The join token goes through a 0600 file that the start command reads
	// and removes: never on a command line, never in a log.
	tokenFile := path.Join(rec.Dir, "join.env")
	var env strings.Builder
	for _, kv := range r.AgentEnv {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&env, "export %s=%s\n", k, shq(v))
	}
	if err = c.WriteFile(ctx, tokenFile, []byte(env.String()), 0o600); err != nil {
		return m, err
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shq(a)
	}
	start := fmt.Sprintf(`cd %s && . ./join.env && rm -f join.env && `+
		`if command -v setsid >/dev/null 2>&1; then S=setsid; else S=nohup; fi && `+
		`{ $S ./ferry %s </dev/null >agent.log 2>&1 & echo $!; }`, shq(rec.Dir), strings.Join(quoted, " "))
	out, err := c.Output(ctx, start)
	if err != nil {
		return m, fmt.Errorf("start the agent on %s: %w", h.addr(), err)
	}
	if rec.PID, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
		return m, fmt.Errorf("start the agent on %s: no PID in %q", h.addr(), strings.TrimSpace(string(out)))
	}
	if err = p.save(*rec); err != nil {
		return m, err
	}
	return p.machine(*rec), nil
}

func (p *Provider) machine(r record) provider.Machine {
	host, _, _ := net.SplitHostPort(r.Host)
	labels := map[string]string{"host": r.Host, "dir": r.Dir, "pid": strconv.Itoa(r.PID)}
	if r.TunnelPort != 0 {
		labels["tunnel"] = "127.0.0.1:" + strconv.Itoa(r.TunnelPort)
	}
	st := provider.StateRunning
	if r.PID == 0 {
		st = provider.StatePending
	}
	return provider.Machine{ID: r.ID, Pool: r.Pool, State: st, Address: host, Labels: labels}
}

// List implements provider.Provider.
func (p *Provider) List(_ context.Context, pool string) ([]provider.Machine, error) {
	recs, err := p.records(pool)
	if err != nil {
		return nil, err
	}
	out := make([]provider.Machine, 0, len(recs))
	for _, r := range recs {
		out = append(out, p.machine(r))
	}
	return out, nil
}

// Get implements provider.Getter.
func (p *Provider) Get(_ context.Context, id string) (provider.Machine, error) {
	r, err := p.load(id)
	if err != nil {
		return provider.Machine{}, err
	}
	return p.machine(r), nil
}

func (p *Provider) load(id string) (record, error) {
	raw, err := os.ReadFile(p.recordPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return record{}, fmt.Errorf("%w: %s", provider.ErrNotFound, id)
	}
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return record{}, fmt.Errorf("machine record %s: %w", id, err)
	}
	return r, nil
}

// Terminate implements provider.Provider: it stops the node's agent and
// everything it started, removes what Ferry put on the machine and runs
// the power-off command. A machine that cannot be reached any more is
// forgotten with a warning: there is nothing left to stop on a machine
// that is gone, and a removed node must not block its compute.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	r, err := p.load(id)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	p.cfg.Tunnels.close(id)
	h, ok := p.host(r.Host)
	if !ok {
		p.cfg.Log.Warn("ssh node's machine is no longer configured; forgetting it", "node", id, "machine", r.Host)
		return os.Remove(p.recordPath(id))
	}
	c, err := p.dial(ctx, h)
	if err != nil {
		p.cfg.Log.Warn("cannot reach the machine to clean up after a node; forgetting it", "node", id, "machine", r.Host, "dir", r.Dir, "err", err)
		return os.Remove(p.recordPath(id))
	}
	defer c.Close()
	if r.Dir != "" {
		if err := p.cleanup(ctx, c, r.Dir); err != nil {
			return err
		}
	}
	if p.cfg.PowerOff != "" {
		if out, err := c.Output(ctx, p.cfg.PowerOff); err != nil {
			// A power-off often cuts the connection before it answers.
			p.cfg.Log.Info("power-off command ended", "machine", r.Host, "err", err, "output", strings.TrimSpace(string(out)))
		}
	}
	if err := os.Remove(p.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// cleanup kills every process whose binary or working directory is in dir
// (the agent, its runners and their jobs), then removes dir, and the
// RemoteRoot above it when it is left empty.
func (p *Provider) cleanup(ctx context.Context, c *sshx.Conn, dir string) error {
	if path.Base(path.Dir(dir)) != RemoteRoot {
		return fmt.Errorf("ssh provider: refusing to clean %q, which is not under ~/%s", dir, RemoteRoot)
	}
	kill := fmt.Sprintf(`d=%s; for i in 1 2 3; do found=; for p in /proc/[0-9]*; do `+
		`e=$(readlink "$p/exe" 2>/dev/null); w=$(readlink "$p/cwd" 2>/dev/null); `+
		`case "$e/|$w/" in "$d"/*|*"|$d"/*) kill -9 "${p#/proc/}" 2>/dev/null && found=1;; esac; done; `+
		`[ -z "$found" ] && break; sleep 0.2; done; true`, shq(dir))
	if _, err := c.Output(ctx, kill); err != nil {
		return fmt.Errorf("stop the node's processes in %s: %w", dir, err)
	}
	if err := c.RemoveAll(ctx, dir); err != nil {
		return err
	}
	_, _ = c.Output(ctx, "rmdir "+shq(path.Dir(dir))+" 2>/dev/null; true")
	return nil
}

// shq quotes s for a POSIX shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func argValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

func setArg(args []string, flag, v string) {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			args[i+1] = v
		}
	}
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Getter   = (*Provider)(nil)
	_ provider.Checker  = (*Provider)(nil)
)
