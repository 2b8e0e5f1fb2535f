package studio

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
)

// cookieName is the session cookie; it holds the workspace token.
const cookieName = "ferry_studio"

// csrfLabel is what a session's CSRF token is the HMAC of.
const csrfLabel = "ferry studio csrf v1"

// csrfToken is the CSRF token of the session whose token is token: the
// HMAC-SHA256 of csrfLabel under the token. It reveals nothing of the
// token, and a site that cannot read the studio's pages cannot make it.
func csrfToken(token string) string {
	m := hmac.New(sha256.New, []byte(strings.TrimSpace(token)))
	m.Write([]byte(csrfLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func checkCSRF(token, got string) bool {
	return got != "" && hmac.Equal([]byte(csrfToken(token)), []byte(got))
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

func setCookie(w http.ResponseWriter, r *http.Request, token string) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: Prefix,
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
// only then sets the session cookie. The token is never shown back.
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
	ss := s.newSession(token)
	if _, err := ss.api.ListComputes(r.Context()); err != nil {
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
	setCookie(w, r, token)
	http.Redirect(w, r, v.Next, http.StatusSeeOther)
}

func (s *Studio) signOut(w http.ResponseWriter, r *http.Request, _ *session) error {
	clearCookie(w, r)
	http.Redirect(w, r, "/studio/signin", http.StatusSeeOther)
	return nil
}
