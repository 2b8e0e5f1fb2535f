package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferry-ml/ferry/internal/serverurl"
)

// healthServer answers /healthz and counts the calls it answered.
func healthServer(t *testing.T, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A client that follows its server's URL file keeps calling the URL it has
// while the server answers there, whatever the file says; once the server
// is gone from there, the call that fails makes it read the file, and the
// next call goes to the URL the file names. The switch is told once.
func TestClientFollowsURLFile(t *testing.T) {
	var atA, atB atomic.Int64
	a, b := healthServer(t, &atA), healthServer(t, &atB)
	dir := t.TempDir()
	if err := serverurl.Write(dir, a.URL); err != nil {
		t.Fatal(err)
	}
	var moves []string
	c := New(a.URL, "tok")
	c.FollowURLFile(filepath.Join(dir, serverurl.FileName), func(from, to string) { moves = append(moves, from+" -> "+to) },
		func(err error) { t.Errorf("the file was reported bad: %v", err) })
	ctx := context.Background()

	// The file names B while A still answers: the client stays at A.
	if err := serverurl.Write(dir, b.URL); err != nil {
		t.Fatal(err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if atA.Load() != 1 || atB.Load() != 0 || c.BaseURL() != a.URL {
		t.Fatalf("with A answering, calls went to A %d times and B %d times; the client is at %s", atA.Load(), atB.Load(), c.BaseURL())
	}

	a.Close()
	err := c.Health(ctx)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the Ferry workspace at "+a.URL) {
		t.Fatalf("the call to the closed A: %v", err)
	}
	if c.BaseURL() != b.URL {
		t.Fatalf("after a call that could not reach A the client is at %s, want %s", c.BaseURL(), b.URL)
	}
	for range 3 {
		if err := c.Health(ctx); err != nil {
			t.Fatalf("a call after the switch: %v", err)
		}
	}
	if atB.Load() != 3 {
		t.Errorf("B answered %d calls, want 3", atB.Load())
	}
	if want := a.URL + " -> " + b.URL; len(moves) != 1 || moves[0] != want {
		t.Errorf("switches told: %q, want [%q]", moves, want)
	}

	// A client that follows no file stays where it was sent.
	var atC atomic.Int64
	cSrv := healthServer(t, &atC)
	plain := New(cSrv.URL, "tok")
	cSrv.Close()
	if err := plain.Health(ctx); err == nil || plain.BaseURL() != cSrv.URL {
		t.Errorf("a client without a file: %v, at %s", err, plain.BaseURL())
	}
}
