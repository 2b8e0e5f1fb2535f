package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/studio"
)

// withStudio serves the web studio at /studio/ beside the API, which it
// calls in-process as each signed-in user's token, keeping its sessions
// in the workspace's store; / sends a browser there.
func withStudio(api http.Handler, sessions studio.Sessions, log *slog.Logger) (http.Handler, error) {
	st, err := studio.New(studio.Options{API: api, Sessions: sessions, Log: log})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(studio.Prefix, st)
	mux.Handle("GET /{$}", http.RedirectHandler(studio.Prefix, http.StatusSeeOther))
	mux.Handle("/", api)
	return mux, nil
}

// studioSessions keeps the studio's sessions in the workspace's store.
type studioSessions struct{ st store.Store }

var _ studio.Sessions = studioSessions{}

func (s studioSessions) CreateSession(ctx context.Context, r studio.SessionRecord) error {
	return s.st.CreateSession(ctx, store.Session(r))
}

func (s studioSessions) SessionByHash(ctx context.Context, hash string) (studio.SessionRecord, error) {
	r, err := s.st.SessionByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return studio.SessionRecord{}, studio.ErrNoSession
	}
	return studio.SessionRecord(r), err
}

func (s studioSessions) DeleteSession(ctx context.Context, hash string) error {
	return s.st.DeleteSession(ctx, hash)
}

func (s studioSessions) DeleteExpiredSessions(ctx context.Context, now time.Time) error {
	return s.st.DeleteExpiredSessions(ctx, now)
}
