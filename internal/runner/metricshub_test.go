package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// The hub serves every attempt's endpoint on one listener: a request goes
// to the attempt whose run token it carries, as on a listener of its own;
// one with no live attempt's token is answered as an endpoint answers a
// token not its own (MLflow refused, the rest passed to the server), and
// so is an ended attempt's.
func TestMetricsHubRoutesByRunToken(t *testing.T) {
	var mu sync.Mutex
	var upstream []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upstream = append(upstream, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	var hub MetricsHub
	defer hub.Close()
	queue := func() *metricQueue {
		q, err := openMetricQueue(filepath.Join(t.TempDir(), MetricsQueueName))
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa, qb := queue(), queue()
	ua, stopA, err := hub.serve(qa, "a", "tok-a", srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ub, stopB, err := hub.serve(qb, "b", "tok-b", srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	if ua != ub {
		t.Errorf("two attempts of one server got two endpoints: %s and %s", ua, ub)
	}
	call := func(method, path, token, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, ua+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	metric := `{"name": "loss", "value": 1}`
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"POST", "/v1/jobs/a/metrics", "tok-a", metric, 200},
		{"POST", "/v1/jobs/b/metrics", "tok-b", metric, 200},
		{"POST", "/v1/jobs/b/metrics", "tok-b", `{"metrics": [{"name": "x", "value": 2}, {"name": "y", "value": 3}]}`, 200},
		{"POST", "/v1/jobs/b/metrics", "tok-a", metric, 403}, // a's token, b's job: the server decides
		{"POST", "/v1/jobs/a/metrics", "tok-b", metric, 403},
		{"POST", "/v1/jobs/a/metrics", "tok-c", metric, 403}, // no attempt's token
		{"GET", "/v1/jobs/a", "", "", 403},
		{"GET", "/api/2.0/mlflow/experiments/get-by-name", "tok-c", "", 401},
		{"GET", "/api/2.0/mlflow/experiments/get-by-name", "", "", 401},
	} {
		if got := call(c.method, c.path, c.token, c.body); got != c.want {
			t.Errorf("%s %s with %q: %d, want %d", c.method, c.path, c.token, got, c.want)
		}
	}
	stopA()
	qa.close()
	if got := call("POST", "/v1/jobs/a/metrics", "tok-a", metric); got != 403 {
		t.Errorf("an ended attempt's token: %d, want the server's 403", got)
	}
	if got := call("GET", "/api/2.0/mlflow/experiments/get-by-name", "tok-a", ""); got != 401 {
		t.Errorf("an ended attempt's MLflow call: %d, want 401", got)
	}
	if last, _ := qa.state(); last != 1 {
		t.Errorf("a queued %d values, want 1", last)
	}
	if last, _ := qb.state(); last != 3 {
		t.Errorf("b queued %d values, want 3", last)
	}
	want := []string{
		"POST /v1/jobs/b/metrics Bearer tok-a",
		"POST /v1/jobs/a/metrics Bearer tok-b",
		"POST /v1/jobs/a/metrics Bearer tok-c",
		"GET /v1/jobs/a ",
		"POST /v1/jobs/a/metrics Bearer tok-a",
	}
	mu.Lock()
	defer mu.Unlock()
	if d := cmp.Diff(want, upstream); d != "" {
		t.Errorf("passed to the server (-want +got):\n%s", d)
	}
}

// Runners of the executor (Direct) given a hub hand their jobs its one
// endpoint as FERRY_API_URL, not a listener each.
func TestDirectRunnersShareTheHubsEndpoint(t *testing.T) {
	var hub MetricsHub
	defer hub.Close()
	out := t.TempDir()
	var urls []string
	for _, job := range []string{"a", "b"} {
		srv := httptest.NewServer(&apiRecorder{})
		t.Cleanup(srv.Close)
		file := filepath.Join(out, job)
		a := &apitypes.Assignment{Job: job, Attempt: 1, Spec: &spec.Job{Command: `printf %s "$FERRY_API_URL" > ` + file}, FinalOutputs: true}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := Run(ctx, Config{Client: client.New(srv.URL, "tok-"+job), Job: job, Attempt: 1, Dir: filepath.Join(t.TempDir(), "attempt"),
			CacheDir: filepath.Join(t.TempDir(), "cache"), EnvCacheDir: filepath.Join(t.TempDir(), "env"), APIURL: "http://127.0.0.1:1",
			RunToken: "tok-" + job, Assignment: a, Direct: &Direct{Guard: os.Getpid(), Metrics: &hub}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, string(data))
	}
	s, err := hub.server("http://127.0.0.1:1", "")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{s.url, s.url}, urls); d != "" {
		t.Errorf("the jobs' FERRY_API_URL (-want +got):\n%s", d)
	}
}
