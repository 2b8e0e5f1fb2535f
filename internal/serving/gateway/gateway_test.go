package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// The replicas in these tests are real HTTP servers on loopback, each
// answering /score as a scoring server does; the gateway's side of that
// boundary is what is tested here (the scoring harness has tests of its
// own, and the endpoint end-to-end tests run both).

// replica answers /score with its name, counting what it got.
type replica struct {
	*httptest.Server
	name  string
	got   atomic.Int64
	delay time.Duration
	block chan struct{} // when set, each request waits for it
	seen  chan http.Header
}

func newReplica(t *testing.T, name string) *replica {
	t.Helper()
	r := &replica{name: name, seen: make(chan http.Header, 1024)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/score" {
			http.NotFound(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		r.got.Add(1)
		select {
		case r.seen <- req.Header.Clone():
		default:
		}
		if r.block != nil {
			select {
			case <-r.block:
			case <-req.Context().Done():
				return
			}
		}
		if r.delay > 0 {
			time.Sleep(r.delay)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "%q", r.name+":"+string(body))
	}))
	t.Cleanup(r.Close)
	return r
}

const key1, key2 = "primary-key-secret-1", "secondary-key-secret-2"

func dep(rs ...*replica) Deployment {
	d := Deployment{RequestTimeout: 5 * time.Second, MaxConcurrent: 4, MaxQueueWait: time.Second}
	for _, r := range rs {
		d.Replicas = append(d.Replicas, r.URL)
	}
	return d
}

// serve starts the gateway on a real listener.
func serve(t *testing.T, g *Gateway) string {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv.URL
}

func score(t *testing.T, base, endpoint, key, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/endpoints/"+endpoint+"/score", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestKeysAndTokens(t *testing.T) {
	blue := newReplica(t, "blue")
	g := New(Options{CheckToken: func(_ context.Context, ep, tok string) bool { return ep == "tok" && tok == "good-token" }})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1, key2}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]Deployment{"blue": dep(blue)}})
	g.Set(Endpoint{Name: "tok", AuthMode: "aml_token", Traffic: map[string]int{"blue": 100}, Deployments: map[string]Deployment{"blue": dep(blue)}})
	base := serve(t, g)
	for _, c := range []struct {
		endpoint, key string
		want          int
	}{
		{"ep", key1, 200}, {"ep", key2, 200}, {"ep", "wrong", 401}, {"ep", "", 401},
		{"ep", key1[:len(key1)-1], 401}, {"tok", "good-token", 200}, {"tok", key1, 401}, {"nope", key1, 404},
	} {
		code, body, _ := score(t, base, c.endpoint, c.key, "x", nil)
		if code != c.want {
			t.Errorf("%s with key %q: %d %s, want %d", c.endpoint, c.key, code, body, c.want)
		}
		if strings.Contains(body, key1) || strings.Contains(body, key2) {
			t.Errorf("an answer shows a key: %s", body)
		}
	}
	// The endpoint's key never reaches the replica.
	for len(blue.seen) > 0 {
		if h := <-blue.seen; h.Get("Authorization") != "" {
			t.Errorf("the replica got the Authorization header")
		}
	}
}

// A 90/10 split over 1,000 requests lands within 3 points; the header
// picks a deployment whatever the split, one with no traffic too.
func TestTrafficSplitAndHeaderRouting(t *testing.T) {
	blue, green, canary := newReplica(t, "blue"), newReplica(t, "green"), newReplica(t, "canary")
	g := New(Options{Rand: rand.New(rand.NewPCG(1, 2))})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 90, "green": 10},
		Deployments: map[string]Deployment{"blue": dep(blue), "green": dep(green), "canary": dep(canary)}})
	base := serve(t, g)
	counts := map[string]int{}
	for range 1000 {
		code, _, hdr := score(t, base, "ep", key1, "x", nil)
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		counts[hdr.Get(DeploymentHeader)]++
	}
	if counts["blue"] < 870 || counts["blue"] > 930 || counts["green"] < 70 || counts["green"] > 130 || counts["canary"] != 0 {
		t.Errorf("1,000 requests went %v; want blue 900±30, green 100±30, canary none", counts)
	}
	if blue.got.Load() != int64(counts["blue"]) || green.got.Load() != int64(counts["green"]) {
		t.Errorf("the replicas counted blue %d, green %d; the answers said %v", blue.got.Load(), green.got.Load(), counts)
	}
	code, body, hdr := score(t, base, "ep", key1, "pick", map[string]string{DeploymentHeader: "canary"})
	if code != 200 || body != `"canary:pick"` || hdr.Get(DeploymentHeader) != "canary" {
		t.Errorf("header routing to canary: %d %s %v", code, body, hdr.Get(DeploymentHeader))
	}
	if code, body, _ := score(t, base, "ep", key1, "x", map[string]string{DeploymentHeader: "purple"}); code != 404 || !strings.Contains(body, "no deployment purple") {
		t.Errorf("an unknown deployment in the header: %d %s", code, body)
	}
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Deployments: map[string]Deployment{"blue": dep(blue)}})
	if code, body, _ := score(t, base, "ep", key1, "x", nil); code != 503 || !strings.Contains(body, "--traffic") {
		t.Errorf("no traffic set: %d %s", code, body)
	}
}

// Mirrored copies reach the mirror deployment; the client gets the live
// one's answer, and a slow mirror does not slow it.
func TestMirrorTraffic(t *testing.T) {
	blue, shadow := newReplica(t, "blue"), newReplica(t, "shadow")
	shadow.delay = 2 * time.Second
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 100}, Mirror: map[string]int{"shadow": 50},
		Deployments: map[string]Deployment{"blue": dep(blue), "shadow": dep(shadow)}})
	base := serve(t, g)
	start := time.Now()
	for i := range 20 {
		code, body, _ := score(t, base, "ep", key1, fmt.Sprint(i), nil)
		if code != 200 || body != fmt.Sprintf(`"blue:%d"`, i) {
			t.Fatalf("request %d: %d %s, want blue's answer", i, code, body)
		}
	}
	if time.Since(start) > shadow.delay {
		t.Errorf("20 requests took %v: the slow mirror held them", time.Since(start))
	}
	deadline := time.Now().Add(10 * time.Second)
	for shadow.got.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := shadow.got.Load(); n == 0 || n == 20 {
		t.Errorf("the 50%% mirror got %d of 20 requests", n)
	}
}

// A mirror of 10% gets about a tenth of the requests, not all of them.
func TestMirrorPercent(t *testing.T) {
	blue, shadow := newReplica(t, "blue"), newReplica(t, "shadow")
	g := New(Options{Rand: rand.New(rand.NewPCG(3, 4))})
	mirror := dep(shadow)
	mirror.MaxConcurrent = 1000 // no copy is dropped for want of a slot
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 100}, Mirror: map[string]int{"shadow": 10},
		Deployments: map[string]Deployment{"blue": dep(blue), "shadow": mirror}})
	base := serve(t, g)
	for range 1000 {
		if code, _, _ := score(t, base, "ep", key1, "x", nil); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the mirror's copies to settle", func() bool {
		n := shadow.got.Load()
		time.Sleep(100 * time.Millisecond)
		return shadow.got.Load() == n
	})
	if n := shadow.got.Load(); n < 70 || n > 130 {
		t.Errorf("a 10%% mirror got %d of 1,000 requests; want 100±30", n)
	}
}

// Past request_timeout_ms the answer is 408; with every slot busy past
// max_queue_wait_ms it is 429; a request that waits gets a slot freed
// within its wait.
func TestTimeoutAndOverload(t *testing.T) {
	slow := newReplica(t, "slow")
	slow.block = make(chan struct{})
	d := dep(slow)
	d.RequestTimeout, d.MaxConcurrent, d.MaxQueueWait = 300*time.Millisecond, 1, 100*time.Millisecond
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"slow": 100}, Deployments: map[string]Deployment{"slow": d}})
	base := serve(t, g)
	if code, body, _ := score(t, base, "ep", key1, "x", nil); code != 408 || !strings.Contains(body, "did not answer within 300ms") {
		t.Errorf("a request past the timeout: %d %s, want 408", code, body)
	}

	d.RequestTimeout = 10 * time.Second
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"slow": 100}, Deployments: map[string]Deployment{"slow": d}})
	first := make(chan int)
	go func() {
		code, _, _ := score(t, base, "ep", key1, "first", nil)
		first <- code
	}()
	testutil.WaitFor(t, 10*time.Second, "the first request to reach the replica", func() bool { return slow.got.Load() == 2 })
	if code, body, _ := score(t, base, "ep", key1, "x", nil); code != 429 || !strings.Contains(body, "max_queue_wait_ms") {
		t.Errorf("a request with the only slot busy: %d %s, want 429", code, body)
	}
	// One that may wait long enough gets the slot the first frees.
	d.MaxQueueWait = 5 * time.Second
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"slow": 100}, Deployments: map[string]Deployment{"slow": d}})
	second := make(chan int)
	go func() {
		code, _, _ := score(t, base, "ep", key1, "second", nil)
		second <- code
	}()
	time.Sleep(100 * time.Millisecond) // it waits in the queue
	close(slow.block)
	if c1, c2 := <-first, <-second; c1 != 200 || c2 != 200 {
		t.Errorf("the first and the queued request: %d and %d, want 200 both", c1, c2)
	}
	st := g.Load("ep")["slow"].Stats
	if st.Requests != 4 || st.Errors != 2 || st.P50 <= 0 {
		t.Errorf("stats %+v: want 4 requests, 2 errors (the 408 and the 429), a p50", st)
	}
}

// An answer the replica streams reaches the client piece by piece: the
// first piece arrives while the replica still holds the rest.
func TestStreamingPassesThroughUnbuffered(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		for {
			if _, err := os.Stat(gate); err == nil {
				break
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		fmt.Fprint(w, "data: second\n\n")
	}))
	t.Cleanup(stream.Close)
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"s": 100},
		Deployments: map[string]Deployment{"s": {Replicas: []string{stream.URL}, RequestTimeout: 10 * time.Second, MaxConcurrent: 1}}})
	base := serve(t, g)
	req, _ := http.NewRequest(http.MethodPost, base+"/endpoints/ep/score", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+key1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	type read struct {
		line string
		err  error
	}
	got := make(chan read, 1)
	go func() {
		line, err := rd.ReadString('\n')
		got <- read{line, err}
	}()
	select {
	case r := <-got:
		if r.err != nil || r.line != "data: first\n" {
			t.Fatalf("first line %q, %v", r.line, r.err)
		}
	case <-time.After(10 * time.Second):
		// A buffering gateway holds the first piece until the replica
		// ends, which waits for the gate.
		t.Fatal("the first piece did not arrive while the replica held the rest")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil { // only now may the replica finish
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(rd)
	if string(rest) != "\ndata: second\n\n" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("the rest %q (%s)", rest, resp.Header.Get("Content-Type"))
	}
}

// A body over the limit is refused with 413 before any replica sees it;
// a replica that refuses connections is passed over for a live one.
func TestBodyLimitAndDeadReplica(t *testing.T) {
	live := newReplica(t, "live")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	g := New(Options{MaxBody: 1024})
	d := Deployment{Replicas: []string{dead, live.URL}, RequestTimeout: 5 * time.Second, MaxConcurrent: 2}
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100}, Deployments: map[string]Deployment{"d": d}})
	base := serve(t, g)
	if code, body, _ := score(t, base, "ep", key1, strings.Repeat("x", 2048), nil); code != 413 || !strings.Contains(body, "over 1024 bytes") {
		t.Errorf("a 2 KiB body: %d %s, want 413", code, body)
	}
	if n := live.got.Load(); n != 0 {
		t.Errorf("a replica got the refused body")
	}
	for i := range 6 {
		if code, body, _ := score(t, base, "ep", key1, "ok", nil); code != 200 || body != `"live:ok"` {
			t.Fatalf("request %d with a dead replica beside a live one: %d %s", i, code, body)
		}
	}
}

// A deployment with no ready replica holds the request while a cold start
// gives it one, then answers.
func TestColdStartHoldsTheFirstRequest(t *testing.T) {
	r := newReplica(t, "warm")
	var g *Gateway
	var started atomic.Int32
	g = New(Options{ColdStart: func(ctx context.Context, endpoint, deployment string) error {
		started.Add(1)
		time.Sleep(200 * time.Millisecond) // the replica starting
		g.Set(Endpoint{Name: endpoint, AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{deployment: 100}, Deployments: map[string]Deployment{deployment: dep(r)}})
		return nil
	}})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100}, Deployments: map[string]Deployment{"d": dep()}})
	base := serve(t, g)
	if code, body, _ := score(t, base, "ep", key1, "cold", nil); code != 200 || body != `"warm:cold"` || started.Load() != 1 {
		t.Errorf("the first request to a deployment at zero: %d %s, %d cold starts", code, body, started.Load())
	}
}

func TestMetricsPage(t *testing.T) {
	r := newReplica(t, "m")
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"m": 100}, Deployments: map[string]Deployment{"m": dep(r)}})
	base := serve(t, g)
	score(t, base, "ep", key1, "x", nil)
	score(t, base, "ep", "bad", "x", nil)
	rec := httptest.NewRecorder()
	g.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	page := rec.Body.String()
	for _, want := range []string{`ferry_endpoint_requests_total{code="200",deployment="m",endpoint="ep"} 1`, `ferry_endpoint_request_duration_seconds_count{deployment="m",endpoint="ep"} 1`} {
		if !strings.Contains(page, want) {
			t.Errorf("the metrics page lacks %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, key1) {
		t.Error("the metrics page shows a key")
	}
}

// Every request to a replica carries that replica's secret (its own, not
// another replica's), mirrored copies too; a client's own replica-secret
// header is never passed on, so it can stand in for none, and a replica
// without a secret gets no such header.
func TestReplicaSecrets(t *testing.T) {
	blue, green, open := newReplica(t, "blue"), newReplica(t, "green"), newReplica(t, "open")
	g := New(Options{})
	bg := dep(blue, green)
	bg.Secrets = map[string]string{blue.URL: "blue-secret", green.URL: "green-secret"}
	mirror := dep(open)
	mirror.Secrets = map[string]string{open.URL + "/other": "not-open's"}
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"bg": 100}, Mirror: map[string]int{"open": 100},
		Deployments: map[string]Deployment{"bg": bg, "open": mirror}})
	base := serve(t, g)
	clientSecret := map[string]string{inferenceserver.SecretHeader: "the-client's-own"}
	for i := range 4 {
		if code, body, _ := score(t, base, "ep", key1, fmt.Sprint(i), clientSecret); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the mirrored copies", func() bool { return open.got.Load() == 4 })
	for _, c := range []struct {
		r    *replica
		want string
	}{{blue, "blue-secret"}, {green, "green-secret"}, {open, ""}} {
		if c.r.got.Load() == 0 {
			t.Fatalf("replica %s got no request", c.r.name)
		}
		for range c.r.got.Load() {
			h := <-c.r.seen
			if got := h.Values(inferenceserver.SecretHeader); (c.want == "" && len(got) != 0) || (c.want != "" && (len(got) != 1 || got[0] != c.want)) {
				t.Errorf("replica %s got the secret header %q, want %q alone", c.r.name, got, c.want)
			}
		}
	}
}
