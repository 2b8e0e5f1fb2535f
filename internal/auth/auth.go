// Package auth makes and checks Ferry's API tokens.
//
// A token is a random secret shown once to whoever it is for; the workspace
// stores only its SHA-256, so a copy of the database does not grant access.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Token kinds.
const (
	KindOwner = "owner" // may do everything in the workspace
	KindRun   = "run"   // may write only its own job's logs, metrics, status and outputs
)

// Prefix starts every Ferry token, so that secret scanners can find leaked ones.
const Prefix = "fry_"

// NewToken returns a fresh secret and its hash.
func NewToken() (secret, hash string) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error()) // rand.Read never fails on Linux
	}
	secret = Prefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, Hash(secret)
}

// Hash returns the hex SHA-256 of a secret, the form tokens are stored in.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	return hex.EncodeToString(sum[:])
}

// Equal compares two secrets in constant time.
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Principal is who an authenticated request comes from.
type Principal struct {
	Kind    string // KindOwner or KindRun
	Subject string // user name, or job name for a run token
	Attempt int    // for run tokens: the attempt the token was made for
}

// IsOwner reports whether p may do everything.
func (p Principal) IsOwner() bool { return p.Kind == KindOwner }

// MayWriteJob reports whether p may write the logs, metrics, status and
// outputs of the named job.
func (p Principal) MayWriteJob(job string) bool {
	return p.IsOwner() || (p.Kind == KindRun && p.Subject == job)
}

// hashKey is the context key of WithTokenHash.
type hashKey struct{}

// WithTokenHash returns ctx carrying the Hash of a token, for a call that
// this process makes to its own API handler on behalf of that token: the
// studio's, whose sessions keep only the hash of the token they act with.
// The API takes such a call as made with the token. Only code in the
// process can put a value in a request's context, so no request from the
// network can present a hash in place of a secret.
func WithTokenHash(ctx context.Context, hash string) context.Context {
	return context.WithValue(ctx, hashKey{}, hash)
}

// TokenHashFrom returns the hash WithTokenHash put in ctx.
func TokenHashFrom(ctx context.Context) (string, bool) {
	h, ok := ctx.Value(hashKey{}).(string)
	return h, ok && h != ""
}
