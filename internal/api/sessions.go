package api

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/session"
)

// Sessions (`ferry compute exec|ssh|port-forward`) are two HTTP upgrades
// joined here: the user's, which waits until the instance's agent has
// answered the session its poll was given, and the agent's. Both get 101
// Switching Protocols only once the other side is there, so every refusal
// is still a problem document; after that the server copies bytes both
// ways and understands none of them (they are SSH between the CLI and the
// agent: see package session).

// checkUpgrade refuses a request that does not ask for a session upgrade.
func checkUpgrade(r *http.Request) error {
	if r.ProtoMajor != 1 || !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), session.Protocol) {
		return apperr.Invalid("this call upgrades the connection to a session: send it over HTTP/1.1 with `Connection: Upgrade` and `Upgrade: %s` (the ferry CLI does: `ferry compute exec|ssh|port-forward`)", session.Protocol)
	}
	return nil
}

// headerHas reports whether the comma-separated header name holds token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (s *Server) openSession(w http.ResponseWriter, r *http.Request, who auth.Principal) error {
	if err := checkUpgrade(r); err != nil {
		return err
	}
	ctx := r.Context()
	sess, err := s.ws.Nodes().OpenSession(ctx, who, r.PathValue("name"), r.URL.Query().Get("kind"))
	if err != nil {
		return err
	}
	defer sess.Close()
	agent, err := sess.AwaitAgent(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // the user has gone: there is no one to answer
		}
		return err
	}
	defer agent.Close()
	hdr := http.Header{}
	if sess.KeyRequired {
		hdr.Set(session.AuthHeader, "publickey")
	}
	user, err := upgrade(w, hdr)
	if err != nil {
		s.log.Warn("session upgrade failed", "compute", sess.Compute, "err", err)
		return nil
	}
	defer user.Close()
	s.log.Info("session open", "session", sess.ID, "compute", sess.Compute, "node", sess.Node, "kind", sess.Kind, "user", who.Subject)
	splice(user, agent)
	s.log.Info("session closed", "session", sess.ID, "compute", sess.Compute)
	return nil
}

func (s *Server) nodeSession(w http.ResponseWriter, r *http.Request, who auth.Principal) error {
	if err := checkUpgrade(r); err != nil {
		return err
	}
	sess, err := s.ws.Nodes().AcceptSession(r.Context(), who, r.PathValue("node"), r.PathValue("id"))
	if err != nil {
		return err
	}
	conn, err := upgrade(w, nil)
	if err != nil {
		s.log.Warn("session upgrade failed", "node", sess.Node, "err", err)
		return nil
	}
	if !sess.Attach(conn) {
		conn.Close() // the user stopped waiting meanwhile
	}
	return nil
}

// upgrade takes the connection over from the HTTP server and answers 101
// with hdr.
func upgrade(w http.ResponseWriter, hdr http.Header) (net.Conn, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	// The server's read deadlines were for the request, not the stream.
	_ = conn.SetDeadline(time.Time{})
	var b strings.Builder
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + session.Protocol + "\r\n")
	_ = hdr.Write(&b)
	b.WriteString("\r\n")
	if _, err := brw.WriteString(b.String()); err != nil {
		conn.Close()
		return nil, err
	}
	if err := brw.Flush(); err != nil {
		conn.Close()
		return nil, err
	}
	return &hijacked{Conn: conn, r: brw.Reader}, nil
}

// hijacked is an upgraded connection whose first bytes may already sit in
// the HTTP server's read buffer.
type hijacked struct {
	net.Conn
	r *bufio.Reader
}

func (h *hijacked) Read(p []byte) (int, error) { return h.r.Read(p) }

// splice copies bytes both ways until either side closes, then closes both.
func splice(a, b io.ReadWriteCloser) {
	done := make(chan struct{}, 2)
	cp := func(dst io.Writer, src io.Reader) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}
