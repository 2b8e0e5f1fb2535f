package runner

import (
	"crypto/sha256"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// MetricsHub serves the metrics endpoints (metrics.go) of the local
// executor's attempts on one loopback listener per server, instead of a
// listener per attempt: a socket, a port and an accepting goroutine made
// and closed for every attempt were a share of a small job's CPU in the
// executor (bench/dispatch). A request goes to the endpoint of the
// attempt whose run token it carries and is answered there as on the
// attempt's own listener; a request that carries no live attempt's token
// is answered as an attempt's endpoint answers a token not its own: an
// MLflow call is refused, anything else is passed to the server. So a job
// sees what it saw on a listener of its own, except that FERRY_API_URL's
// port is shared, and a call made with its token after its attempt ended
// reaches the server, which refuses the ended attempt's revoked token
// (before, nothing listened there any more).
//
// A MetricsHub is safe for concurrent use; its zero value is ready.
type MetricsHub struct {
	mu      sync.Mutex
	servers map[string]*hubServer // by the server's API URL and URL file
}

// hubServer is the hub's listener for the attempts of one server.
type hubServer struct {
	url      string // http://127.0.0.1:PORT
	srv      *http.Server
	upstream http.Handler

	mu sync.RWMutex
	// byToken holds the live attempts' endpoints by the SHA-256 of their
	// run tokens, so that finding one takes no time that depends on how
	// much of a guessed token matches a real one.
	byToken map[[sha256.Size]byte]*metricsEndpoint
}

// serve adds the endpoint of an attempt (its queue, job, run token and
// MLflow run) to the hub's listener for apiURL, starting it if need be;
// it returns the URL the job gets and the function that takes the
// endpoint off when the job has ended.
func (h *MetricsHub) serve(q *metricQueue, job, token, apiURL, apiFile string, run *mlflowRun) (string, func(), error) {
	s, err := h.server(apiURL, apiFile)
	if err != nil {
		return "", nil, err
	}
	key := sha256.Sum256([]byte(token))
	e := newMetricsEndpoint(q, job, token, s.upstream, run)
	s.mu.Lock()
	s.byToken[key] = e
	s.mu.Unlock()
	return s.url, func() {
		s.mu.Lock()
		if s.byToken[key] == e {
			delete(s.byToken, key)
		}
		s.mu.Unlock()
	}, nil
}

// server is the hub's listener for apiURL and apiFile, started on first
// use.
func (h *MetricsHub) server(apiURL, apiFile string) (*hubServer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := apiURL + "\n" + apiFile
	if s := h.servers[key]; s != nil {
		return s, nil
	}
	upstream, err := upstreamOf(apiURL, apiFile)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &hubServer{url: "http://" + ln.Addr().String(), upstream: upstream,
		byToken: map[[sha256.Size]byte]*metricsEndpoint{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	if h.servers == nil {
		h.servers = map[string]*hubServer{}
	}
	h.servers[key] = s
	return s, nil
}

// Close closes the hub's listeners and their connections.
func (h *MetricsHub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for url, s := range h.servers {
		_ = s.srv.Close()
		delete(h.servers, url)
	}
}

func (s *hubServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.RLock()
	e := s.byToken[sha256.Sum256([]byte(secret))]
	s.mu.RUnlock()
	switch {
	case e != nil:
		e.ServeHTTP(w, r)
	case isMLflow(r.URL.Path):
		refuseMLflow(w)
	default:
		s.upstream.ServeHTTP(w, r)
	}
}
