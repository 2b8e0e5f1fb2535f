package agent

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// fakeServer is the workspace side of nodeproto, kept as small as the
// protocol: the real server is tested against the same protocol on its
// side, and the agent is a boundary Ferry owns on both ends.
type fakeServer struct {
	t         *testing.T
	srv       *httptest.Server
	URL       string
	joinToken string
	nodeToken string
	quit      chan struct{} // closed before the server closes: ends held requests

	mu         sync.Mutex
	joins      []nodeproto.JoinRequest
	beats      []nodeproto.Heartbeat // those answered 200
	polls      int                   // polls answered 200
	refused    int                   // calls answered 503 while down
	assign     []nodeproto.Assignment
	reply      nodeproto.HeartbeatReply
	down       bool // every call gets 503
	forget     bool // node calls get 401
	joinStatus int  // not 0: the join is refused with this status
	runnerAuth []string
	changed    chan struct{}
}

// newFakeServer starts a server; on ln when given (to start it on an
// address an agent already tries), else on a free loopback port.
func newFakeServer(t *testing.T, ln net.Listener) *fakeServer {
	t.Helper()
	fs := &fakeServer{t: t, joinToken: "join-secret-7f3a", nodeToken: "node-secret-91c2",
		quit: make(chan struct{}), changed: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/nodes/join", fs.join)
	mux.HandleFunc("POST /v1/nodes/{node}/heartbeat", fs.heartbeat)
	mux.HandleFunc("GET /v1/nodes/{node}/assignments", fs.assignments)
	mux.HandleFunc("GET /v1/jobs/{job}/attempts/{attempt}/assignment", fs.runnerAssignment)
	fs.srv = httptest.NewUnstartedServer(mux)
	if ln != nil {
		fs.srv.Listener.Close()
		fs.srv.Listener = ln
	}
	fs.srv.Start()
	fs.URL = fs.srv.URL
	t.Cleanup(func() {
		close(fs.quit)
		fs.srv.Close()
	})
	return fs
}

func problem(w http.ResponseWriter, status int, detail string, fieldErrors ...map[string]string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail, "errors": fieldErrors,
	})
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// gate answers 503 while the server is down and 401 to a wrong bearer;
// it says whether the call may go on. fs.mu must be held.
func (fs *fakeServer) gate(w http.ResponseWriter, r *http.Request, token string) bool {
	if fs.down {
		fs.refused++
		problem(w, http.StatusServiceUnavailable, "the workspace is restarting")
		return false
	}
	if r.Header.Get("Authorization") != "Bearer "+token {
		problem(w, http.StatusUnauthorized, "wrong token")
		return false
	}
	return true
}

func (fs *fakeServer) join(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.gate(w, r, fs.joinToken) {
		return
	}
	var req nodeproto.JoinRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	fs.joins = append(fs.joins, req)
	if fs.joinStatus != 0 {
		problem(w, fs.joinStatus, "join token revoked", map[string]string{"field": "name", "message": "taken by another node"})
		return
	}
	reply(w, nodeproto.JoinReply{Node: req.Name, NodeToken: fs.nodeToken, HeartbeatSeconds: 1, LeaseSeconds: 10})
}

func (fs *fakeServer) nodeCall(w http.ResponseWriter, r *http.Request) bool {
	if !fs.gate(w, r, fs.nodeToken) {
		return false
	}
	if fs.forget {
		problem(w, http.StatusUnauthorized, "node token revoked")
		return false
	}
	if len(fs.joins) == 0 || r.PathValue("node") != fs.joins[len(fs.joins)-1].Name {
		problem(w, http.StatusNotFound, "no such node")
		return false
	}
	return true
}

func (fs *fakeServer) heartbeat(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.nodeCall(w, r) {
		return
	}
	var hb nodeproto.Heartbeat
	if err := json.NewDecoder(r.Body).Decode(&hb); err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	fs.beats = append(fs.beats, hb)
	reply(w, fs.reply)
}

// assignments answers at once with the node's assignments, the ones that
// already run included, as a server that keeps no per-poll cursor would;
// with none, it holds the poll a little.
func (fs *fakeServer) assignments(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	if !fs.nodeCall(w, r) {
		fs.mu.Unlock()
		return
	}
	if r.URL.Query().Get("wait") == "" {
		fs.mu.Unlock()
		problem(w, http.StatusBadRequest, "no wait")
		return
	}
	if len(fs.assign) == 0 {
		fs.mu.Unlock()
		select {
		case <-fs.changed:
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
		case <-fs.quit:
		}
		fs.mu.Lock()
	}
	fs.polls++
	as := append([]nodeproto.Assignment{}, fs.assign...)
	fs.mu.Unlock()
	reply(w, nodeproto.Assignments{Assignments: as})
}

// runnerAssignment is the first call of a real `ferry runner`: it records
// the runner's bearer and holds the call, so the runner stays up.
func (fs *fakeServer) runnerAssignment(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	fs.runnerAuth = append(fs.runnerAuth, r.Header.Get("Authorization"))
	fs.mu.Unlock()
	select {
	case <-r.Context().Done():
	case <-fs.quit:
	}
}

// set changes the server's state under its lock.
func (fs *fakeServer) set(f func(fs *fakeServer)) {
	fs.mu.Lock()
	f(fs)
	fs.mu.Unlock()
	select {
	case fs.changed <- struct{}{}:
	default:
	}
}

// get reads the server's state under its lock.
func get[T any](fs *fakeServer, f func(fs *fakeServer) T) T {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return f(fs)
}

func (fs *fakeServer) numBeats() int {
	return get(fs, func(fs *fakeServer) int { return len(fs.beats) })
}

// beatAfter waits for a heartbeat after the n-th one that satisfies ok.
func (fs *fakeServer) beatAfter(n int, what string, ok func(nodeproto.Heartbeat) bool) nodeproto.Heartbeat {
	fs.t.Helper()
	var found nodeproto.Heartbeat
	testutil.WaitFor(fs.t, 30*time.Second, what, func() bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		for _, hb := range fs.beats[min(n, len(fs.beats)):] {
			if ok(hb) {
				found = hb
				return true
			}
		}
		return false
	})
	return found
}

// syncBuffer is a buffer a logger writes while a test reads.
type syncBuffer = testutil.SyncBuffer

// assertNoSecrets fails the test if text holds any of the secrets.
func assertNoSecrets(t *testing.T, where, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s holds the secret %q:\n%s", where, s, text)
		}
	}
}
