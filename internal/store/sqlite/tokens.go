package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
)

// tokenCache keeps tokens found by hash for a few seconds: every API call
// looks its token up, and under bench/dispatch that store read was about a
// fifteenth of the server's CPU (a runner makes several calls per job).
//
// A token is cached when it is made too, once its insert has committed:
// a run token is made with its attempt's start and looked up by the
// runner's first call a few milliseconds later, and that read was the
// miss of every job.
//
// Revocation still wins at once: DeleteTokens drops the tokens it deleted
// from the cache after the delete has committed, and bumps gen, so that a
// lookup that read the database before the delete (and so may hold the
// revoked token) does not put it back. Only this process writes the
// database (the server holds its data dir), so no delete bypasses the
// cache; ttl bounds an entry's life all the same.
type tokenCache struct {
	mu  sync.Mutex
	gen uint64 // bumped by every DeleteTokens
	m   map[string]cachedToken
}

type cachedToken struct {
	t     store.Token
	until time.Time
}

const (
	tokenCacheTTL = 5 * time.Second
	// tokenCacheMax bounds the cache; when full it starts over, which
	// costs one store read per token in use.
	tokenCacheMax = 4096
)

// get returns a cached token, or false and the generation to pass to put.
func (c *tokenCache) get(hash string, now time.Time) (store.Token, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[hash]; ok && now.Before(e.until) {
		return e.t, c.gen, true
	}
	return store.Token{}, c.gen, false
}

// generation is the current generation, for a put of a token about to be
// written.
func (c *tokenCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// made caches t, which a transaction begun during generation gen has
// committed, as a lookup would read it back.
func (c *tokenCache) made(t store.Token, gen uint64, now time.Time) {
	t.Created = normTime(t.Created)
	c.put(t, gen, now)
}

// put caches t, read from the database during generation gen, unless a
// DeleteTokens ran since.
func (c *tokenCache) put(t store.Token, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if c.m == nil || len(c.m) >= tokenCacheMax {
		c.m = map[string]cachedToken{}
	}
	c.m[t.Hash] = cachedToken{t: t, until: now.Add(tokenCacheTTL)}
}

// revoke drops the cached tokens of kind and subject.
func (c *tokenCache) revoke(kind, subject string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for h, e := range c.m {
		if e.t.Kind == kind && e.t.Subject == subject {
			delete(c.m, h)
		}
	}
}

// CreateToken implements store.Tokens.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	gen := s.tokens.generation()
	_, err := s.exec(ctx, s.w, qCreateToken, t.Hash, t.Kind, t.Subject, t.Attempt, timeArg(t.Created))
	if err := createTokenErr(t, err); err != nil {
		return err
	}
	s.tokens.made(t, gen, time.Now())
	return nil
}

// createTokenErr is the error of a token's insert, err.
func createTokenErr(t store.Token, err error) error {
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

// TokenByHash implements store.Tokens. A token deleted by DeleteTokens is
// not found from the moment DeleteTokens returns, though lookups are cached.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	now := time.Now()
	t, gen, ok := s.tokens.get(hash, now)
	if ok {
		return t, nil
	}
	var created sql.NullInt64
	err := s.readRow(ctx, qTokenByHash, hash).
		Scan(&t.Hash, &t.Kind, &t.Subject, &t.Attempt, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Token{}, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("look up token: %w", err)
	}
	t.Created = timeOf(created)
	s.tokens.put(t, gen, now)
	return t, nil
}

// DeleteTokens implements store.Tokens. Deleting no tokens is not an error.
func (s *Store) DeleteTokens(ctx context.Context, kind, subject string) error {
	// Dropped from the cache after the delete (even a failed one): a lookup
	// between the two would otherwise cache the token again.
	defer s.tokens.revoke(kind, subject)
	if _, err := s.exec(ctx, s.w, qDeleteTokens, kind, subject); err != nil {
		return fmt.Errorf("delete %s tokens of %q: %w", kind, subject, err)
	}
	return nil
}
