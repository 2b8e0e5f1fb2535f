package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// CreateSession implements store.Sessions.
func (s *Store) CreateSession(ctx context.Context, ss store.Session) error {
	if ss.Created.IsZero() || ss.Expires.IsZero() {
		return errors.New("create session: its created and expires times are needed")
	}
	_, err := s.exec(ctx, s.w, `INSERT INTO sessions (hash, token_hash, csrf, created, expires) VALUES (?, ?, ?, ?, ?)`,
		ss.Hash, ss.TokenHash, ss.CSRF, timeArg(ss.Created), timeArg(ss.Expires))
	// Errors leave the hashes out: no reader of a log gains from them.
	if isUnique(err) {
		return fmt.Errorf("session: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	return nil
}

// SessionByHash implements store.Sessions.
func (s *Store) SessionByHash(ctx context.Context, hash string) (store.Session, error) {
	var ss store.Session
	var created, expires sql.NullInt64
	err := s.readRow(ctx, `SELECT hash, token_hash, csrf, created, expires FROM sessions WHERE hash = ?`, hash).
		Scan(&ss.Hash, &ss.TokenHash, &ss.CSRF, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Session{}, fmt.Errorf("session: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("look up session: %w", err)
	}
	ss.Created, ss.Expires = timeOf(created), timeOf(expires)
	return ss, nil
}

// DeleteSession implements store.Sessions.
func (s *Store) DeleteSession(ctx context.Context, hash string) error {
	if _, err := s.exec(ctx, s.w, `DELETE FROM sessions WHERE hash = ?`, hash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions implements store.Sessions.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time) error {
	if _, err := s.exec(ctx, s.w, `DELETE FROM sessions WHERE expires <= ?`, now.UnixMicro()); err != nil {
		return fmt.Errorf("delete expired sessions: %w", err)
	}
	return nil
}
