package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/serverurl"
)

// A job logs metrics by POSTing them to FERRY_API_URL with its run token.
// FERRY_API_URL is the runner's own endpoint on the loopback interface,
// not the server: the runner appends what the job logs to a queue file in
// the attempt's folder, answers at once, and delivers the queue in order,
// numbered, so that the server records each value once however often a
// batch is sent again. A server that is down for a while loses no metric,
// and the job is never held up by it. Every other call the job makes is
// passed through to the server as it is.
//
// A container job shares the host's network, so the loopback endpoint is
// the same for it; on a docker node the job runs in the runner's container.

// MetricsQueueName is the queue of an attempt's metrics, in its folder:
// one JSON object per line, numbered from 1.
const MetricsQueueName = "metrics.jsonl"

// queuedMetric is one line of the queue.
type queuedMetric struct {
	Seq int64 `json:"seq"`
	apitypes.Metric
}

// metricQueue is the durable, numbered queue of an attempt's metrics.
type metricQueue struct {
	path string
	wake chan struct{} // a value was added, or the queue was closed

	mu     sync.Mutex
	f      *os.File // nil until the first value is added
	next   int64    // the number of the next value
	closed bool
}

// openMetricQueue opens the queue at path and goes on with its numbering.
// The file is made when the first value is added: most jobs log no
// metric, and each file made in the runs dir was a share of a small job's
// CPU (bench/dispatch).
func openMetricQueue(path string) (*metricQueue, error) {
	q := &metricQueue{path: path, next: 1, wake: make(chan struct{}, 1)}
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m queuedMetric
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Seq >= q.next {
				q.next = m.Seq + 1
			}
		}
		f.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return q, nil
}

// add numbers ms and appends them to the queue, synced to disk, so that
// once the job is told they are taken they survive the runner too.
func (q *metricQueue) add(ms []apitypes.Metric) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errors.New("the job has ended; its metrics are no longer taken")
	}
	var buf []byte
	for i, m := range ms {
		line, err := json.Marshal(queuedMetric{Seq: q.next + int64(i), Metric: m})
		if err != nil {
			return fmt.Errorf("metrics[%d]: %w", i, err)
		}
		buf = append(append(buf, line...), '\n')
	}
	if q.f == nil {
		f, err := createSynced(q.path)
		if err != nil {
			return err
		}
		q.f = f
	}
	if _, err := q.f.Write(buf); err != nil {
		return err
	}
	if err := q.f.Sync(); err != nil {
		return err
	}
	q.next += int64(len(ms))
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// close takes no more values; what is queued is still delivered.
func (q *metricQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		if q.f != nil {
			q.f.Close()
		}
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// createSynced opens path for appending, making it if need be, and syncs
// its folder when it made it, so that a value synced into the file is not
// lost with the file's name after a crash.
func createSynced(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	}
	if err != nil {
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// state is the number of the last value queued, and whether the queue is
// closed.
func (q *metricQueue) state() (last int64, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.next - 1, q.closed
}

// maxMetricBatch bounds the values the sender posts at once.
const maxMetricBatch = 1000

// deliver sends the queue to the server in order, in batches, each retried
// until the server takes it, and returns once the queue is closed and all
// of it is delivered, or when ctx is done (what is left stays in the file).
// A batch the server refuses as such (4xx) is dropped and logged: sending
// it again would not change the answer, and it must not hold up the rest.
func (q *metricQueue) deliver(ctx context.Context, send func(ctx context.Context, first int64, ms []apitypes.Metric) error, log *slog.Logger) error {
	// The file is opened once there is a value to read: add makes it with
	// the first.
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var br *bufio.Reader
	var sent int64 // the number of the last value delivered
	var batch []apitypes.Metric
	var first int64
	wait := 100 * time.Millisecond
	for {
		last, closed := q.state()
		// Read up to a batch of the values queued so far. A value is
		// counted only once add has written all of it, so no line is
		// read half written.
		if f == nil && last > 0 {
			var err error
			if f, err = os.Open(q.path); err != nil {
				return err
			}
			br = bufio.NewReaderSize(f, 64<<10)
		}
		for len(batch) < maxMetricBatch && sent+int64(len(batch)) < last {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return fmt.Errorf("reading the metrics queue: %w", err)
			}
			var m queuedMetric
			if err := json.Unmarshal(line, &m); err != nil {
				return fmt.Errorf("metrics queue line %d: %w", sent+int64(len(batch))+1, err)
			}
			if len(batch) == 0 {
				first = m.Seq
			}
			batch = append(batch, m.Metric)
		}
		if len(batch) == 0 {
			if closed {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-q.wake:
			}
			continue
		}
		err := send(ctx, first, batch)
		if s := client.StatusOf(err); err == nil || (s >= 400 && s < 500) {
			if err != nil {
				log.Error("the server refused metrics; they are dropped", "first", first, "count", len(batch), "err", err)
			}
			sent += int64(len(batch))
			batch, wait = batch[:0], 100*time.Millisecond
			continue
		}
		log.Warn("metrics not delivered yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// metricsEndpoint is the job's FERRY_API_URL: metric POSTs of the job's own
// attempt go to the queue, everything else to the server.
type metricsEndpoint struct {
	q        *metricQueue
	path     string // /v1/jobs/JOB/metrics
	token    string // the run token; secret
	upstream http.Handler
	now      func() time.Time
	run      *mlflowRun // the job's run for MLflow's API (mlflow.go); nil = none
}

// serveMetrics starts the endpoint on a free loopback port and returns its
// URL and the server to close when the job has ended.
func serveMetrics(q *metricQueue, job, token, apiURL, apiFile string, run *mlflowRun) (string, *http.Server, error) {
	upstream, err := upstreamOf(apiURL, apiFile)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	e := newMetricsEndpoint(q, job, token, upstream, run)
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), srv, nil
}

// upstreamOf passes requests to the server at apiURL, or, once a request
// cannot reach it, at the URL that apiFile (when not "") names then: the
// job's own calls follow a server that came back elsewhere as the
// runner's do.
func upstreamOf(apiURL, apiFile string) (http.Handler, error) {
	if _, err := url.Parse(apiURL); err != nil {
		return nil, fmt.Errorf("--api %q: %w", apiURL, err)
	}
	api := serverurl.New(apiURL, apiFile)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Parsed above, or by serverurl when read from the file.
			u, _ := url.Parse(api.Get())
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // as NewSingleHostReverseProxy passed it
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			api.Reread()
			w.WriteHeader(http.StatusBadGateway)
		},
	}, nil
}

func newMetricsEndpoint(q *metricQueue, job, token string, upstream http.Handler, run *mlflowRun) *metricsEndpoint {
	return &metricsEndpoint{q: q, path: "/v1/jobs/" + job + "/metrics", token: token,
		upstream: upstream, now: time.Now, run: run}
}

// refuseMLflow answers an MLflow call that does not carry the run token.
func refuseMLflow(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(map[string]string{"error_code": "UNAUTHENTICATED",
		"message": "MLflow calls need the job's run token as MLFLOW_TRACKING_TOKEN"})
}

// isMLflow says whether path is a call of MLflow's tracking API.
func isMLflow(path string) bool {
	for _, prefix := range mlflowPrefixes {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

func (e *metricsEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	for _, prefix := range mlflowPrefixes {
		if call, ok := strings.CutPrefix(r.URL.Path, prefix); ok {
			if subtle.ConstantTimeCompare([]byte(secret), []byte(e.token)) != 1 {
				refuseMLflow(w)
				return
			}
			e.serveMLflow(w, r, call)
			return
		}
	}
	if r.Method != http.MethodPost || r.URL.Path != e.path || r.URL.RawQuery != "" ||
		subtle.ConstantTimeCompare([]byte(secret), []byte(e.token)) != 1 {
		// Not the job logging its own metrics with its own token: the
		// server answers it, refusals included.
		e.upstream.ServeHTTP(w, r)
		return
	}
	n, err := e.take(r)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errQueue) {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(apitypes.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"recorded": n})
}

// errQueue marks a failure to queue, as opposed to a bad request.
var errQueue = errors.New("the runner could not queue the metrics")

// take checks a metrics request as the server would and queues its values.
func (e *metricsEndpoint) take(r *http.Request) (int, error) {
	var req apitypes.MetricsRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return 0, fmt.Errorf("the body is not a metrics request: %w", err)
	}
	if req.Seq != 0 {
		return 0, errors.New("seq: the runner numbers metrics; leave seq out")
	}
	ms := req.Metrics
	if req.Name != "" {
		ms = append(ms, req.Metric)
	}
	if len(ms) == 0 {
		return 0, errors.New("metrics: at least one metric is needed")
	}
	if len(ms) > apitypes.MaxMetricsPerRequest {
		return 0, fmt.Errorf("metrics: at most %d values per request (got %d)", apitypes.MaxMetricsPerRequest, len(ms))
	}
	now := e.now()
	for i := range ms {
		if err := apitypes.CheckMetric(ms[i]); err != nil {
			return 0, fmt.Errorf("metrics[%d].%w", i, err)
		}
		if ms[i].Time.IsZero() {
			ms[i].Time = now // when it was logged, not when it is delivered
		}
	}
	if err := e.q.add(ms); err != nil {
		return 0, fmt.Errorf("%w: %v", errQueue, err)
	}
	return len(ms), nil
}

// startMetrics starts the job's metrics endpoint and the delivery of its
// queue, and sets the FERRY_API_URL the job gets. finish, called once the
// job has ended, takes no more metrics and waits until the queue is
// delivered or ctx is done; the queue stays in the attempt's folder either
// way. Without an endpoint (no loopback port, an unreadable queue file)
// the job reaches the server directly, as it did before the runner
// buffered.
func (r *runner) startMetrics(ctx context.Context) (finish func(ctx context.Context) error) {
	q, err := openMetricQueue(filepath.Join(r.cfg.Dir, MetricsQueueName))
	if err != nil {
		r.log.Warn("no metrics queue; the job logs metrics to the server directly", "err", err)
		return func(context.Context) error { return nil }
	}
	var u string
	var stop func()
	if d := r.cfg.Direct; d != nil && d.Metrics != nil {
		u, stop, err = d.Metrics.serve(q, r.cfg.Job, r.cfg.RunToken, r.cfg.APIURL, r.cfg.APIFile, r.newMLflowRun())
	} else {
		var srv *http.Server
		u, srv, err = serveMetrics(q, r.cfg.Job, r.cfg.RunToken, r.cfg.APIURL, r.cfg.APIFile, r.newMLflowRun())
		stop = func() { _ = srv.Close() }
	}
	if err != nil {
		q.close()
		r.log.Warn("no metrics endpoint; the job logs metrics to the server directly", "err", err)
		return func(context.Context) error { return nil }
	}
	r.jobAPI = u
	delivered := make(chan error, 1)
	go func() {
		delivered <- q.deliver(ctx, func(ctx context.Context, first int64, ms []apitypes.Metric) error {
			return r.c.AddNumberedMetrics(ctx, r.cfg.Job, first, ms)
		}, r.log)
	}()
	return func(wctx context.Context) error {
		stop()
		q.close()
		select {
		case err := <-delivered:
			return err
		case <-wctx.Done():
			return wctx.Err()
		}
	}
}
