package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A replica that closed the gateway's idle connections (it restarted its
// listener, or swept connections idle too long) still gets the next
// request: the gateway does not send it on a closed connection.
func TestReplicaClosedIdleConnections(t *testing.T) {
	blue := newReplica(t, "blue")
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 100},
		Deployments: map[string]Deployment{"blue": dep(blue)}})
	base := serve(t, g)
	for i := range 4 {
		code, body, _ := score(t, base, "ep", key1, fmt.Sprint(i), nil)
		if code != http.StatusOK || body != fmt.Sprintf("%q", fmt.Sprintf("blue:%d", i)) {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		if g.up.idleCount() != 1 {
			t.Fatalf("after request %d the gateway keeps %d idle connections to the replica, want 1", i, g.up.idleCount())
		}
		blue.CloseClientConnections()
	}
}

// A replica that closes a kept-alive connection just as the gateway sends
// a request on it, before any byte of an answer, has not answered it: the
// gateway sends it once more on a new connection.
func TestRequestResentWhenAKeptConnectionCloses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conns, requests := 0, 0
	var open []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close() // the gateway keeps its connection idle
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns++
			open = append(open, c)
			first := conns == 1
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					if first && n == 1 {
						return // the first connection's second request: closed unanswered
					}
					mu.Lock()
					requests++
					mu.Unlock()
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				}
			})
		}
	})
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100},
		Deployments: map[string]Deployment{"d": {Replicas: []string{"http://" + ln.Addr().String()}, RequestTimeout: 5 * time.Second, MaxConcurrent: 1}}})
	base := serve(t, g)
	for i := range 3 {
		if code, body, _ := score(t, base, "ep", key1, fmt.Sprintf(`{"n": %d}`, i), nil); code != http.StatusOK || body != fmt.Sprintf(`{"n": %d}`, i) {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 2 || requests != 3 {
		t.Errorf("the replica had %d connections and answered %d requests, want 2 and 3", conns, requests)
	}
}

// The replica gets the request's query and its own Host, not the
// gateway's.
func TestQueryAndHostReachTheReplica(t *testing.T) {
	type seen struct{ query, host string }
	got := make(chan seen, 1)
	rep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.RawQuery, r.Host}
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(rep.Close)
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100},
		Deployments: map[string]Deployment{"d": {Replicas: []string{rep.URL}, RequestTimeout: 5 * time.Second, MaxConcurrent: 1}}})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	code, _, _ := scoreURL(t, srv.URL+"/endpoints/ep/score?verbose=true&n=2", key1)
	if code != http.StatusOK {
		t.Fatalf("scoring: %d", code)
	}
	s := <-got
	if want := rep.Listener.Addr().String(); s.query != "verbose=true&n=2" || s.host != want {
		t.Errorf("the replica saw query %q and Host %q, want %q and %q", s.query, s.host, "verbose=true&n=2", want)
	}
}

func scoreURL(t *testing.T, url, key string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Connections left idle (to a replica no longer routed, say) are closed
// after the idle timeout, with no request to notice them.
func TestIdleConnectionsClosed(t *testing.T) {
	blue := newReplica(t, "blue")
	g := New(Options{})
	g.up.idleTimeout = 50 * time.Millisecond
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 100},
		Deployments: map[string]Deployment{"blue": dep(blue)}})
	base := serve(t, g)
	if code, _, _ := score(t, base, "ep", key1, "1", nil); code != http.StatusOK {
		t.Fatalf("scoring: %d", code)
	}
	g.Remove("ep")
	deadline := time.Now().Add(5 * time.Second)
	for g.up.idleCount() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections still open 5 s after the last request", g.up.idleCount())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A replica on this host is reached at its Unix socket (unix:/PATH); one
// whose socket is gone counts as refused: the request goes to another.
func TestUnixSocketReplica(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "replica.sock"))
	if err != nil {
		t.Fatal(err)
	}
	hosts := make(chan string, 16)
	rep := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}))
	rep.Listener = ln
	rep.Start()
	t.Cleanup(rep.Close)
	g := New(Options{})
	d := Deployment{Replicas: []string{"unix:" + filepath.Join(dir, "gone.sock"), "unix:" + ln.Addr().String()}, RequestTimeout: 5 * time.Second, MaxConcurrent: 2}
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100}, Deployments: map[string]Deployment{"d": d}})
	base := serve(t, g)
	for i := range 4 {
		if code, body, _ := score(t, base, "ep", key1, fmt.Sprint(i), nil); code != http.StatusOK || body != fmt.Sprint(i) {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		if h := <-hosts; h != "localhost" {
			t.Errorf("the replica saw Host %q, want localhost", h)
		}
	}
}

// A replica that dies with a request under way (its connection ends with
// no answer, and it takes no new one) answers 502: the request is not run
// again on another replica of the deployment.
func TestRequestNotRerunElsewhereWhenItsReplicaDies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		// The first request is answered, the second kills the replica.
		req, err := http.ReadRequest(br)
		if err == nil {
			_, _ = io.ReadAll(req.Body)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if req, err = http.ReadRequest(br); err == nil {
				_, _ = io.ReadAll(req.Body)
			}
		}
		ln.Close()
		c.Close()
	})
	g := New(Options{})
	d := Deployment{Replicas: []string{"http://" + ln.Addr().String()}, RequestTimeout: 5 * time.Second, MaxConcurrent: 1}
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100}, Deployments: map[string]Deployment{"d": d}})
	base := serve(t, g)
	if code, body, _ := score(t, base, "ep", key1, "1", nil); code != http.StatusOK || body != "ok" {
		t.Fatalf("first request: %d %s", code, body)
	}
	// 502: the replica failed. A 503 (no ready replica) would mean that
	// the gateway took it for refused and looked for another to run the
	// request again.
	// The answer names the replica, though the error (an EOF) does not.
	if code, body, _ := score(t, base, "ep", key1, "2", nil); code != http.StatusBadGateway || !strings.Contains(body, ln.Addr().String()) {
		t.Errorf("a request whose replica died under it: %d %s, want 502 naming the replica at %s", code, body, ln.Addr())
	}
}

// A replica's socket whose path is longer than a socket address holds (a
// deep job folder) is reached through its folder's descriptor.
func TestUnixSocketLongPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 120 {
		dir = filepath.Join(dir, "a-folder-deep-down")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/replica.sock")
	d.Close()
	if err != nil {
		t.Skipf("binding through /proc/self/fd: %v", err)
	}
	rep := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) }))
	rep.Listener = ln
	rep.Start()
	t.Cleanup(rep.Close)
	sock := filepath.Join(dir, "replica.sock")
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatalf("%s (%d bytes) was dialled directly: the test's path is not long enough", sock, len(sock))
	}
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100},
		Deployments: map[string]Deployment{"d": {Replicas: []string{"unix:" + sock}, RequestTimeout: 5 * time.Second, MaxConcurrent: 2}}})
	base := serve(t, g)
	if code, body, _ := score(t, base, "ep", key1, "deep", nil); code != http.StatusOK || body != "deep" {
		t.Fatalf("through a %d-byte socket path: %d %s", len(sock), code, body)
	}
}

// unixReplica is a replica (or one of its workers) on a Unix socket at
// path: it answers /score with its name and counts what it got; while
// block is open, each request waits for it.
func unixReplica(t *testing.T, path, name string, block chan struct{}) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	got := &atomic.Int64{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		if block != nil {
			<-block
		}
		fmt.Fprint(w, name)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, got
}

// A replica with workers of its own (Deployment.Workers) gets its requests
// at its least busy worker's socket, never at its own URL, and they count
// on the replica as any other (Load, the least busy replica); a replica
// without workers is reached as before. A worker whose socket refuses
// sends the request on to another replica.
func TestRequestsGoToTheLeastBusyWorker(t *testing.T) {
	dir := t.TempDir()
	block := make(chan struct{})
	front, frontGot := unixReplica(t, filepath.Join(dir, "a.sock"), "a-front", nil)
	w0, _ := unixReplica(t, filepath.Join(dir, "a.sock.w0"), "a-w0", block)
	_, _ = unixReplica(t, filepath.Join(dir, "a.sock.w1"), "a-w1", block)
	b, _ := unixReplica(t, filepath.Join(dir, "b.sock"), "b", block)
	a := "unix:" + front.Listener.Addr().String()
	bURL := "unix:" + b.Listener.Addr().String()
	d := Deployment{Replicas: []string{a, bURL}, RequestTimeout: 10 * time.Second, MaxConcurrent: 4, MaxQueueWait: time.Second,
		Workers: map[string][]string{a: {"unix:" + filepath.Join(dir, "a.sock.w0"), "unix:" + filepath.Join(dir, "a.sock.w1")}}}
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"d": 100}, Deployments: map[string]Deployment{"d": d}})
	base := serve(t, g)
	release := sync.OnceFunc(func() { close(block) })
	t.Cleanup(release) // before the servers close: they wait for their handlers

	// Six requests held at once: three on each replica (the least busy
	// each time), a's three on its workers by turns; each counts on its
	// replica.
	answers := make(chan string, 6)
	for i := range 6 {
		go func() {
			code, body, _ := score(t, base, "ep", key1, "x", nil)
			answers <- fmt.Sprint(code, " ", body)
		}()
		// One at a time, so that each is placed knowing where the last went.
		for deadline := time.Now().Add(time.Minute); inFlight(g) < i+1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("request %d never reached a replica", i)
			}
		}
	}
	load := g.Load("ep")["d"]
	if load.PerReplica[a] != 3 || load.PerReplica[bURL] != 3 || len(load.PerReplica) != 2 {
		t.Fatalf("requests in flight per replica: %v, want 3 on %s (its workers' counted on it) and 3 on %s", load.PerReplica, a, bURL)
	}
	release()
	got := map[string]int{}
	for range 6 {
		got[<-answers]++
	}
	if want := map[string]int{"200 a-w0": 2, "200 a-w1": 1, "200 b": 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers: %v, want %v", got, want)
	}
	if n := frontGot.Load(); n != 0 {
		t.Errorf("replica a's front got %d requests; with workers of its own it should get none", n)
	}

	// Worker 0 gone: its refused connection sends the request elsewhere.
	w0.Close()
	for i := range 6 {
		if code, body, _ := score(t, base, "ep", key1, "x", nil); code != http.StatusOK || body == "a-w0" {
			t.Fatalf("request %d with worker 0 gone: %d %s", i, code, body)
		}
	}
}

// inFlight is how many requests the gateway's deployment "d" of "ep" has
// in flight.
func inFlight(g *Gateway) int {
	return g.Load("ep")["d"].InFlight
}

// A replica's request goes to its least busy worker: once a worker's
// request ends, the next goes there rather than by turns.
func TestTakePicksTheLeastBusyWorker(t *testing.T) {
	d := &deploymentState{Deployment: Deployment{Replicas: []string{"unix:/r.sock"},
		Workers: map[string][]string{"unix:/r.sock": {"unix:/r.sock.w0", "unix:/r.sock.w1", "unix:/r.sock.w2"}}},
		inFlight: map[string]int{}, perWorker: map[string]int{}}
	var targets []string
	for range 3 {
		_, target, _ := d.take(nil)
		targets = append(targets, target)
	}
	if fmt.Sprint(targets) != "[unix:/r.sock.w0 unix:/r.sock.w1 unix:/r.sock.w2]" {
		t.Fatalf("three requests went to %v, want one on each worker", targets)
	}
	d.done("unix:/r.sock", "unix:/r.sock.w1")
	for range 2 {
		if replica, target, _ := d.take(nil); replica != "unix:/r.sock" || target != "unix:/r.sock.w1" {
			t.Fatalf("with w1 free the request went to %s at %s, want w1", replica, target)
		}
		d.done("unix:/r.sock", "unix:/r.sock.w1")
	}
	if d.inFlight["unix:/r.sock"] != 2 || len(d.perWorker) != 2 {
		t.Fatalf("in flight after: replica %d, workers %v", d.inFlight["unix:/r.sock"], d.perWorker)
	}
}

// The percentiles are worked out again when requests came since, at most
// once per percentilesMaxAge while they keep coming, and exactly once
// they stop.
func TestPercentilesWorkedOutAtMostOnceASecond(t *testing.T) {
	l := newLatencies()
	t0 := time.Now()
	if s := l.snapshotAt(t0); s.Requests != 0 || s.P50 != 0 {
		t.Fatalf("no requests: %+v", s)
	}
	for i := 1; i <= 100; i++ {
		l.add(time.Duration(i)*time.Millisecond, false)
	}
	if s := l.snapshotAt(t0); s.P50 != 51*time.Millisecond || s.P99 != 100*time.Millisecond {
		t.Fatalf("after 100 requests: %+v, want p50 51ms p99 100ms", s)
	}
	for range 100 {
		l.add(time.Second, true)
	}
	// Within the second: the counts are current, the percentiles kept.
	if s := l.snapshotAt(t0.Add(percentilesMaxAge / 2)); s.Requests != 200 || s.Errors != 100 || s.P50 != 51*time.Millisecond {
		t.Fatalf("half a second later: %+v, want 200 requests, 100 errors, the kept p50 51ms", s)
	}
	// Past it: worked out again.
	if s := l.snapshotAt(t0.Add(percentilesMaxAge)); s.P50 != time.Second || s.P99 != time.Second {
		t.Fatalf("a second later: %+v, want p50 and p99 1s", s)
	}
}
