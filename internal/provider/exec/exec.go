// Package exec is the `exec` node provider: an external program makes,
// lists and removes machines, as Slurm's ResumeProgram and SuspendProgram
// do. It is the bridge to any cloud's CLI, or to whatever a site uses to
// get machines, without Ferry knowing about it.
//
// # Protocol
//
// The program is run as `PROGRAM ARGS... VERB`, VERB one of launch, list
// and terminate, with the server's environment plus Config.Env. It reads
// one JSON object on stdin, prints one JSON object on stdout and exits 0:
//
//	launch     stdin:  {"pool": "cpu-cluster", "name": "cpu-cluster-3f2a", "size": "Standard_DS3_v2",
//	                    "gpus": 0, "agent_args": ["agent", "--server", "https://...", "--name", "..."],
//	                    "agent_env": {"FERRY_JOIN_TOKEN": "..."}}
//	           stdout: a machine
//	list       stdin:  {"pool": "cpu-cluster"}   ("" asks for every pool's machines)
//	           stdout: {"machines": [machine, ...]}
//	terminate  stdin:  {"id": "..."}
//	           stdout: {}
//
// where a machine is {"id": "...", "pool": "...", "state": "pending" |
// "running" | "stopped" | "failed", "address": "10.0.0.5", "error": "...",
// "labels": {"k": "v"}}; id and state are required, and a machine's pool
// may be left out when it is the pool asked for.
//
// On launch the program starts `ferry AGENT_ARGS... --dir DIR` (agent_args
// begin with "agent") on the new machine, with the variables of agent_env
// in its environment (never on a command line: FERRY_JOIN_TOKEN is a
// secret), DIR being a directory of the machine's own. An agent started on this host must be in a session of
// its own (setsid) with stdin, stdout and stderr redirected: the provider
// kills the program's process group when it times out, and waits for its
// stdout and stderr to close. Terminate must succeed for a machine that is
// already gone. Several calls may run at once.
//
// A non-zero exit, a timeout or output that breaks these rules is an error
// that quotes the end of the program's stderr, with every agent_env value
// replaced by [redacted].
package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/tailbuf"
)

// Config sets up an exec provider.
type Config struct {
	Program string   // path or name on PATH
	Args    []string // before the verb
	Env     []string // extra KEY=VALUE for the program, after the server's environment
	// Timeout bounds each run of the program; 0 means 5 minutes, about
	// what a cloud takes to make a virtual machine.
	Timeout time.Duration
}

// Provider is the exec node provider. It keeps no state of its own: the
// program is the source of truth, so a server restart changes nothing.
// Its methods are safe for concurrent use.
type Provider struct {
	cfg Config
}

var _ provider.Provider = (*Provider)(nil)

const (
	stderrTail = 2 << 10 // bytes of stderr quoted in an error
	maxStdout  = 1 << 20 // stdout above this is an error
	// waitDelay is how long the program's stdout and stderr may stay open
	// after it exited or was killed, held by something it started.
	waitDelay = 2 * time.Second
	redacted  = "[redacted]"
)

// New checks cfg and returns a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Program == "" {
		return nil, errors.New("exec provider: Program is empty; name the program that launches, lists and terminates machines")
	}
	if _, err := osexec.LookPath(cfg.Program); err != nil {
		return nil, fmt.Errorf("exec provider: Program: %w", err)
	}
	for i, kv := range cfg.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("exec provider: Env entry %d is not KEY=VALUE", i)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	cfg.Args, cfg.Env = slices.Clone(cfg.Args), slices.Clone(cfg.Env)
	return &Provider{cfg: cfg}, nil
}

// Type implements provider.Provider.
func (p *Provider) Type() string { return "exec" }

type launchInput struct {
	Pool      string            `json:"pool"`
	Name      string            `json:"name"`
	Size      string            `json:"size"`
	GPUs      int               `json:"gpus"`
	AgentArgs []string          `json:"agent_args"`
	AgentEnv  map[string]string `json:"agent_env"`
}

type machineJSON struct {
	ID      string            `json:"id"`
	Pool    string            `json:"pool"`
	State   string            `json:"state"`
	Address string            `json:"address"`
	Error   string            `json:"error"`
	Labels  map[string]string `json:"labels"`
}

type listOutput struct {
	Machines *[]machineJSON `json:"machines"` // a pointer, to tell a missing list from an empty one
}

// Launch implements provider.Provider. A launch that reports a failed
// machine is an error: the machine is terminated and its error returned.
func (p *Provider) Launch(ctx context.Context, r provider.LaunchRequest) (provider.Machine, error) {
	in := launchInput{Pool: r.Pool, Name: r.Name, Size: r.Size, GPUs: r.GPUs,
		AgentArgs: r.AgentArgs, AgentEnv: map[string]string{}}
	if in.AgentArgs == nil {
		in.AgentArgs = []string{}
	}
	for i, kv := range r.AgentEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			// Not the entry itself: it may be a secret.
			return provider.Machine{}, fmt.Errorf("exec provider: machine %s/%s: agent environment entry %d is not KEY=VALUE", r.Pool, r.Name, i)
		}
		in.AgentEnv[k] = v
	}
	red := newRedactor(in.AgentEnv)
	var out machineJSON
	stderr, err := p.run(ctx, "launch", in, &out, red)
	if err != nil {
		return provider.Machine{}, err
	}
	m, err := p.check("launch", out, r.Pool, red, stderr)
	if err != nil {
		return provider.Machine{}, err
	}
	// Whatever the program says, its answer is shown to users: no secret in it.
	m.Address, m.Error = red.redact(m.Address), red.redact(m.Error)
	for k, v := range m.Labels {
		m.Labels[k] = red.redact(v)
	}
	if m.State == provider.StateFailed {
		err := p.fail(red, "launch", nil, "machine %s failed: %s", m.ID, m.Error)
		if terr := p.Terminate(ctx, m.ID); terr != nil {
			err = fmt.Errorf("%w; terminating it: %w", err, terr)
		}
		return provider.Machine{}, err
	}
	return m, nil
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Machine, error) {
	red := newRedactor(nil)
	var out listOutput
	stderr, err := p.run(ctx, "list", map[string]string{"pool": pool}, &out, red)
	if err != nil {
		return nil, err
	}
	if out.Machines == nil {
		return nil, p.fail(red, "list", nil, `printed no "machines" list; print {"machines": []} when there are none; stderr: %s`, stderr)
	}
	ms := make([]provider.Machine, 0, len(*out.Machines))
	seen := map[string]bool{}
	for _, mj := range *out.Machines {
		m, err := p.check("list", mj, pool, red, stderr)
		if err != nil {
			return nil, err
		}
		if seen[m.ID] {
			return nil, p.fail(red, "list", nil, "listed machine %q twice; stderr: %s", m.ID, stderr)
		}
		seen[m.ID] = true
		ms = append(ms, m)
	}
	return ms, nil
}

// Terminate implements provider.Provider. The program must treat a
// machine that is already gone as terminated.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("exec provider: terminate: empty machine ID")
	}
	var out map[string]any
	_, err := p.run(ctx, "terminate", map[string]string{"id": id}, &out, newRedactor(nil))
	return err
}

// check validates a machine the program printed, for pool ("" = any);
// stderr is what the program said there, quoted in errors.
func (p *Provider) check(verb string, mj machineJSON, pool string, red *redactor, stderr string) (provider.Machine, error) {
	if mj.ID == "" {
		return provider.Machine{}, p.fail(red, verb, nil, `printed a machine without an "id"; stderr: %s`, stderr)
	}
	switch mj.State {
	case provider.StatePending, provider.StateRunning, provider.StateStopped, provider.StateFailed, provider.StatePreempted:
	default:
		return provider.Machine{}, p.fail(red, verb, nil, "machine %q has state %q; use pending, running, stopped, failed or preempted; stderr: %s", mj.ID, mj.State, stderr)
	}
	if mj.Pool == "" {
		mj.Pool = pool
	}
	if pool != "" && mj.Pool != pool {
		return provider.Machine{}, p.fail(red, verb, nil, "machine %q is of pool %q, not of pool %q that was asked for; stderr: %s", mj.ID, mj.Pool, pool, stderr)
	}
	if mj.State == provider.StateFailed && mj.Error == "" {
		mj.Error = "the provider program gave no reason"
	}
	return provider.Machine{ID: mj.ID, Pool: mj.Pool, State: mj.State, Address: mj.Address, Error: mj.Error, Labels: mj.Labels}, nil
}

// progError is an error about a run of the program; its message is
// redacted, and it unwraps to the cause (a timeout, a cancellation).
type progError struct {
	msg string
	err error
}

func (e *progError) Error() string { return e.msg }
func (e *progError) Unwrap() error { return e.err }

// fail makes an error about a run of the program, with every secret
// redacted from the whole message.
func (p *Provider) fail(red *redactor, verb string, cause error, format string, args ...any) error {
	msg := fmt.Sprintf("exec provider: %s %s: ", p.cfg.Program, verb) + fmt.Sprintf(format, args...)
	return &progError{msg: red.redact(msg), err: cause}
}

// run runs the program for verb with in on its stdin and decodes the JSON
// object on its stdout into out. It returns the end of the program's
// stderr, redacted, for errors about what out holds.
func (p *Provider) run(ctx context.Context, verb string, in, out any, red *redactor) (string, error) {
	stdin, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("exec provider: %s: %w", verb, err)
	}
	tctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	cmd := osexec.CommandContext(tctx, p.cfg.Program, append(slices.Clone(p.cfg.Args), verb)...)
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &capBuffer{max: maxStdout}
	// Longer than quoted, by the longest secret: see stderrText.
	stderr := tailbuf.New(stderrTail + red.longest)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Its own group, so that a timeout kills what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	err = cmd.Run()
	switch {
	case ctx.Err() != nil:
		return "", p.fail(red, verb, ctx.Err(), "%v; stderr: %s", ctx.Err(), stderrText(stderr, red))
	case tctx.Err() != nil:
		return "", p.fail(red, verb, tctx.Err(), "timed out after %s and was killed; stderr: %s", p.cfg.Timeout, stderrText(stderr, red))
	case errors.Is(err, osexec.ErrWaitDelay):
		return "", p.fail(red, verb, err, "exited, but something it started kept its stdout or stderr open; start agents with setsid and their output redirected (docs/providers.md); stderr: %s", stderrText(stderr, red))
	case err != nil:
		return "", p.fail(red, verb, nil, "%v; stderr: %s", err, stderrText(stderr, red))
	case stdout.over:
		return "", p.fail(red, verb, nil, "printed more than %d bytes on stdout; print one JSON object", maxStdout)
	}
	errText := stderrText(stderr, red)
	if err := decodeObject(stdout.Bytes(), out); err != nil {
		return "", p.fail(red, verb, nil, "%v; stdout begins %q; stderr: %s", err, head(red.redact(stdout.String()), 200), errText)
	}
	return errText, nil
}

// decodeObject decodes exactly one JSON object.
func decodeObject(b []byte, out any) error {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return errors.New("printed nothing on stdout; print one JSON object")
	}
	if t[0] != '{' {
		return errors.New("printed invalid JSON on stdout: not an object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("printed invalid JSON on stdout: %w", err)
	}
	if dec.More() || dec.InputOffset() != int64(len(t)) {
		return errors.New("printed invalid JSON on stdout: more than one JSON value")
	}
	return nil
}

func head(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(s, "")
}

// stderrText is the end of the program's stderr, redacted. When the
// buffer lost its start, a secret may have been cut there, leaving a part
// that no redaction matches; dropping as many bytes as the longest secret
// has drops that part.
func stderrText(t *tailbuf.Buffer, red *redactor) string {
	s, cut := red.redact(t.String()), t.Cut()
	if cut {
		s = s[min(len(s), red.longest):]
	}
	if len(s) > stderrTail {
		s, cut = s[len(s)-stderrTail:], true
	}
	s = strings.TrimSpace(strings.ToValidUTF8(s, ""))
	switch {
	case s == "":
		return "(empty)"
	case cut:
		return "…" + s
	}
	return s
}

// redactor replaces the values of the agent's environment in text.
type redactor struct {
	secrets []string // longest first, so that no longer one is half-replaced
	longest int
}

// newRedactor redacts every non-empty value of env, also as it appears
// inside a JSON string, since programs may print their stdin back.
func newRedactor(env map[string]string) *redactor {
	r := &redactor{}
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			r.secrets = append(r.secrets, s)
			r.longest = max(r.longest, len(s))
		}
	}
	for _, v := range env {
		add(v)
		b, _ := json.Marshal(v) // HTML-escaped, as json.Marshal wrote our stdin
		add(string(b[1 : len(b)-1]))
		var plain bytes.Buffer // as a program's own encoder may write it
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		q := strings.TrimSpace(plain.String())
		add(q[1 : len(q)-1])
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

func (r *redactor) redact(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	return s
}

// capBuffer keeps up to max bytes and notes whether more came.
type capBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
