package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Sessions are how `ferry compute exec|ssh|port-forward` reach a compute
// instance, whose machine has no port open to them: the user's call
// waits here while the instance's agent is told, in the answer to its
// assignment poll, to call back; the API layer then joins the two
// connections and copies bytes between them. The workspace only pairs the
// two sides and counts the sessions that are open, because an open session
// or port-forward keeps an instance from stopping for idleness.

// Session kinds. exec and shell count as sessions of their instance,
// forward as a port-forward.
const (
	SessionExec    = "exec"
	SessionShell   = "shell"
	SessionForward = "forward"
)

// Times of sessions that are not worth a setting.
const (
	// sessionAgentWait bounds how long a user's call waits for the agent.
	sessionAgentWait = 30 * time.Second
	// sessionRedeliver is how long a session handed to an agent's poll
	// may go unclaimed before the next poll is given it again (in case
	// the answer to the first was lost).
	sessionRedeliver = 5 * time.Second
)

// Session is one exec, shell or port-forward session of a compute
// instance: pending until the agent of its node connects (AwaitAgent),
// open until Close.
type Session struct {
	ID      string
	Compute string
	Node    string
	Kind    string
	// KeyRequired says the instance has ssh_settings.ssh_key_value: its
	// agent asks the client for one of those keys.
	KeyRequired bool

	nd   *Nodes
	keys []string // authorized public keys, one per line, for the agent

	mu        sync.Mutex
	delivered time.Time          // last handed to the agent's poll
	claimed   bool               // the agent has connected (AcceptSession)
	agent     io.ReadWriteCloser // the agent's connection, once attached
	ready     chan struct{}      // closed when agent is set
	done      bool               // the user side stopped waiting: Attach refuses
	open      bool               // counted in the instance's use
	closed    bool
}

// sessionTable is the workspace's memory of sessions. The zero value is
// ready to use.
type sessionTable struct {
	mu      sync.Mutex
	pending map[string]*Session     // by id, until the agent connects or the user gives up
	use     map[string]*sessionUses // per compute
	wait    time.Duration           // how long AwaitAgent waits; 0 = sessionAgentWait
}

// sessionUses is how a compute instance is used by sessions.
type sessionUses struct {
	sessions, forwards int
	lastClosed         time.Time
}

// OpenSession starts a session of kind (exec, shell or forward) on the
// compute instance named compute: it checks that the instance runs, makes
// the session pending for the instance's node and wakes the node's agent.
// The caller then waits for the agent with AwaitAgent and calls Close when
// the session is over.
func (nd *Nodes) OpenSession(ctx context.Context, who auth.Principal, compute, kind string) (*Session, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("only an owner may open sessions on compute instances")
	}
	switch kind {
	case SessionExec, SessionShell, SessionForward:
	default:
		return nil, apperr.Invalid("kind: %q is not a kind of session; use exec, shell or forward", kind)
	}
	rec, err := nd.ws.st.GetCompute(ctx, compute)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nd.ws.unknownCompute(ctx, compute)
	}
	if err != nil {
		return nil, err
	}
	if !nd.ws.isInstance(rec.Type) {
		return nil, apperr.Invalid("compute %s is of type %s; exec, ssh and port-forward reach compute instances (type computeinstance) only", compute, rec.Type)
	}
	switch rec.State {
	case InstanceRunning, InstanceJobRunning:
	case InstanceSetupFailed:
		// The node stays up for its owner to look into what failed.
	case InstanceSettingUp:
		return nil, apperr.Conflict("compute instance %s is SettingUp: its setup scripts are running; wait until `ferry compute show %s` says Running (or SetupFailed)", compute, compute)
	case InstanceStopped:
		return nil, apperr.Conflict("compute instance %s is Stopped; start it with `ferry compute start %s`", compute, compute)
	case InstanceStopping:
		return nil, apperr.Conflict("compute instance %s is Stopping; once it is Stopped, start it again with `ferry compute start %s`", compute, compute)
	default:
		return nil, apperr.Conflict("compute instance %s is %s: its machine is not ready yet; wait until `ferry compute show %s` says Running", compute, rec.State, compute)
	}
	nodes, err := nd.ws.st.ListNodes(ctx, compute)
	if err != nil {
		return nil, err
	}
	node := ""
	for _, n := range nodes {
		if n.State == NodeIdle || n.State == NodeBusy {
			node = n.Name
		}
	}
	if node == "" {
		return nil, apperr.Conflict("compute instance %s has no node ready for a session; try again in a moment, or see `ferry compute list-nodes %s`", compute, compute)
	}
	var c spec.Compute
	if err := json.Unmarshal(rec.Spec, &c); err != nil {
		return nil, fmt.Errorf("compute %s: stored spec: %w", compute, err)
	}
	keys, err := authorizedKeys(&c)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 12)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	x := &Session{ID: "ses-" + hex.EncodeToString(id), Compute: compute, Node: node, Kind: kind,
		KeyRequired: len(keys) > 0, nd: nd, keys: keys, ready: make(chan struct{})}
	t := &nd.sessions
	t.mu.Lock()
	if t.pending == nil {
		t.pending = map[string]*Session{}
	}
	t.pending[x.ID] = x
	t.mu.Unlock()
	nd.wakeNode(node)
	return x, nil
}

// authorizedKeys are the public keys of an instance's ssh_settings.ssh_key_value.
func authorizedKeys(c *spec.Compute) ([]string, error) {
	if c.SSHSettings == nil {
		return nil, nil
	}
	var keys []string
	for i, line := range strings.Split(c.SSHSettings.SSHKeyValue, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err != nil {
			return nil, apperr.Invalid("compute %s: ssh_settings.ssh_key_value: line %d is not an OpenSSH public key (%v); recreate the instance with the content of a .pub file", c.Name, i+1, err)
		}
		keys = append(keys, line)
	}
	return keys, nil
}

// AwaitAgent waits for the agent of the session's node to connect, for up
// to 30 s, and returns its connection, which the caller then owns; from
// then on the session counts as open. On an error the session is no
// longer pending.
func (x *Session) AwaitAgent(ctx context.Context) (io.ReadWriteCloser, error) {
	t := &x.nd.sessions
	t.mu.Lock()
	wait := t.wait
	t.mu.Unlock()
	if wait == 0 {
		wait = sessionAgentWait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-x.ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	x.mu.Lock()
	conn := x.agent
	x.done = true
	x.open = conn != nil && !x.closed
	opened := x.open
	x.mu.Unlock()
	x.nd.forgetPending(x.ID)
	if conn == nil {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("waiting for the agent of %s: %w", x.Compute, err)
		}
		return nil, apperr.Unavailable("the agent of compute instance %s (node %s) did not take the session within %s; it may be cut off from the server: see `ferry compute list-nodes %s`, or restart the instance with `ferry compute restart %s`",
			x.Compute, x.Node, wait, x.Compute, x.Compute)
	}
	if opened {
		t.mu.Lock()
		u := t.usesLocked(x.Compute)
		if x.Kind == SessionForward {
			u.forwards++
		} else {
			u.sessions++
		}
		t.mu.Unlock()
	}
	return conn, nil
}

// Close ends the session's bookkeeping: a pending session is forgotten, an
// open one no longer counts, and the instance's last activity is now. It
// closes no connection (the caller owns them) and may be called more than
// once.
func (x *Session) Close() {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.closed, x.done = true, true
	wasOpen := x.open
	x.open = false
	x.mu.Unlock()
	x.nd.forgetPending(x.ID)
	if !wasOpen {
		return
	}
	t := &x.nd.sessions
	t.mu.Lock()
	u := t.usesLocked(x.Compute)
	if x.Kind == SessionForward {
		u.forwards--
	} else {
		u.sessions--
	}
	u.lastClosed = x.nd.ws.now()
	t.mu.Unlock()
}

// Attach hands the agent's connection to the user's side. It returns false
// when the user has stopped waiting; the caller then closes conn.
func (x *Session) Attach(conn io.ReadWriteCloser) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done || x.agent != nil {
		return false
	}
	x.agent = conn
	close(x.ready)
	return true
}

func (nd *Nodes) forgetPending(id string) {
	nd.sessions.mu.Lock()
	delete(nd.sessions.pending, id)
	nd.sessions.mu.Unlock()
}

func (t *sessionTable) usesLocked(compute string) *sessionUses {
	if t.use == nil {
		t.use = map[string]*sessionUses{}
	}
	u := t.use[compute]
	if u == nil {
		u = &sessionUses{}
		t.use[compute] = u
	}
	return u
}

// AcceptSession is the agent's side: node's agent connects to session id,
// which must be pending for that node. The caller then upgrades the
// agent's connection and hands it over with Attach.
func (nd *Nodes) AcceptSession(ctx context.Context, who auth.Principal, node, id string) (*Session, error) {
	if who.Kind != KindNode || who.Subject != node {
		return nil, apperr.Forbidden("only node %s's own token may take its sessions", node)
	}
	t := &nd.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.pending[id]
	if x == nil || x.Node != node {
		return nil, apperr.NotFound("session %s is not waiting for node %s: it ended, or its user stopped waiting", id, node)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.claimed {
		return nil, apperr.Conflict("session %s is already connected", id)
	}
	x.claimed = true
	return x, nil
}

// sessionsFor returns the sessions waiting for node's agent that its polls
// have not been given lately.
func (nd *Nodes) sessionsFor(node string) []nodeproto.SessionRequest {
	now := nd.ws.now()
	t := &nd.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []nodeproto.SessionRequest
	for _, x := range t.pending {
		if x.Node != node {
			continue
		}
		x.mu.Lock()
		due := !x.claimed && (x.delivered.IsZero() || now.Sub(x.delivered) >= sessionRedeliver)
		if due {
			x.delivered = now
		}
		x.mu.Unlock()
		if due {
			out = append(out, nodeproto.SessionRequest{ID: x.ID, Kind: x.Kind, AuthorizedKeys: x.keys})
		}
	}
	return out
}

// sessionUse says how many sessions (exec and shell) and port-forwards of
// compute are open, and when the last one closed (zero if none has).
func (nd *Nodes) sessionUse(compute string) (sessions, forwards int, lastClosed time.Time) {
	t := &nd.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.use[compute]; u != nil {
		return u.sessions, u.forwards, u.lastClosed
	}
	return 0, 0, time.Time{}
}
