package store

import (
	"context"
	"time"
)

// Session is a signed-in studio session. Neither its id (the cookie) nor
// the token it acts with is stored: only their SHA-256 (auth.Hash), so
// that a copy of the database signs no one in.
type Session struct {
	Hash      string // hex SHA-256 of the session's id, the cookie's value
	TokenHash string // the Hash of the workspace token it acts with
	// CSRF is the session's CSRF token: random, made with the session,
	// and put in the forms of its pages. Alone it grants nothing.
	CSRF    string
	Created time.Time
	Expires time.Time
}

// Sessions keeps the studio's signed-in sessions, by hash only. An expired
// session is kept, and found, until DeleteExpiredSessions removes it. Its
// methods are safe for concurrent use, and keep the contract common to every
// part of Store: errors wrap ErrNotFound or ErrConflict where those apply,
// and a returned error leaves stored state unchanged.
type Sessions interface {
	// CreateSession stores a studio session; ErrConflict if its hash
	// exists.
	CreateSession(ctx context.Context, s Session) error
	// SessionByHash finds a session by the hash of its id, expired or
	// not; ErrNotFound if there is none.
	SessionByHash(ctx context.Context, hash string) (Session, error)
	// DeleteSession removes a session; deleting none is not an error.
	DeleteSession(ctx context.Context, hash string) error
	// DeleteExpiredSessions removes the sessions that expire at or
	// before now.
	DeleteExpiredSessions(ctx context.Context, now time.Time) error
}
