package server

import (
	"log/slog"
	"net/http"

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
