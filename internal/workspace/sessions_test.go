package workspace

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
)

// newInstance makes a workspace with a Running compute instance c (whose
// name is dev-box) and returns its node's name.
func newInstance(t *testing.T, c *spec.Compute) (*Service, *clock, string) {
	t.Helper()
	return newInstanceOn(t, c, &schedProvider{})
}

// newInstanceOn is newInstance with the instance's machines from prov.
func newInstanceOn(t *testing.T, c *spec.Compute, prov *schedProvider) (*Service, *clock, string) {
	t.Helper()
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}
	s := newPoolService(t, st, dir, prov, clk)
	if c == nil {
		c = &spec.Compute{Name: "dev-box", Type: "computeinstance", Size: "Standard_DS1_v2"}
	}
	if _, err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if got := computeState(t, s, "dev-box"); got != InstanceRunning {
		t.Fatalf("dev-box is %s, want Running", got)
	}
	nodes := mustNodes(t, s, "dev-box")
	if len(nodes) != 1 {
		t.Fatalf("nodes: %+v", nodes)
	}
	return s, clk, nodes[0].Name
}

func nodePrincipal(node string) auth.Principal { return auth.Principal{Kind: KindNode, Subject: node} }

// poll is one assignment poll of node's agent that does not wait.
func poll(t *testing.T, s *Service, node string) []string {
	t.Helper()
	as, err := s.Nodes().NodeAssignments(context.Background(), nodePrincipal(node), node, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range as.Sessions {
		ids = append(ids, r.ID+"/"+r.Kind)
	}
	return ids
}

// connected opens a session of kind and connects it as the agent would,
// returning the session with its agent's connection taken.
func connected(t *testing.T, s *Service, node, kind string) *Session {
	t.Helper()
	ctx := context.Background()
	x, err := s.Nodes().OpenSession(ctx, owner, "dev-box", kind)
	if err != nil {
		t.Fatal(err)
	}
	y, err := s.Nodes().AcceptSession(ctx, nodePrincipal(node), node, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	agentEnd, userEnd := net.Pipe()
	t.Cleanup(func() { agentEnd.Close(); userEnd.Close() })
	if !y.Attach(agentEnd) {
		t.Fatal("Attach refused while the user waits")
	}
	conn, err := x.AwaitAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if conn != agentEnd {
		t.Fatal("the user side got another connection than the agent's")
	}
	return x
}

func wantCode(t *testing.T, what string, err error, code apperr.Code, words ...string) {
	t.Helper()
	if err == nil || apperr.CodeOf(err) != code {
		t.Fatalf("%s: got %v (code %d), want code %d", what, err, apperr.CodeOf(err), code)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

func TestSessionPairsUserAndAgent(t *testing.T) {
	s, clk, node := newInstance(t, nil)
	ctx := context.Background()

	_, err := s.Nodes().OpenSession(ctx, auth.Principal{Kind: auth.KindRun, Subject: "j"}, "dev-box", "exec")
	wantCode(t, "a run token", err, apperr.CodeForbidden)
	_, err = s.Nodes().OpenSession(ctx, owner, "dev-box", "telnet")
	wantCode(t, "a bad kind", err, apperr.CodeInvalid, "exec, shell or forward")
	_, err = s.Nodes().OpenSession(ctx, owner, "local", "exec")
	wantCode(t, "the local target", err, apperr.CodeInvalid, "computeinstance")
	_, err = s.Nodes().OpenSession(ctx, owner, "nope", "exec")
	wantCode(t, "an unknown compute", err, apperr.CodeNotFound)

	x, err := s.Nodes().OpenSession(ctx, owner, "dev-box", SessionShell)
	if err != nil {
		t.Fatal(err)
	}
	if x.Node != node || x.KeyRequired {
		t.Errorf("session %+v", x)
	}
	if got := poll(t, s, node); len(got) != 1 || got[0] != x.ID+"/shell" {
		t.Fatalf("the agent's poll brought %v, want %s/shell", got, x.ID)
	}
	if got := poll(t, s, node); len(got) != 0 {
		t.Errorf("a session handed out just now was handed out again: %v", got)
	}
	clk.advance(sessionRedeliver)
	if got := poll(t, s, node); len(got) != 1 {
		t.Errorf("a session not taken within %s was not handed out again: %v", sessionRedeliver, got)
	}

	_, err = s.Nodes().AcceptSession(ctx, nodePrincipal("other-node"), node, x.ID)
	wantCode(t, "another node's token", err, apperr.CodeForbidden)
	_, err = s.Nodes().AcceptSession(ctx, nodePrincipal(node), node, "ses-nope")
	wantCode(t, "an unknown session", err, apperr.CodeNotFound)
	y, err := s.Nodes().AcceptSession(ctx, nodePrincipal(node), node, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Nodes().AcceptSession(ctx, nodePrincipal(node), node, x.ID)
	wantCode(t, "a session connected twice", err, apperr.CodeConflict)
	if got := poll(t, s, node); len(got) != 0 {
		t.Errorf("a connected session is still handed out: %v", got)
	}

	agentEnd, userEnd := net.Pipe()
	defer agentEnd.Close()
	defer userEnd.Close()
	go y.Attach(agentEnd)
	conn, err := x.AwaitAgent(ctx)
	if err != nil || conn != agentEnd {
		t.Fatalf("AwaitAgent: %v, %v", conn, err)
	}
	if n, f, _ := s.nodes.sessionUse("dev-box"); n != 1 || f != 0 {
		t.Errorf("open: %d sessions, %d forwards; want 1, 0", n, f)
	}
	v, err := s.GetCompute(ctx, "dev-box")
	if err != nil || v.Sessions != 1 || v.PortForwards != 0 {
		t.Errorf("compute view: %+v, %v", v, err)
	}
	clk.advance(time.Minute)
	x.Close()
	x.Close() // twice is once
	if n, f, last := s.nodes.sessionUse("dev-box"); n != 0 || f != 0 || !last.Equal(clk.Now()) {
		t.Errorf("closed: %d sessions, %d forwards, last closed %s; want 0, 0, %s", n, f, last, clk.Now())
	}
}

// A session the agent never takes, or whose user stops waiting, leaves
// nothing behind.
func TestSessionNotTakenIsForgotten(t *testing.T) {
	s, _, node := newInstance(t, nil)
	s.nodes.sessions.wait = 50 * time.Millisecond
	ctx := context.Background()

	x, err := s.Nodes().OpenSession(ctx, owner, "dev-box", SessionExec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.AwaitAgent(ctx)
	wantCode(t, "no agent", err, apperr.CodeUnavailable, "did not take the session", "ferry compute restart dev-box")
	x.Close()
	_, err = s.Nodes().AcceptSession(ctx, nodePrincipal(node), node, x.ID)
	wantCode(t, "a session given up", err, apperr.CodeNotFound)

	gone, cancel := context.WithCancel(ctx)
	y, err := s.Nodes().OpenSession(ctx, owner, "dev-box", SessionForward)
	if err != nil {
		t.Fatal(err)
	}
	z, err := s.Nodes().AcceptSession(ctx, nodePrincipal(node), node, y.ID)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := y.AwaitAgent(gone); err == nil {
		t.Fatal("AwaitAgent went on after its user went away")
	}
	y.Close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if z.Attach(a) {
		t.Error("Attach took a connection for a user who has gone")
	}

	if got := poll(t, s, node); len(got) != 0 {
		t.Errorf("sessions given up are still handed out: %v", got)
	}
	if len(s.nodes.sessions.pending) != 0 {
		t.Errorf("pending sessions left: %v", s.nodes.sessions.pending)
	}
	if n, f, last := s.nodes.sessionUse("dev-box"); n != 0 || f != 0 || !last.IsZero() {
		t.Errorf("sessions that never opened count: %d, %d, %s", n, f, last)
	}
}

// An open session or port-forward keeps an instance from stopping for
// idleness; the idle time starts again when the last one closes.
func TestOpenSessionPreventsIdleStop(t *testing.T) {
	idle := 15
	s, clk, node := newInstance(t, &spec.Compute{Name: "dev-box", Type: "computeinstance", Size: "Standard_DS1_v2", IdleTimeBeforeShutdownMins: &idle})
	shell := connected(t, s, node, SessionShell)
	fwd := connected(t, s, node, SessionForward)
	if n, f, _ := s.nodes.sessionUse("dev-box"); n != 1 || f != 1 {
		t.Fatalf("%d sessions, %d forwards; want 1, 1", n, f)
	}

	clk.advance(2 * time.Hour)
	pass(t, s)
	if got := computeState(t, s, "dev-box"); got != InstanceRunning {
		t.Fatalf("with a session and a forward open for 2h: %s, want Running", got)
	}
	shell.Close()
	clk.advance(2 * time.Hour)
	pass(t, s)
	if got := computeState(t, s, "dev-box"); got != InstanceRunning {
		t.Fatalf("with a forward open: %s, want Running", got)
	}
	fwd.Close() // now: the idle time starts here
	clk.advance(14 * time.Minute)
	pass(t, s)
	if got := computeState(t, s, "dev-box"); got != InstanceRunning {
		t.Fatalf("14 min after the last forward closed: %s, want Running", got)
	}
	clk.advance(time.Minute)
	pass(t, s)
	if got := computeState(t, s, "dev-box"); got != InstanceStopping && got != InstanceStopped {
		t.Fatalf("15 min after the last forward closed: %s, want Stopping", got)
	}
	ev, err := s.Nodes().ComputeEvents(context.Background(), "dev-box", 0)
	if err != nil {
		t.Fatal(err)
	}
	said := false
	for _, e := range ev {
		said = said || strings.Contains(e.Message, "→ Stopping") && strings.Contains(e.Message, "idle for 15m0s")
	}
	if !said {
		t.Errorf("no event says the instance stops for idleness: %+v", ev)
	}
}

func TestSessionRefusedUnlessRunning(t *testing.T) {
	s, _, _ := newInstance(t, nil)
	ctx := context.Background()
	if _, err := s.Nodes().StopInstance(ctx, owner, "dev-box"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Nodes().OpenSession(ctx, owner, "dev-box", SessionExec)
	wantCode(t, "a Stopping instance", err, apperr.CodeConflict, "is Stopping", "ferry compute start dev-box")
	for range 3 {
		pass(t, s)
	}
	if got := computeState(t, s, "dev-box"); got != InstanceStopped {
		t.Fatalf("dev-box is %s", got)
	}
	_, err = s.Nodes().OpenSession(ctx, owner, "dev-box", SessionShell)
	wantCode(t, "a Stopped instance", err, apperr.CodeConflict, "compute instance dev-box is Stopped; start it with `ferry compute start dev-box`")
	if _, err := s.Nodes().StartInstance(ctx, owner, "dev-box"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Nodes().OpenSession(ctx, owner, "dev-box", SessionShell)
	wantCode(t, "a Starting instance", err, apperr.CodeConflict, "is Starting", "Running")
}

func TestSessionCarriesAuthorizedKeys(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	s, _, node := newInstance(t, &spec.Compute{Name: "dev-box", Type: "computeinstance", Size: "Standard_DS1_v2",
		SSHSettings: &spec.SSHSettings{SSHKeyValue: line + " me@laptop"}})
	x, err := s.Nodes().OpenSession(context.Background(), owner, "dev-box", SessionExec)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if !x.KeyRequired {
		t.Error("an instance with ssh_key_value does not ask for a key")
	}
	as, err := s.Nodes().NodeAssignments(context.Background(), nodePrincipal(node), node, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(as.Sessions) != 1 || len(as.Sessions[0].AuthorizedKeys) != 1 || !strings.HasPrefix(as.Sessions[0].AuthorizedKeys[0], line) {
		t.Errorf("the agent was given %+v, want the key %s", as.Sessions, line)
	}
	if _, err := authorizedKeys(&spec.Compute{Name: "x", SSHSettings: &spec.SSHSettings{SSHKeyValue: "# ok\nssh-rsa not-a-key"}}); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad ssh_key_value: %v", err)
	}
}
