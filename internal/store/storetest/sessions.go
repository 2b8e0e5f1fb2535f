package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// RunSessions runs the suite of store.Sessions. open is as for Run.
func RunSessions[S store.Sessions](t *testing.T, open func(t *testing.T) S) {
	run(t, func(t *testing.T) store.Sessions { return open(t) }, []test[store.Sessions]{
		{"Session/Lifecycle", testSessionLifecycle},
	})
}

// A session reads back as stored; a second with its hash conflicts; one
// deleted, or expired and swept, is not found; deleting none is no error.
func testSessionLifecycle(t *testing.T, s store.Sessions) {
	ctx := context.Background()
	a := store.Session{Hash: "session-a", TokenHash: "token-1", CSRF: "csrf-a", Created: t0, Expires: t0.Add(time.Hour)}
	b := store.Session{Hash: "session-b", TokenHash: "token-1", CSRF: "csrf-b", Created: t0, Expires: t0.Add(48 * time.Hour)}
	for _, ss := range []store.Session{a, b} {
		if err := s.CreateSession(ctx, ss); err != nil {
			t.Fatalf("CreateSession(%s): %v", ss.Hash, err)
		}
	}
	if err := s.CreateSession(ctx, a); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateSession of an existing hash: %v, want ErrConflict", err)
	}
	got, err := s.SessionByHash(ctx, a.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(a, got); d != "" {
		t.Errorf("SessionByHash (-want +got):\n%s", d)
	}
	if _, err := s.SessionByHash(ctx, "no-such"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SessionByHash of none: %v, want ErrNotFound", err)
	}

	if err := s.DeleteExpiredSessions(ctx, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionByHash(ctx, a.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an expired session after DeleteExpiredSessions: %v, want ErrNotFound", err)
	}
	if _, err := s.SessionByHash(ctx, b.Hash); err != nil {
		t.Errorf("a live session after DeleteExpiredSessions: %v", err)
	}
	if err := s.DeleteSession(ctx, b.Hash); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionByHash(ctx, b.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a deleted session: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSession(ctx, b.Hash); err != nil {
		t.Errorf("deleting a session that is gone: %v", err)
	}
}
