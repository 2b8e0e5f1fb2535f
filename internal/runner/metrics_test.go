package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeServer records numbered metrics as the workspace does: a value is
// kept once however often its batch is sent. It fails the first sends, as
// a server that is down would.
type fakeServer struct {
	mu        sync.Mutex
	high      int64
	steps     []int64
	failFirst int
	sends     int
}

func (f *fakeServer) send(_ context.Context, first int64, ms []apitypes.Metric) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sends++
	if f.sends <= f.failFirst {
		return errors.New("connection refused")
	}
	for i, m := range ms {
		if seq := first + int64(i); seq > f.high {
			f.high = seq
			f.steps = append(f.steps, m.Step)
		}
	}
	return nil
}

// Values queued while the server is unreachable are delivered in order and
// once; a queue opened again goes on with its numbering.
func TestMetricQueueDeliversInOrderOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), MetricsQueueName)
	q, err := openMetricQueue(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 5; i++ {
		if err := q.add([]apitypes.Metric{{Name: "loss", Step: i}}); err != nil {
			t.Fatal(err)
		}
	}
	q.close()
	if err := q.add([]apitypes.Metric{{Name: "loss", Step: 99}}); err == nil {
		t.Error("a closed queue took a value")
	}
	f := &fakeServer{failFirst: 3}
	if err := q.deliver(context.Background(), f.send, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	// A runner that delivers the same queue again (it died before it knew
	// the server had it all) adds nothing.
	q2, err := openMetricQueue(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := q2.add([]apitypes.Metric{{Name: "loss", Step: 6}}); err != nil {
		t.Fatal(err)
	}
	q2.close()
	if err := q2.deliver(context.Background(), f.send, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int64{1, 2, 3, 4, 5, 6}, f.steps); d != "" {
		t.Errorf("steps recorded (-want +got):\n%s", d)
	}
}

// The endpoint queues the job's own metric POSTs, checked as the server
// checks them, and passes everything else to the server.
func TestMetricsEndpoint(t *testing.T) {
	var upstream []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream = append(upstream, r.Method+" "+r.URL.String())
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	q, err := openMetricQueue(filepath.Join(t.TempDir(), MetricsQueueName))
	if err != nil {
		t.Fatal(err)
	}
	u, hs, err := serveMetrics(q, "j", "tok", srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	post := func(path, token, body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", u+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token, body string
		want              int
	}{
		{"/v1/jobs/j/metrics", "tok", `{"name": "loss", "value": 1, "step": 1}`, 200},
		{"/v1/jobs/j/metrics", "tok", `{"metrics": [{"name": "a", "value": 2}, {"name": "b", "value": 3}]}`, 200},
		{"/v1/jobs/j/metrics", "tok", `{"metrics": [{"name": " ", "value": 2}]}`, 400},
		{"/v1/jobs/j/metrics", "tok", `{"name": "x", "value": 1, "seq": 4}`, 400},
		{"/v1/jobs/j/metrics", "tok", `not json`, 400},
		{"/v1/jobs/j/metrics", "other", `{"name": "x", "value": 1}`, 403}, // the server decides
		{"/v1/jobs/k/metrics", "tok", `{"name": "x", "value": 1}`, 403},
	} {
		if got := post(c.path, c.token, c.body); got != c.want {
			t.Errorf("POST %s %s: %d, want %d", c.path, c.body, got, c.want)
		}
	}
	if last, _ := q.state(); last != 3 {
		t.Errorf("%d values queued, want 3", last)
	}
	if d := cmp.Diff([]string{"POST /v1/jobs/j/metrics", "POST /v1/jobs/k/metrics"}, upstream); d != "" {
		t.Errorf("passed to the server (-want +got):\n%s", d)
	}
}

// A job that logs no metric leaves no queue file, and its queue delivers
// nothing; the first value makes the file, and a runner that dies after
// the job was told it is taken finds it there.
func TestMetricQueueFileMadeWithTheFirstValue(t *testing.T) {
	path := filepath.Join(t.TempDir(), MetricsQueueName)
	q, err := openMetricQueue(path)
	if err != nil {
		t.Fatal(err)
	}
	q.close()
	f := &fakeServer{}
	if err := q.deliver(context.Background(), f.send, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a queue with no value made its file: %v", err)
	}
	if f.sends != 0 {
		t.Errorf("%d sends of an empty queue", f.sends)
	}

	q, err = openMetricQueue(path)
	if err != nil {
		t.Fatal(err)
	}
	delivered := make(chan error, 1)
	go func() { delivered <- q.deliver(context.Background(), f.send, slog.New(slog.DiscardHandler)) }()
	if err := q.add([]apitypes.Metric{{Name: "loss", Step: 1}}); err != nil {
		t.Fatal(err)
	}
	again, err := openMetricQueue(path) // as a runner started again finds it
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := again.state(); last != 1 {
		t.Errorf("the file holds %d values, want 1", last)
	}
	if err := q.add([]apitypes.Metric{{Name: "loss", Step: 2}}); err != nil {
		t.Fatal(err)
	}
	q.close()
	if err := <-delivered; err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int64{1, 2}, f.steps); d != "" {
		t.Errorf("steps recorded (-want +got):\n%s", d)
	}
}

// The job's calls that the metrics endpoint passes on follow the server's
// URL file as the runner's own do: once the server is gone from its URL,
// a call gets 502 and the next goes where the file says.
func TestUpstreamFollowsURLFile(t *testing.T) {
	answer := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(name + " " + r.URL.Path))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := answer("a"), answer("b")
	file := filepath.Join(t.TempDir(), "server.url")
	if err := os.WriteFile(file, []byte(b.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up, err := upstreamOf(a.URL, file)
	if err != nil {
		t.Fatal(err)
	}
	call := func() (int, string) {
		rec := httptest.NewRecorder()
		up.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:1/v1/jobs/j", nil))
		return rec.Code, rec.Body.String()
	}
	if c, body := call(); c != 200 || body != "a /v1/jobs/j" {
		t.Fatalf("with the server at its URL: %d %q", c, body)
	}
	a.Close()
	if c, _ := call(); c != http.StatusBadGateway {
		t.Errorf("the call to the gone server: %d, want 502", c)
	}
	if c, body := call(); c != 200 || body != "b /v1/jobs/j" {
		t.Errorf("the call after: %d %q, want b's answer", c, body)
	}
}
