package api

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/compute/computeinstance"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/session"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/testutil"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// noTarget stands in for the local target, which these tests do not use.
type noTarget struct{}

func (noTarget) Type() string                             { return "local" }
func (noTarget) Admit(*spec.Job, *environment.Spec) error { return nil }
func (noTarget) Capacity() int                            { return 1 }
func (noTarget) Launch(context.Context, compute.Launch) (compute.Handle, error) {
	return "", errors.New("no local jobs in this test")
}

// paperProvider makes machines on paper and keeps their join tokens, so
// that a test can play their agents.
type paperProvider struct {
	mu     sync.Mutex
	tokens map[string]string // node -> join token
}

func (p *paperProvider) Type() string { return "paper" }
func (p *paperProvider) Launch(_ context.Context, r provider.LaunchRequest) (provider.Machine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, kv := range r.AgentEnv {
		if tok, ok := strings.CutPrefix(kv, "FERRY_JOIN_TOKEN="); ok {
			p.tokens[r.Name] = tok
		}
	}
	return provider.Machine{ID: r.Name, Pool: r.Pool, State: provider.StateRunning}, nil
}
func (p *paperProvider) List(context.Context, string) ([]provider.Machine, error) { return nil, nil }
func (p *paperProvider) Terminate(context.Context, string) error                  { return nil }

// testServer is an API server on a fresh workspace, with its owner token.
func testServer(t *testing.T, prov *paperProvider) (*httptest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ws, err := workspace.New(ctx, workspace.Config{
		Store: st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://unused",
		Targets:   func(*spec.Compute) (compute.Target, error) { return noTarget{}, nil },
		Providers: func(*spec.Compute) (provider.Provider, error) { return prov, nil },
		PoolTypes: map[string]*compute.Pool{computeinstance.Type: computeinstance.Pool},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { ws.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	secret := "fry_test-owner-token"
	if err := st.CreateToken(ctx, store.Token{Hash: auth.Hash(secret), Kind: auth.KindOwner, Subject: "owner", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(ws, Workloads{}, st, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return srv, secret
}

func call(t *testing.T, srv *httptest.Server, method, path, token string, body io.Reader, hdr map[string]string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func TestSessionRoutesRefuseWhatIsNotASession(t *testing.T) {
	srv, owner := testServer(t, &paperProvider{tokens: map[string]string{}})
	var p apitypes.Problem
	if code := call(t, srv, "GET", "/v1/computes/local/session?kind=exec", owner, nil, nil, &p); code != 400 || !strings.Contains(p.Detail, "Upgrade: ferry-session") {
		t.Errorf("no upgrade: %d %+v", code, p)
	}
	_, _, err := session.DialHTTP(context.Background(), srv.Client(), srv.URL+"/v1/computes/local/session?kind=exec", owner)
	var re *session.RefusedError
	if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(string(re.Body), "computeinstance") {
		t.Errorf("a session on the local target: %v", err)
	}
	_, _, err = session.DialHTTP(context.Background(), srv.Client(), srv.URL+"/v1/nodes/n1/sessions/ses-x", owner)
	if !errors.As(err, &re) || re.Status != 403 {
		t.Errorf("the node route with the owner's token: %v", err)
	}

	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	call(t, srv, "GET", "/openapi.json", "", nil, nil, &doc)
	for _, path := range []string{"/v1/computes/{name}/session", "/v1/nodes/{node}/sessions/{id}"} {
		r := doc.Paths[path]["get"].Responses
		if _, ok := r["101"]; !ok {
			t.Errorf("openapi: %s has no 101 answer: %v", path, r)
		}
	}
}

// TestSessionRelay plays an instance's agent over HTTP and runs a command
// through the server's relay.
func TestSessionRelay(t *testing.T) {
	prov := &paperProvider{tokens: map[string]string{}}
	srv, owner := testServer(t, prov)
	body := `{"name": "dev-box", "type": "computeinstance", "size": "Standard_DS1_v2"}`
	if code := call(t, srv, "POST", "/v1/computes", owner, strings.NewReader(body), nil, nil); code != 200 {
		t.Fatalf("create: %d", code)
	}
	var node, join string
	testutil.WaitFor(t, 20*time.Second, "a node launched", func() bool {
		prov.mu.Lock()
		defer prov.mu.Unlock()
		for n, tok := range prov.tokens {
			node, join = n, tok
		}
		return node != ""
	})
	var jr nodeproto.JoinReply
	jb, _ := json.Marshal(nodeproto.JoinRequest{Name: node})
	if code := call(t, srv, "POST", "/v1/nodes/join", join, strings.NewReader(string(jb)), nil, &jr); code != 200 {
		t.Fatalf("join: %d", code)
	}
	testutil.WaitFor(t, 20*time.Second, "dev-box Running", func() bool {
		var c apitypes.Compute
		call(t, srv, "GET", "/v1/computes/dev-box", owner, nil, nil, &c)
		return c.State == workspace.InstanceRunning
	})

	// The agent: the next poll brings the session, which it serves.
	agentCtx, stopAgent := context.WithCancel(context.Background())
	defer stopAgent()
	served := make(chan error, 1)
	go func() {
		for agentCtx.Err() == nil {
			as, err := pollAssignments(agentCtx, srv, node, jr.NodeToken)
			if err != nil {
				served <- err
				return
			}
			for _, r := range as.Sessions {
				if r.Kind != session.KindExec {
					served <- errors.New("the session's kind is " + r.Kind)
					return
				}
				conn, _, err := session.DialHTTP(agentCtx, srv.Client(), srv.URL+"/v1/nodes/"+node+"/sessions/"+r.ID, jr.NodeToken)
				if err != nil {
					served <- err
					return
				}
				served <- session.Serve(agentCtx, conn, session.ServerConfig{Kind: r.Kind})
				return
			}
		}
	}()

	conn, hdr, err := session.DialHTTP(context.Background(), srv.Client(), srv.URL+"/v1/computes/dev-box/session?kind=exec", owner)
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Get(session.AuthHeader) != "" {
		t.Errorf("an instance without ssh_key_value asks for a key: %v", hdr)
	}
	c, err := session.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code, err := session.Exec(context.Background(), c, "echo relayed; exit 9", nil, session.Stdio{Stdout: &out, Stderr: io.Discard})
	if err != nil || code != 9 || out.String() != "relayed\n" {
		t.Errorf("through the relay: %q, exit %d, %v", out.String(), code, err)
	}
	var v apitypes.Compute
	call(t, srv, "GET", "/v1/computes/dev-box", owner, nil, nil, &v)
	if v.Sessions != 1 {
		t.Errorf("compute view while the session is open: %d sessions", v.Sessions)
	}
	c.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("the agent's side: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's side goes on after the client closed")
	}
	testutil.WaitFor(t, 20*time.Second, "the session to close", func() bool {
		var v apitypes.Compute
		call(t, srv, "GET", "/v1/computes/dev-box", owner, nil, nil, &v)
		return v.Sessions == 0
	})
}

// pollAssignments is one long poll of a node's agent. (Not call: it runs
// outside the test's goroutine, where a test may not fail itself.)
func pollAssignments(ctx context.Context, srv *httptest.Server, node, token string) (*nodeproto.Assignments, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/nodes/"+node+"/assignments?wait=5", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, errors.New("poll: " + resp.Status)
	}
	var as nodeproto.Assignments
	return &as, json.NewDecoder(resp.Body).Decode(&as)
}
