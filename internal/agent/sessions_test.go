package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/session"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// TestAgentServesSessions: a session in the answer to a poll is connected
// once (however often the server repeats it), served in the node's
// directory, with the agent's environment less its secrets.
func TestAgentServesSessions(t *testing.T) {
	const joinToken, nodeToken = "join-secret-51ab", "node-secret-e0c4"
	var mu sync.Mutex
	polls, offered, connected := 0, 0, 0
	results := make(chan string, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/nodes/join", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nodeproto.JoinReply{Node: "node-a", NodeToken: nodeToken, HeartbeatSeconds: 1})
	})
	mux.HandleFunc("POST /v1/nodes/node-a/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nodeproto.HeartbeatReply{})
	})
	mux.HandleFunc("GET /v1/nodes/node-a/assignments", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		polls++
		as := nodeproto.Assignments{Assignments: []nodeproto.Assignment{}}
		if offered < 3 {
			offered++
			as.Sessions = []nodeproto.SessionRequest{{ID: "ses-1", Kind: session.KindExec}}
		}
		reply(w, as)
	})
	mux.HandleFunc("GET /v1/nodes/node-a/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+nodeToken || r.Header.Get("Upgrade") != session.Protocol || r.PathValue("id") != "ses-1" {
			problem(w, http.StatusBadRequest, "not the node's upgrade to ses-1")
			return
		}
		mu.Lock()
		connected++
		mu.Unlock()
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + session.Protocol + "\r\n\r\n")
		brw.Flush()
		go func() {
			c, err := session.NewClient(conn)
			if err != nil {
				results <- "client: " + err.Error()
				return
			}
			defer c.Close()
			var out strings.Builder
			code, err := session.Exec(context.Background(), c, `pwd; echo "token=$FERRY_JOIN_TOKEN base=$AGENT_BASE"`, nil, session.Stdio{Stdout: &out, Stderr: io.Discard})
			if err != nil || code != 0 {
				results <- "exec failed"
				return
			}
			results <- out.String()
		}()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Server: srv.URL, Name: "node-a", JoinToken: joinToken, Dir: dir, Exe: "/bin/false",
			Env: append(os.Environ(), "FERRY_JOIN_TOKEN="+joinToken, "AGENT_BASE=yes"),
			Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	}()
	defer func() {
		cancel()
		<-done
		assertNoSecrets(t, "the agent's log", logs.String(), joinToken, nodeToken)
	}()

	if got, want := <-results, dir+"\ntoken= base=yes\n"; got != want {
		t.Errorf("the session ran with %q, want %q", got, want)
	}
	// A poll after the last offer means the agent has read them all.
	testutil.WaitFor(t, 30*time.Second, "the agent to read the repeated offers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return polls > 3
	})
	mu.Lock()
	defer mu.Unlock()
	if connected != 1 {
		t.Errorf("the agent connected the session %d times, want once", connected)
	}
}
