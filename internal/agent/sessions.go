package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/isolation"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/session"
)

// sessionMemory is how long the agent remembers a session it connected,
// so that the same request handed out again (the server repeats requests
// whose answer may have been lost) is not connected twice.
const sessionMemory = time.Minute

// sessions are the exec, shell and port-forward sessions of the node
// (`ferry compute exec|ssh|port-forward`). The zero value is ready to use.
type sessions struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	seen map[string]time.Time // session id -> when it was taken on
}

// begin says whether session id is new to the agent, and remembers it.
func (ss *sessions) begin(id string, now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.seen == nil {
		ss.seen = map[string]time.Time{}
	}
	for old, t := range ss.seen {
		if now.Sub(t) > sessionMemory {
			delete(ss.seen, old)
		}
	}
	if _, ok := ss.seen[id]; ok {
		return false
	}
	ss.seen[id] = now
	return true
}

// forget lets a session whose connection failed be tried again when the
// server repeats it.
func (ss *sessions) forget(id string) {
	ss.mu.Lock()
	delete(ss.seen, id)
	ss.mu.Unlock()
}

// openSessions connects each session the server asks for and serves it in
// its own goroutine, so that sessions never hold up the poll or the jobs.
// Sessions end when ctx does.
func (a *agent) openSessions(ctx context.Context, reqs []nodeproto.SessionRequest) {
	for _, r := range reqs {
		if !a.sessions.begin(r.ID, a.clock.Now()) {
			continue
		}
		a.sessions.wg.Go(func() { a.serveSession(ctx, r) })
	}
}

func (a *agent) serveSession(ctx context.Context, r nodeproto.SessionRequest) {
	log := a.log.With("session", r.ID, "kind", r.Kind)
	keys, err := session.ParseAuthorizedKeys(strings.Join(r.AuthorizedKeys, "\n"))
	if err != nil {
		log.Error("session refused: the instance's ssh_settings.ssh_key_value", "err", err)
		return
	}
	path := a.nodePath("sessions/" + url.PathEscape(r.ID))
	conn, _, err := session.DialHTTP(ctx, a.http, a.server.Get()+path, a.nodeToken)
	if err != nil {
		var re *session.RefusedError
		if errors.As(err, &re) {
			se := &serverError{Method: "GET", Path: path, Status: re.Status}
			if json.Unmarshal(re.Body, se) != nil || se.Detail == "" {
				se.Detail = strings.TrimSpace(string(re.Body[:min(len(re.Body), 512)]))
			}
			err = se
		}
		if transient(err) {
			a.sessions.forget(r.ID)
		}
		log.Warn("cannot connect the session", "err", err)
		return
	}
	log.Info("session opened")
	scfg := session.ServerConfig{Dir: a.cfg.Dir, Env: a.env, AuthorizedKeys: keys, Kind: r.Kind, Log: log}
	if a.runAs != nil {
		if scfg.Dir, scfg.Env, err = a.sessionAs(a.runAs); err != nil {
			log.Warn("cannot prepare the session's account", "err", err)
			conn.Close()
			return
		}
		scfg.Credential = a.runAs.Credential()
	}
	err = session.Serve(ctx, conn, scfg)
	if err != nil && ctx.Err() == nil {
		log.Warn("session ended", "err", err)
		return
	}
	log.Info("session ended")
}

// SessionHome is the directory, in the node's, where sessions of a node
// whose jobs run as another account start, and their HOME.
const SessionHome = "home"

// sessionAs prepares sessions that run as u, as the node's jobs do: a
// home of u's own in the node's directory, and the agent's environment
// with u's HOME, USER, LOGNAME and a PATH of what u reaches.
func (a *agent) sessionAs(u *isolation.User) (dir string, env []string, err error) {
	dir = filepath.Join(a.cfg.Dir, SessionHome)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	if err := os.Lchown(dir, int(u.UID), int(u.GID)); err != nil {
		return "", nil, err
	}
	for _, kv := range a.env {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "HOME", "USER", "LOGNAME":
		case "PATH":
			env = append(env, "PATH="+isolation.ReachablePath(v, u))
		default:
			env = append(env, kv)
		}
	}
	return dir, append(env, "HOME="+dir, "USER="+u.Name, "LOGNAME="+u.Name), nil
}
