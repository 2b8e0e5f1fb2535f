package studio

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/client"
)

// cookieName is the session cookie. It holds the session's id: random,
// made at sign-in, known to the browser alone; the store keeps its hash.
const cookieName = "ferry_studio"

// sessionLife is how long a session lasts after sign-in.
const sessionLife = 7 * 24 * time.Hour

// Sessions is where the studio keeps its sessions: the workspace's store,
// so that they outlive a restart of the server (the server adapts its
// store to this; the studio links no store). SessionByHash answers
// ErrNoSession when the store has no session of that hash.
type Sessions interface {
	CreateSession(ctx context.Context, s SessionRecord) error
	SessionByHash(ctx context.Context, hash string) (SessionRecord, error)
	DeleteSession(ctx context.Context, hash string) error
	DeleteExpiredSessions(ctx context.Context, now time.Time) error
}

// SessionRecord is a stored session: the hashes of its id and of the
// token it acts with, never either.
type SessionRecord struct {
	Hash      string // hex SHA-256 of the session's id, the cookie's value
	TokenHash string // the auth.Hash of the workspace token it acts with
	// CSRF is the session's CSRF token: random, made with the session,
	// and put in the forms of its pages. Alone it grants nothing.
	CSRF    string
	Created time.Time
	Expires time.Time
}

// ErrNoSession is what Sessions.SessionByHash answers for a hash it has
// no session of.
var ErrNoSession = errors.New("no such session")

// randomID is 32 random bytes, base64url: a session's id or CSRF token.
func randomID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("studio: crypto/rand failed: " + err.Error()) // it does not on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// startSession stores a new session that acts with token and returns its
// id, the cookie's value. Its CSRF token is random too: nothing of the
// cookie or the token gives it. The store keeps the hashes of the id and
// the token, never either.
func (s *Studio) startSession(ctx context.Context, token string) (string, error) {
	now := time.Now()
	// Sessions nobody signed out of end here, so they do not pile up.
	if err := s.sessions.DeleteExpiredSessions(ctx, now); err != nil {
		s.log.Warn("studio: delete expired sessions", "err", err)
	}
	id := randomID()
	err := s.sessions.CreateSession(ctx, SessionRecord{Hash: auth.Hash(id), TokenHash: auth.Hash(token), CSRF: randomID(),
		Created: now, Expires: now.Add(sessionLife)})
	if err != nil {
		return "", fmt.Errorf("start a session: %w", err)
	}
	return id, nil
}

// endSession deletes ss's session from the store and its cookie from the
// browser: the cookie is worth nothing after, wherever a copy of it is.
func (s *Studio) endSession(w http.ResponseWriter, r *http.Request, ss *session) {
	if err := s.sessions.DeleteSession(r.Context(), ss.hash); err != nil {
		s.log.Warn("studio: delete session", "err", err)
	}
	clearCookie(w, r)
}

func checkCSRF(want, got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// sameOrigin reports whether a POST's Origin, when the browser sent one,
// is this server's own. (SameSite=Strict keeps the cookie off cross-site
// requests already; this refuses them even before the cookie is read.)
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func setCookie(w http.ResponseWriter, r *http.Request, id string) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: Prefix,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// safeNext is where to go after sign-in: a studio page, never another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/studio/compute"
	}
	return next
}

type signInView struct {
	Next    string
	Error   string
	Expired bool
}

func (s *Studio) signInPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, nil, "signin", "Sign in", signInView{Next: safeNext(r.URL.Query().Get("next")), Expired: r.URL.Query().Get("expired") != ""})
}

// signIn takes a workspace token from the form, asks the API whether it
// may list the workspace's computes (the least a studio user does), and
// only then starts a session and sets its cookie, which holds the
// session's id, not the token. The token is never shown back.
func (s *Studio) signIn(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !sameOrigin(r) {
		http.Error(w, "refused: the sign-in was sent from another site", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}
	v := signInView{Next: safeNext(r.PostForm.Get("next"))}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		v.Error = "Enter a workspace token (an owner's is in the server's data directory, owner.token)."
		s.render(withStatus(w, http.StatusBadRequest), r, nil, "signin", "Sign in", v)
		return
	}
	if _, err := s.tokenClient(token).ListComputes(r.Context()); err != nil {
		switch client.StatusOf(err) {
		case http.StatusUnauthorized:
			v.Error = "This token is not valid for this workspace (wrong, revoked or from another one)."
		case http.StatusForbidden:
			v.Error = "This token may not use the studio (a run or node token): sign in with a user's token."
		default:
			v.Error = "The workspace could not check the token: " + err.Error()
		}
		s.render(withStatus(w, http.StatusUnauthorized), r, nil, "signin", "Sign in", v)
		return
	}
	id, err := s.startSession(r.Context(), token)
	if err != nil {
		s.log.Error("studio sign-in", "err", err)
		v.Error = "The session could not be stored; the server's log has the details."
		s.render(withStatus(w, http.StatusInternalServerError), r, nil, "signin", "Sign in", v)
		return
	}
	setCookie(w, r, id)
	http.Redirect(w, r, v.Next, http.StatusSeeOther)
}

func (s *Studio) signOut(w http.ResponseWriter, r *http.Request, ss *session) error {
	s.endSession(w, r, ss)
	http.Redirect(w, r, "/studio/signin", http.StatusSeeOther)
	return nil
}
