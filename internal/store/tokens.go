package store

import (
	"context"
	"time"
)

// Token is an API token. Only the SHA-256 of the secret is stored.
type Token struct {
	Hash    string // hex SHA-256 of the secret
	Kind    string // "owner" or "run"
	Subject string // user name for owner tokens, job name for run tokens
	Attempt int    // the attempt a run token belongs to
	Created time.Time
}

// Tokens keeps API tokens, by the SHA-256 of their secret. A job's run
// tokens are also written by Jobs (UpdateJobs, UpdateJobWith), in the
// transaction of the attempt they belong to; TokenByHash finds both. Its
// methods are safe for concurrent use, and keep the contract common to every
// part of Store: errors wrap ErrNotFound or ErrConflict where those apply,
// and a returned error leaves stored state unchanged.
type Tokens interface {
	// CreateToken stores a token; ErrConflict if the hash exists.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token; ErrNotFound if there is none.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// DeleteTokens removes every token of the given kind and subject.
	DeleteTokens(ctx context.Context, kind, subject string) error
}
