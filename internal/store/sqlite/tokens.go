package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/store"
)

// CreateToken implements store.Store.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	_, err := s.exec(ctx, s.w, `INSERT INTO tokens (hash, kind, subject, attempt, created) VALUES (?, ?, ?, ?, ?)`,
		t.Hash, t.Kind, t.Subject, t.Attempt, timeArg(t.Created))
	// Error messages leave the hash out: it is not the secret, but no reader
	// of a log gains anything from it.
	if isUnique(err) {
		return fmt.Errorf("token: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create %s token for %q: %w", t.Kind, t.Subject, err)
	}
	return nil
}

// TokenByHash implements store.Store.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	var (
		t       store.Token
		created sql.NullInt64
	)
	err := s.readRow(ctx, qTokenByHash, hash).
		Scan(&t.Hash, &t.Kind, &t.Subject, &t.Attempt, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Token{}, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("look up token: %w", err)
	}
	t.Created = timeOf(created)
	return t, nil
}

// DeleteTokens implements store.Store. Deleting no tokens is not an error.
func (s *Store) DeleteTokens(ctx context.Context, kind, subject string) error {
	if _, err := s.exec(ctx, s.w, `DELETE FROM tokens WHERE kind = ? AND subject = ?`, kind, subject); err != nil {
		return fmt.Errorf("delete %s tokens of %q: %w", kind, subject, err)
	}
	return nil
}
