// Package gateway is the front door of online endpoints: it takes a
// scoring request for an endpoint, checks its key or token, picks a
// deployment (the traffic split, or the azureml-model-deployment header),
// waits for a free slot of that deployment's replicas (up to
// max_queue_wait_ms, then 429), proxies the request to the least busy
// ready replica with the deployment's request timeout (408 past it), and
// streams the answer back unbuffered. Mirrored traffic is copied to other
// deployments and their answers dropped.
//
// The gateway holds no state of its own that must survive: what it routes
// to is a snapshot (Endpoint) the server sets whenever an endpoint, its
// deployments or their ready replicas change. It runs inside `ferry
// server` (one process, next to the API that owns that state; a gateway
// process of its own would need the same snapshots pushed to it, which
// can come later without changing this package).
package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DeploymentHeader names, in a request, the deployment to score with
// (bypassing the traffic split) and, in an answer, the one that scored.
const DeploymentHeader = "azureml-model-deployment"

// Endpoint is what the gateway routes for one endpoint. Keys are secrets:
// the gateway compares them in constant time and never writes them
// anywhere.
type Endpoint struct {
	Name        string
	AuthMode    string   // "key" or "aml_token"
	Keys        []string // the endpoint's keys (primary, secondary)
	Traffic     map[string]int
	Mirror      map[string]int
	Deployments map[string]Deployment
}

// Deployment is one deployment of an endpoint and its ready replicas.
type Deployment struct {
	Name string
	// Replicas are the base URLs (http://host:port) of the replicas that
	// passed their readiness probe.
	Replicas []string
	// Workers are, by replica URL, the URLs (unix:/PATH) of that
	// replica's workers' own sockets, for a replica on the gateway's host
	// that has them. A request to such a replica goes to its least busy
	// worker directly, not through the replica's front, which would hand
	// it to a worker itself: that hand-over is CPU the replica's host
	// saves. Its requests are still counted on the replica's URL.
	Workers map[string][]string
	// Secrets are, by replica URL, the replica's secret: every request to
	// it (to its workers too) carries it in inferenceserver.SecretHeader,
	// and a replica answers no request without it (the pods of a
	// deployment on Kubernetes share one). A replica with none gets no
	// such header. Secrets: never written anywhere.
	Secrets        map[string]string
	RequestTimeout time.Duration
	// MaxConcurrent is max_concurrent_requests_per_instance.
	MaxConcurrent int
	MaxQueueWait  time.Duration
}

// Options configure a Gateway.
type Options struct {
	// MaxBody bounds a request's body (413 over it); 0 means
	// DefaultMaxBody.
	MaxBody int64
	// MaxBuffered bounds the bytes of request bodies held at once, and
	// MaxBufferedPerAddr those of one client address (429 over either);
	// 0 means DefaultMaxBuffered, DefaultMaxBufferedPerAddr.
	MaxBuffered, MaxBufferedPerAddr int64
	// MaxRequests bounds one endpoint's requests under way at the
	// gateway, their bodies' reading included (429 over it), so that the
	// clients of one endpoint cannot take what the others need; 0 means
	// DefaultMaxRequests.
	MaxRequests int
	// CheckToken says whether token may score with endpoint (auth_mode
	// aml_token). Nil refuses every token.
	CheckToken func(ctx context.Context, endpoint, token string) bool
	// ColdStart, when set, is called for a request to a deployment with
	// no ready replica: it may start one and returns once the deployment
	// has a ready replica (or ctx ends). The request is then routed
	// again. Nil answers 503 at once.
	ColdStart func(ctx context.Context, endpoint, deployment string) error
	// Rand picks deployments by weight; nil is math/rand/v2's.
	Rand *rand.Rand
	Log  *slog.Logger
}

// The gateway's limits unless Options says otherwise. Two bodies of the
// largest size fit one client address's share.
const (
	DefaultMaxBody            = 16 << 20
	DefaultMaxBuffered        = 64 << 20
	DefaultMaxBufferedPerAddr = 2 * DefaultMaxBody
	DefaultMaxRequests        = 1024
)

// Gateway routes scoring requests. It is safe for concurrent use.
type Gateway struct {
	opt     Options
	up      *upstream
	log     *slog.Logger
	buffers *buffers

	mu        sync.RWMutex
	endpoints map[string]*endpointState
	randMu    sync.Mutex

	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

type endpointState struct {
	Endpoint
	deps map[string]*deploymentState
	// requests are the endpoint's requests under way (Options.MaxRequests),
	// kept across Set.
	requests *atomic.Int64
	// traffic is Traffic in name order with its total: the split drawn
	// per request without sorting per request.
	traffic      []weighted
	trafficTotal int
}

type weighted struct {
	name   string
	weight int
}

// deploymentState is a deployment with its runtime state: the slots in
// use and, per replica, the requests in flight; kept across Set while the
// deployment stays.
type deploymentState struct {
	Deployment
	lim      *limiter
	mu       sync.Mutex
	inFlight map[string]int // per replica URL
	next     int            // round robin among the least busy
	// perWorker are the requests in flight per worker URL (Workers).
	perWorker  map[string]int
	nextWorker int
	stats      *latencies
	waiting    atomic.Int64 // requests waiting for a slot or a cold start
	last       atomic.Int64 // when the last request came, in Unix nanoseconds
	// The deployment's metrics, bound to its labels once (a lookup by
	// label values per request hashes and allocates).
	latencyObs prometheus.Observer
	counters   sync.Map // HTTP status (int) → prometheus.Counter
}

// New makes a gateway that routes nothing until Set.
func New(opt Options) *Gateway {
	if opt.MaxBody == 0 {
		opt.MaxBody = DefaultMaxBody
	}
	if opt.MaxBuffered == 0 {
		opt.MaxBuffered = DefaultMaxBuffered
	}
	if opt.MaxBufferedPerAddr == 0 {
		opt.MaxBufferedPerAddr = DefaultMaxBufferedPerAddr
	}
	if opt.MaxRequests == 0 {
		opt.MaxRequests = DefaultMaxRequests
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		opt: opt, log: opt.Log, up: newUpstream(), buffers: newBuffers(opt.MaxBuffered, opt.MaxBufferedPerAddr),
		endpoints: map[string]*endpointState{},
		reg:       prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_endpoint_requests_total", Help: "Scoring requests answered, by endpoint, deployment and HTTP status.",
		}, []string{"endpoint", "deployment", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_endpoint_request_duration_seconds", Help: "Time from a scoring request's arrival to the end of its answer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"endpoint", "deployment"}),
	}
	g.reg.MustRegister(g.requests, g.latency)
	return g
}

// Metrics is the gateway's Prometheus page.
func (g *Gateway) Metrics() http.Handler {
	return promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{})
}

// Set routes e (replacing what was routed for its name). Deployments that
// stay keep their requests in flight and their statistics.
func (g *Gateway) Set(e Endpoint) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.endpoints[e.Name]
	st := &endpointState{Endpoint: e, deps: map[string]*deploymentState{}, requests: &atomic.Int64{}}
	if old != nil {
		st.requests = old.requests
	}
	for _, name := range slices.Sorted(maps.Keys(e.Traffic)) {
		st.traffic = append(st.traffic, weighted{name, e.Traffic[name]})
		st.trafficTotal += e.Traffic[name]
	}
	for name, d := range e.Deployments {
		d.Name = name
		d.MaxConcurrent = max(d.MaxConcurrent, 1)
		var ds *deploymentState
		if old != nil {
			ds = old.deps[name]
		}
		if ds == nil {
			ds = &deploymentState{lim: newLimiter(), inFlight: map[string]int{}, perWorker: map[string]int{}, stats: newLatencies(),
				latencyObs: g.latency.WithLabelValues(e.Name, name)}
		}
		ds.mu.Lock()
		ds.Deployment = d
		ds.mu.Unlock()
		ds.lim.setCapacity(len(d.Replicas) * d.MaxConcurrent)
		st.deps[name] = ds
	}
	g.endpoints[e.Name] = st
}

// Remove stops routing an endpoint.
func (g *Gateway) Remove(name string) {
	g.mu.Lock()
	delete(g.endpoints, name)
	g.mu.Unlock()
}

// Stats are a deployment's request counts and latency percentiles.
type Stats struct {
	Requests int64
	Errors   int64 // answers of 5xx, 408 and 429
	P50, P99 time.Duration
}

// Load is a deployment's traffic now: what scales and drains it.
type Load struct {
	InFlight int // requests being answered by a replica
	Waiting  int // requests waiting for a slot, or for a cold start
	// PerReplica are the requests in flight per replica URL, including
	// replicas no longer routed that still finish theirs.
	PerReplica  map[string]int
	LastRequest time.Time // zero before the first
	Stats
}

// Load returns the traffic of an endpoint's deployments.
func (g *Gateway) Load(endpoint string) map[string]Load {
	g.mu.RLock()
	e := g.endpoints[endpoint]
	g.mu.RUnlock()
	out := map[string]Load{}
	if e == nil {
		return out
	}
	for name, d := range e.deps {
		l := Load{Waiting: int(d.waiting.Load()), Stats: d.stats.snapshot()}
		if t := d.last.Load(); t != 0 {
			l.LastRequest = time.Unix(0, t)
		}
		d.mu.Lock()
		l.PerReplica = maps.Clone(d.inFlight)
		d.mu.Unlock()
		for _, n := range l.PerReplica {
			l.InFlight += n
		}
		out[name] = l
	}
	return out
}

// httpError is an answer the gateway makes itself.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func fail(code int, format string, args ...any) *httpError {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP scores a request for the endpoint named by the path
// /endpoints/NAME/score.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name, ok := endpointOf(r.URL.Path)
	if !ok {
		writeError(w, fail(http.StatusNotFound, "no such path; score at /endpoints/NAME/score"))
		return
	}
	g.mu.RLock()
	e := g.endpoints[name]
	g.mu.RUnlock()
	if e == nil {
		writeError(w, fail(http.StatusNotFound, "endpoint %s does not exist", name))
		return
	}
	if err := g.authorize(r, e); err != nil {
		writeError(w, err)
		return
	}
	// Counted after the key: a client without one takes nothing from
	// the endpoint's clients.
	if n := e.requests.Add(1); n > int64(g.opt.MaxRequests) {
		e.requests.Add(-1)
		writeError(w, fail(http.StatusTooManyRequests, "endpoint %s has %d requests under way at the gateway, its limit; try again", e.Name, g.opt.MaxRequests))
		return
	}
	defer e.requests.Add(-1)
	d, err := g.pick(r, e)
	if err != nil {
		writeError(w, err)
		return
	}
	code := g.score(w, r, e, d)
	elapsed := time.Since(start)
	g.counter(e, d, code).Inc()
	d.latencyObs.Observe(elapsed.Seconds())
	d.stats.add(elapsed, code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests)
}

// counter is d's request counter for status code.
func (g *Gateway) counter(e *endpointState, d *deploymentState, code int) prometheus.Counter {
	if c, ok := d.counters.Load(code); ok {
		return c.(prometheus.Counter)
	}
	c := g.requests.WithLabelValues(e.Name, d.Name, strconv.Itoa(code))
	d.counters.Store(code, c)
	return c
}

// endpointOf reads NAME from /endpoints/NAME/score.
func endpointOf(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, "/endpoints/")
	if !ok {
		return "", false
	}
	name, tail, ok := strings.Cut(rest, "/")
	return name, ok && name != "" && tail == "score"
}

// authorize checks the request's key (auth_mode key) or token (aml_token),
// sent as "Authorization: Bearer SECRET".
func (g *Gateway) authorize(r *http.Request, e *endpointState) *httpError {
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || secret == "" {
		return fail(http.StatusUnauthorized, "endpoint %s needs its %s in the Authorization header (Bearer ...); see `ferry online-endpoint get-credentials`", e.Name, e.credential())
	}
	if e.AuthMode == "aml_token" {
		if g.opt.CheckToken != nil && g.opt.CheckToken(r.Context(), e.Name, secret) {
			return nil
		}
		return fail(http.StatusUnauthorized, "the token is not valid for endpoint %s", e.Name)
	}
	match := 0
	for _, k := range e.Keys {
		// Every key is compared, so the time taken says nothing of which
		// one matched.
		match |= subtle.ConstantTimeCompare([]byte(k), []byte(secret))
	}
	if match == 1 {
		return nil
	}
	return fail(http.StatusUnauthorized, "the key is not valid for endpoint %s", e.Name)
}

func (e *endpointState) credential() string {
	if e.AuthMode == "aml_token" {
		return "token"
	}
	return "key"
}

// pick chooses the request's deployment: the one its header names, else
// one drawn by the traffic split.
func (g *Gateway) pick(r *http.Request, e *endpointState) (*deploymentState, *httpError) {
	if name := r.Header.Get(DeploymentHeader); name != "" {
		d := e.deps[name]
		if d == nil {
			return nil, fail(http.StatusNotFound, "endpoint %s has no deployment %s", e.Name, name)
		}
		return d, nil
	}
	name := g.draw(e.traffic, e.trafficTotal)
	if name == "" || e.deps[name] == nil {
		return nil, fail(http.StatusServiceUnavailable, "endpoint %s sends no traffic to any deployment; set its traffic (ferry online-endpoint update --traffic \"NAME=100\")", e.Name)
	}
	return e.deps[name], nil
}

// draw picks a name in proportion to its weight among weights (live
// traffic that sums to less than 100 is split among the deployments
// named, in their proportions); "" when every weight is 0.
func (g *Gateway) draw(weights []weighted, total int) string {
	if total == 0 {
		return ""
	}
	if len(weights) == 1 {
		return weights[0].name // all of it: nothing to draw
	}
	n := g.intn(total)
	for _, w := range weights {
		if n < w.weight {
			return w.name
		}
		n -= w.weight
	}
	return ""
}

// intn is a random number in [0, n), from Options.Rand when set.
func (g *Gateway) intn(n int) int {
	g.randMu.Lock()
	defer g.randMu.Unlock()
	if g.opt.Rand != nil {
		return g.opt.Rand.IntN(n)
	}
	return rand.IntN(n)
}

// score proxies the request to a replica of d, mirrors it, and returns
// the status it answered with.
func (g *Gateway) score(w http.ResponseWriter, r *http.Request, e *endpointState, d *deploymentState) int {
	body, release, herr := g.readBody(r)
	if herr != nil {
		// The rest of the body is not read: the connection ends with the
		// answer (net/http would otherwise read the rest first, and a
		// client holding its last byte would get no answer).
		w.Header().Set("Connection", "close")
		return writeError(w, herr)
	}
	held := newHold(release)
	defer held.done()
	g.mirror(r, e, d.Name, body, held)
	d.last.Store(time.Now().UnixNano())

	ctx, cancel := context.WithTimeout(r.Context(), d.timeout())
	defer cancel()
	d.waiting.Add(1)
	herr = g.ready(ctx, e, d)
	acquired := herr == nil && d.lim.acquire(ctx, d.queueWait())
	d.waiting.Add(-1)
	if herr != nil {
		return writeError(w, herr)
	}
	if !acquired {
		if ctx.Err() != nil {
			return writeError(w, fail(http.StatusRequestTimeout, "deployment %s did not answer within %v: no replica was free the whole time", d.Name, d.timeout()))
		}
		return writeError(w, fail(http.StatusTooManyRequests, "deployment %s is at max_concurrent_requests_per_instance (%d) on every replica, and no slot freed within max_queue_wait_ms (%v)", d.Name, d.MaxConcurrent, d.queueWait()))
	}
	defer d.lim.release()

	// A replica that refuses the connection has not seen the request: it
	// is tried once more on another (a replica that died since the last
	// snapshot).
	var tried []string
	for attempt := 0; ; attempt++ {
		replica, target, secret := d.take(tried)
		if replica == "" {
			return writeError(w, fail(http.StatusServiceUnavailable, "deployment %s has no ready replica", d.Name))
		}
		tried = append(tried, replica)
		code, err := g.forward(ctx, w, r, d, target, secret, body)
		d.done(replica, target)
		if err == nil {
			return code
		}
		if refused(err) && attempt == 0 {
			continue
		}
		if ctx.Err() != nil && r.Context().Err() == nil {
			g.log.Warn("scoring request timed out", "endpoint", e.Name, "deployment", d.Name, "replica", replica, "timeout", d.timeout())
			return writeError(w, fail(http.StatusRequestTimeout, "deployment %s did not answer within %v", d.Name, d.timeout()))
		}
		g.log.Warn("scoring request failed", "endpoint", e.Name, "deployment", d.Name, "replica", replica, "err", err)
		// The replica's address is in the message, whatever the error
		// says of it (an EOF names none): the caller, its logs and the
		// deployment's logs then agree on which replica failed.
		return writeError(w, fail(http.StatusBadGateway, "deployment %s's replica %s failed: %v", d.Name, replica, err))
	}
}

// ready waits, when d has no ready replica, for a cold start (if the
// gateway has one) to give it one.
func (g *Gateway) ready(ctx context.Context, e *endpointState, d *deploymentState) *httpError {
	if d.replicaCount() > 0 {
		return nil
	}
	if g.opt.ColdStart == nil {
		return fail(http.StatusServiceUnavailable, "deployment %s has no ready replica", d.Name)
	}
	if err := g.opt.ColdStart(ctx, e.Name, d.Name); err != nil {
		if ctx.Err() != nil {
			return fail(http.StatusRequestTimeout, "deployment %s did not start a replica within %v", d.Name, d.timeout())
		}
		return fail(http.StatusServiceUnavailable, "deployment %s could not start a replica: %v", d.Name, err)
	}
	return nil
}

// forward sends the request to one replica (at target: its URL, or one
// of its workers', with the replica's secret) and streams its answer
// back. An error means nothing was written to w.
func (g *Gateway) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, d *deploymentState, target, secret string, body [][]byte) (int, error) {
	// The endpoint's key stays at the gateway (upstream.forwarded).
	resp, err := g.up.do(ctx, target, secret, r.Method, r.URL.RawQuery, r.Header, body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if !hopByHop(k) {
			w.Header()[k] = vs
		}
	}
	w.Header().Set(DeploymentHeader, d.Name)
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	if resp.ContentLength >= 0 {
		// An answer of known length is whole when the replica sends it:
		// it goes out with its length, in as few writes as it fits.
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.CopyBuffer(w, resp.Body, buf)
		return resp.StatusCode, nil
	}
	w.WriteHeader(resp.StatusCode)
	// An answer of unknown length (chunked, server-sent events) streams:
	// each piece the replica sends is flushed at once.
	rc := http.NewResponseController(w)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return resp.StatusCode, nil // the client left
			}
			_ = rc.Flush()
		}
		if rerr != nil {
			return resp.StatusCode, nil // io.EOF, or a replica cut off mid-answer: the status is sent
		}
	}
}

// copyBuffers hold the buffers answers are copied through: one per
// request in flight, not one allocated per request.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// mirror sends copies of the request to the mirrored deployments drawn,
// never to the one scoring it, and drops their answers. A copy that finds
// no free slot at once is not sent: mirroring must not slow live traffic.
func (g *Gateway) mirror(r *http.Request, e *endpointState, live string, body [][]byte, held *hold) {
	for name, pct := range e.Mirror {
		d := e.deps[name]
		// Mirrored traffic is a percent of all requests, each drawn alone.
		if d == nil || name == live || g.intn(100) >= pct {
			continue
		}
		if d.replicaCount() == 0 || !d.lim.acquire(context.Background(), 0) {
			continue
		}
		hdr := r.Header.Clone()
		held.add()
		go func() {
			defer held.done()
			start := time.Now()
			defer d.lim.release()
			ctx, cancel := context.WithTimeout(context.Background(), d.timeout())
			defer cancel()
			replica, target, secret := d.take(nil)
			if replica == "" {
				return
			}
			defer d.done(replica, target)
			resp, err := g.up.do(ctx, target, secret, http.MethodPost, "", hdr, body)
			code := http.StatusBadGateway
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			g.requests.WithLabelValues(e.Name, name+" (mirror)", strconv.Itoa(code)).Inc()
			// The deployment's own statistics count the copies it
			// answered: they are its requests, and what shows that the
			// mirror reaches it.
			d.stats.add(time.Since(start), code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests)
		}()
	}
}

func hopByHop(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length":
		return true
	}
	return false
}

// refused says whether err is a refused connection: the replica never got
// the request.
func refused(err error) bool {
	// ENOENT: a Unix socket whose replica is gone and took its path along.
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// writeError answers with the gateway's own error, as JSON, and returns
// its status.
func writeError(w http.ResponseWriter, err *httpError) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(err.code)
	fmt.Fprintf(w, "{\"error\":{\"code\":%d,\"message\":%q}}\n", err.code, err.msg)
	return err.code
}

func (d *deploymentState) timeout() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.RequestTimeout <= 0 {
		return 5 * time.Second
	}
	return d.RequestTimeout
}

func (d *deploymentState) queueWait() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.MaxQueueWait
}

func (d *deploymentState) replicaCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.Replicas)
}

// take picks the ready replica with the fewest requests in flight (round
// robin among equals), not one of skip, and counts the request on it. The
// target is where to send it: the replica's least busy worker (round robin
// among equals) when the replica has Workers, else the replica's URL;
// secret is the replica's.
func (d *deploymentState) take(skip []string) (replica, target, secret string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	replica = leastBusy(d.Replicas, d.next, d.inFlight, skip)
	if replica == "" {
		return "", "", ""
	}
	d.inFlight[replica]++
	d.next++
	secret = d.Secrets[replica]
	workers := d.Workers[replica]
	if len(workers) == 0 {
		return replica, replica, secret
	}
	target = leastBusy(workers, d.nextWorker, d.perWorker, nil)
	d.perWorker[target]++
	d.nextWorker++
	return replica, target, secret
}

// leastBusy is the one of urls, not in skip, with the fewest requests in
// flight by count; among equals the first from urls[start%len(urls)] on,
// so that a caller that moves start on each pick takes equals by turns.
// "" when every one is skipped.
func leastBusy(urls []string, start int, count map[string]int, skip []string) string {
	best, bestN := "", 0
	for i := range urls {
		u := urls[(start+i)%len(urls)]
		if slices.Contains(skip, u) {
			continue
		}
		if best == "" || count[u] < bestN {
			best, bestN = u, count[u]
		}
	}
	return best
}

// done ends a request counted on replica (and sent to target) by take.
func (d *deploymentState) done(replica, target string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inFlight[replica]--; d.inFlight[replica] <= 0 {
		delete(d.inFlight, replica)
	}
	if target != replica {
		if d.perWorker[target]--; d.perWorker[target] <= 0 {
			delete(d.perWorker, target)
		}
	}
}
