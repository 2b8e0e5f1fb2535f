// Package studio serves Ferry's web pages at /studio/: compute targets,
// their nodes and events, the create-cluster form, jobs with their status
// timeline, live log, metrics charts and outputs.
//
// Pages are rendered on the server from html/template with their CSS and
// one small script embedded in the binary; every page reads with scripts
// off, and the script only follows a job's log (server-sent events). A
// page gets its data from the REST API the CLI uses, called in-process
// with the signed-in user's own token (handlerTransport), so a page can
// do nothing the API would not let that token do, and checks nothing of
// its own that the API does not.
//
// Sign-in checks a workspace token with the API and starts a session: a
// random id in an HttpOnly, SameSite=Strict cookie (Secure over TLS), and
// in the workspace's store the id's hash, the token's hash and the
// session's own random CSRF token. So a session outlives a server
// restart, ends at sign-out (its record is deleted: a copy of the cookie
// is then worthless), after a week, or when the token is revoked; and
// neither the cookie nor a copy of the database gives the token. The
// pages call the API with the token's hash in the request's context
// (auth.WithTokenHash). Every form carries the session's CSRF token,
// which only a page of this origin rendered for this session has.
package studio

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/client"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the studio is mounted on the server's listener.
const Prefix = "/studio/"

// Options configure a Studio.
type Options struct {
	// API is the workspace's REST API handler; pages call it in-process.
	API http.Handler
	// Sessions keeps the sign-in sessions: the workspace's store.
	Sessions Sessions
	Log      *slog.Logger
}

// Studio is the http.Handler of the studio's pages, mounted at Prefix.
type Studio struct {
	api      http.Handler
	sessions Sessions
	log      *slog.Logger
	mux      *http.ServeMux
	pages    map[string]*template.Template
}

// New makes the studio.
func New(o Options) (*Studio, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Sessions == nil {
		return nil, errors.New("studio: Options.Sessions (where sessions are kept) is required")
	}
	s := &Studio{api: o.API, sessions: o.Sessions, log: o.Log, mux: http.NewServeMux(), pages: map[string]*template.Template{}}
	if err := s.parse(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	s.mux.Handle("GET /studio/static/", http.StripPrefix("/studio/static/", cacheable(http.FileServerFS(static))))
	s.mux.HandleFunc("GET /studio/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/studio/compute", http.StatusSeeOther)
	})
	s.mux.HandleFunc("GET /studio/signin", s.signInPage)
	s.mux.HandleFunc("POST /studio/signin", s.signIn)
	s.mux.HandleFunc("POST /studio/signout", s.form(s.signOut))

	s.mux.HandleFunc("GET /studio/compute", s.page(s.computeList))
	s.mux.HandleFunc("GET /studio/compute/new", s.page(s.computeNew))
	s.mux.HandleFunc("POST /studio/compute", s.form(s.computeCreate))
	s.mux.HandleFunc("GET /studio/compute/new-instance", s.page(s.instanceNew))
	s.mux.HandleFunc("POST /studio/compute/new-instance", s.form(s.instanceCreate))
	s.mux.HandleFunc("GET /studio/compute/attach", s.page(s.attachNew))
	s.mux.HandleFunc("POST /studio/compute/attach", s.form(s.attachCreate))
	s.mux.HandleFunc("GET /studio/compute/attach-slurm", s.page(s.slurmNew))
	s.mux.HandleFunc("POST /studio/compute/attach-slurm", s.form(s.slurmCreate))
	s.mux.HandleFunc("GET /studio/compute/attach-kubernetes", s.page(s.kubeNew))
	s.mux.HandleFunc("POST /studio/compute/attach-kubernetes", s.form(s.kubeCreate))
	s.mux.HandleFunc("GET /studio/compute/{name}", s.page(s.computeDetail))
	s.mux.HandleFunc("POST /studio/compute/{name}/resize", s.form(s.computeResize))
	s.mux.HandleFunc("POST /studio/compute/{name}/action", s.form(s.computeAction))
	s.mux.HandleFunc("GET /studio/compute/{name}/delete", s.page(s.computeDeletePage))
	s.mux.HandleFunc("POST /studio/compute/{name}/delete", s.form(s.computeDelete))
	s.mux.HandleFunc("GET /studio/quotas", s.page(s.quotaList))

	s.mux.HandleFunc("GET /studio/jobs", s.page(s.jobList))
	s.mux.HandleFunc("GET /studio/jobs/{name}", s.page(s.jobDetail))
	s.mux.HandleFunc("GET /studio/jobs/{name}/log", s.page(s.jobLogText))
	s.mux.HandleFunc("GET /studio/jobs/{name}/events", s.page(s.jobLogEvents))
	s.mux.HandleFunc("POST /studio/jobs/{name}/cancel", s.form(s.jobCancel))
	s.mux.HandleFunc("POST /studio/jobs/{name}/resubmit", s.form(s.jobResubmit))
	s.mux.HandleFunc("GET /studio/blobs/{digest}", s.page(s.download))

	s.mux.HandleFunc("GET /studio/environments", s.page(s.environmentList))
	s.mux.HandleFunc("GET /studio/models", s.page(s.modelList))
	s.mux.HandleFunc("GET /studio/endpoints", s.page(s.endpointList))
	s.mux.HandleFunc("GET /studio/endpoints/{name}", s.page(s.endpointDetail))
	s.mux.HandleFunc("POST /studio/endpoints/{name}/traffic", s.form(s.endpointTraffic))
	s.mux.HandleFunc("POST /studio/endpoints/{name}/test", s.form(s.endpointTest))
	s.mux.HandleFunc("GET /studio/batch-endpoints", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/studio/endpoints#batch", http.StatusSeeOther)
	})
	s.mux.HandleFunc("GET /studio/batch-endpoints/{name}", s.page(s.batchDetail))
	s.mux.HandleFunc("POST /studio/batch-endpoints/{name}/invoke", s.form(s.batchInvoke))
	s.mux.HandleFunc("/studio/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no studio page "+r.URL.Path+"; start at /studio/", http.StatusNotFound)
	})
	return s, nil
}

// ServeHTTP implements http.Handler: every answer gets headers that keep
// pages out of frames and shared caches and scripts to this origin's own.
func (s *Studio) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	s.mux.ServeHTTP(w, r)
}

func cacheable(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// session is a signed-in request: its session's hash, the API client
// that calls as its token, and its CSRF token.
type session struct {
	hash string
	api  *client.Client
	csrf string
}

// sessionOf reads the request's session: nil when it has no cookie, or one
// the store has no live session for (signed out, expired, or from before
// sessions were stored, when the cookie held the token itself).
func (s *Studio) sessionOf(r *http.Request) (*session, error) {
	c, err := r.Cookie(cookieName)
	if err != nil || strings.TrimSpace(c.Value) == "" {
		return nil, nil
	}
	rec, err := s.sessions.SessionByHash(r.Context(), auth.Hash(c.Value))
	if errors.Is(err, ErrNoSession) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !time.Now().Before(rec.Expires) {
		_ = s.sessions.DeleteSession(r.Context(), rec.Hash)
		return nil, nil
	}
	hc := &http.Client{Transport: handlerTransport{h: s.api, tokenHash: rec.TokenHash}}
	return &session{hash: rec.Hash, api: client.NewWithHTTP("http://studio.internal", "", hc), csrf: rec.CSRF}, nil
}

// tokenClient calls the API with token itself: sign-in's check of it.
func (s *Studio) tokenClient(token string) *client.Client {
	return client.NewWithHTTP("http://studio.internal", token, &http.Client{Transport: handlerTransport{h: s.api}})
}

// pageFunc serves a signed-in GET.
type pageFunc func(w http.ResponseWriter, r *http.Request, ss *session) error

// page wraps a signed-in page: without a session it sends the browser to
// the sign-in page, and an API refusal of the session's token (revoked,
// say) signs it out.
func (s *Studio) page(f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss, err := s.sessionOf(r)
		if err != nil {
			s.log.Error("studio session", "err", err)
			http.Error(w, "the session could not be read; the server's log has the details", http.StatusInternalServerError)
			return
		}
		if ss == nil {
			clearCookie(w, r) // one that no longer names a session
			http.Redirect(w, r, "/studio/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if err := f(w, r, ss); err != nil {
			s.fail(w, r, ss, err)
		}
	}
}

// maxFormBytes caps a form's body, files included.
const maxFormBytes = 1 << 20

// form wraps a signed-in POST: it needs the session cookie, a same-origin
// Origin (when the browser sends one) and the session's CSRF token in the
// form, or it is refused with 403 and does nothing.
func (s *Studio) form(f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss, err := s.sessionOf(r)
		if err != nil {
			s.log.Error("studio session", "err", err)
			http.Error(w, "the session could not be read; the server's log has the details", http.StatusInternalServerError)
			return
		}
		if ss == nil {
			http.Error(w, "sign in first: this form needs the studio's session cookie (open /studio/signin)", http.StatusForbidden)
			return
		}
		if !sameOrigin(r) {
			http.Error(w, "refused: the form was sent from another site (Origin "+r.Header.Get("Origin")+")", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		// A multipart form (the attach forms, which take a key file) is
		// read whole into memory (the body is capped above), so no
		// part of it, a private key least of all, goes to a temporary
		// file; its fields land in r.PostForm as a plain form's do.
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "multipart/form-data" {
			err = r.ParseMultipartForm(maxFormBytes + 1)
			if r.MultipartForm != nil {
				defer r.MultipartForm.RemoveAll()
			}
		} else {
			err = r.ParseForm()
		}
		if err != nil {
			http.Error(w, "the form could not be read: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !checkCSRF(ss.csrf, r.PostForm.Get("csrf")) {
			http.Error(w, "refused: the form's CSRF token is missing or not this session's; reload the page and send it again", http.StatusForbidden)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if err := f(w, r, ss); err != nil {
			s.fail(w, r, ss, err)
		}
	}
}

// fail shows an error page for err: the API's own words and status. A
// token the API no longer takes ends the session.
func (s *Studio) fail(w http.ResponseWriter, r *http.Request, ss *session, err error) {
	status := client.StatusOf(err)
	if status == http.StatusUnauthorized {
		s.endSession(w, r, ss)
		http.Redirect(w, r, "/studio/signin?expired=1&next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	if status == 0 {
		status = http.StatusInternalServerError
		if errors.Is(err, context.Canceled) {
			return // the browser went away
		}
		s.log.Error("studio page failed", "path", r.URL.Path, "err", err)
	}
	s.render(withStatus(w, status), r, ss, "error", "Error", map[string]any{"Status": status, "Message": err.Error()})
}

// view is what every page's template gets.
type view struct {
	Title string
	Nav   string // the section of the navigation bar to mark current
	CSRF  string
	Data  any
}

func (s *Studio) render(w http.ResponseWriter, r *http.Request, ss *session, page, title string, data any) {
	t := s.pages[page]
	v := view{Title: title, Nav: navOf(r.URL.Path), Data: data}
	if ss != nil {
		v.CSRF = ss.csrf
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := t.ExecuteTemplate(w, "layout", v); err != nil {
		s.log.Warn("studio template failed", "page", page, "err", err)
	}
}

func navOf(path string) string {
	rest := strings.TrimPrefix(path, Prefix)
	section, _, _ := strings.Cut(rest, "/")
	if section == "batch-endpoints" {
		return "endpoints" // batch endpoints are listed with the online ones
	}
	return section
}

// statusWriter sends status instead of 200 when the page's header goes
// out, so that render can set the page's Content-Type first.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// withStatus makes the page rendered to w answer with status.
func withStatus(w http.ResponseWriter, status int) http.ResponseWriter {
	return &statusWriter{ResponseWriter: w, status: status}
}

func (s *statusWriter) WriteHeader(int) {
	if s.status != 0 {
		s.ResponseWriter.WriteHeader(s.status)
		s.status = 0
	}
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.WriteHeader(0)
	return s.ResponseWriter.Write(p)
}
