package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/httplimit"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// holdBody starts a scoring request on c that says its body has length
// bytes, sends all of it but the last byte, and holds that one.
func holdBody(c net.Conn, length int) {
	fmt.Fprintf(c, "POST /endpoints/ep/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", key1, length)
	_, _ = c.Write(make([]byte, length-1))
}

// Bodies sent all but their last byte and held there take no more of the
// gateway's memory than its bounds: one address its share (its next body
// is answered 429), and a client at another address still scores. The
// bytes come back when the held requests end.
func TestHeldBodiesAreBounded(t *testing.T) {
	blue := newReplica(t, "blue")
	const mib = 1 << 20
	g := New(Options{MaxBody: mib, MaxBufferedPerAddr: 2 * mib, MaxBuffered: 3 * mib})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]Deployment{"blue": dep(blue)}})
	base := serve(t, g)

	var held []net.Conn
	for range 2 {
		c := testutil.DialFrom(t, "127.0.0.2", strings.TrimPrefix(base, "http://"))
		holdBody(c, mib)
		held = append(held, c)
	}
	testutil.WaitFor(t, 10*time.Second, "the two held bodies to be read", func() bool { _, a := g.buffers.inUse("127.0.0.2"); return a == 2*mib })
	over := testutil.DialFrom(t, "127.0.0.2", strings.TrimPrefix(base, "http://"))
	holdBody(over, mib)
	if code, body := testutil.ReadAnswer(t, over); code != http.StatusTooManyRequests || !strings.Contains(body, "for one client address") {
		t.Errorf("a third held body from one address: %d %s, want 429", code, body)
	}
	if code, body, _ := score(t, base, "ep", key1, "fine", nil); code != 200 || body != `"blue:fine"` {
		t.Errorf("a client at another address: %d %s", code, body)
	}
	// A third address fills what is left in all (3 × (1 MiB − 16 KiB):
	// each body's first 16 KiB count against its address only). The
	// next large body, from anywhere, is turned away; a small one still
	// scores.
	third := testutil.DialFrom(t, "127.0.0.3", strings.TrimPrefix(base, "http://"))
	holdBody(third, mib)
	held = append(held, third)
	testutil.WaitFor(t, 10*time.Second, "the third held body to be read", func() bool { all, _ := g.buffers.inUse(""); return all == 3*(mib-smallBody) })
	if code, body := testutil.ReadAnswer(t, func() net.Conn {
		c := testutil.DialFrom(t, "127.0.0.4", strings.TrimPrefix(base, "http://"))
		holdBody(c, 256<<10)
		return c
	}()); code != http.StatusTooManyRequests || !strings.Contains(body, "in all") {
		t.Errorf("a body with the gateway's bound reached: %d %s, want 429", code, body)
	}
	if code, body, _ := score(t, base, "ep", key1, "small", nil); code != 200 || body != `"blue:small"` {
		t.Errorf("a small body with the gateway's bound reached: %d %s", code, body)
	}
	if n := blue.got.Load(); n != 2 {
		t.Errorf("the replica got %d requests, want only the well-behaved two", n)
	}
	for _, c := range held {
		c.Close()
	}
	testutil.WaitFor(t, 10*time.Second, "the held bodies' bytes to come back", func() bool { all, _ := g.buffers.inUse(""); return all == 0 })
}

// A body declared over the limit is answered 413 before any of it is
// read; a body of unknown length is cut off at the limit.
func TestBodyOverTheLimit(t *testing.T) {
	blue := newReplica(t, "blue")
	g := New(Options{MaxBody: 1000})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]Deployment{"blue": dep(blue)}})
	base := serve(t, g)
	c := testutil.DialFrom(t, "127.0.0.1", strings.TrimPrefix(base, "http://"))
	fmt.Fprintf(c, "POST /endpoints/ep/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", key1, 16<<20)
	if code, body := testutil.ReadAnswer(t, c); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "over 1000 bytes") {
		t.Errorf("a 16 MiB body declared: %d %s, want 413", code, body)
	}
	chunked := testutil.DialFrom(t, "127.0.0.1", strings.TrimPrefix(base, "http://"))
	fmt.Fprintf(chunked, "POST /endpoints/ep/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n", key1)
	for range 3 {
		fmt.Fprintf(chunked, "200\r\n%s\r\n", strings.Repeat("z", 0x200))
	}
	if code, body := testutil.ReadAnswer(t, chunked); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked body over the limit: %d %s, want 413", code, body)
	}
	if all, _ := g.buffers.inUse(""); all != 0 {
		t.Errorf("%d bytes still held after the refused bodies", all)
	}
	if n := blue.got.Load(); n != 0 {
		t.Errorf("the replica got %d requests", n)
	}
}

// Behind the server's limits, a scoring request whose body trickles is
// answered 408 by the gateway, and never reaches a replica.
func TestSlowBodyIs408(t *testing.T) {
	blue := newReplica(t, "blue")
	g := New(Options{})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]Deployment{"blue": dep(blue)}})
	l := httplimit.Limits{BodyGrace: 200 * time.Millisecond, BodyMinRate: 1000}.WithDefaults()
	srv := httptest.NewServer(l.Handler(g))
	t.Cleanup(srv.Close)
	c := testutil.DialFrom(t, "127.0.0.1", strings.TrimPrefix(srv.URL, "http://"))
	fmt.Fprintf(c, "POST /endpoints/ep/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n", key1)
	go func() {
		for range 100 {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if code, body := testutil.ReadAnswer(t, c); code != http.StatusRequestTimeout || !strings.Contains(body, "too slowly") {
		t.Errorf("a trickling body: %d %s, want 408", code, body)
	}
	if n := blue.got.Load(); n != 0 {
		t.Errorf("the replica got %d requests", n)
	}
	if all, _ := g.buffers.inUse(""); all != 0 {
		t.Errorf("%d bytes still held after the cut-off body", all)
	}
}

// An endpoint's requests under way are bounded (429 over it), and the
// clients of another endpoint are not held back by them.
func TestRequestsPerEndpoint(t *testing.T) {
	slow, quick := newReplica(t, "slow"), newReplica(t, "quick")
	slow.block = make(chan struct{})
	g := New(Options{MaxRequests: 2})
	g.Set(Endpoint{Name: "ep", AuthMode: "key", Keys: []string{key1}, Traffic: map[string]int{"slow": 100}, Deployments: map[string]Deployment{"slow": dep(slow)}})
	g.Set(Endpoint{Name: "other", AuthMode: "key", Keys: []string{key2}, Traffic: map[string]int{"quick": 100}, Deployments: map[string]Deployment{"quick": dep(quick)}})
	base := serve(t, g)
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			code, _, _ := score(t, base, "ep", key1, "held", nil)
			codes <- code
		}()
	}
	testutil.WaitFor(t, 10*time.Second, "two requests at the replica", func() bool { return slow.got.Load() == 2 })
	if code, body, _ := score(t, base, "ep", key1, "third", nil); code != http.StatusTooManyRequests || !strings.Contains(body, "requests under way") {
		t.Errorf("a third request to the endpoint: %d %s, want 429", code, body)
	}
	if code, body, _ := score(t, base, "other", key2, "x", nil); code != 200 {
		t.Errorf("the other endpoint: %d %s", code, body)
	}
	// A request without the key takes nothing of the endpoint's.
	if code, _, _ := score(t, base, "ep", "wrong", "x", nil); code != http.StatusUnauthorized {
		t.Errorf("a wrong key: %d, want 401", code)
	}
	close(slow.block)
	for range 2 {
		if c := <-codes; c != 200 {
			t.Errorf("a held request: %d", c)
		}
	}
	if code, _, _ := score(t, base, "ep", key1, "after", nil); code != 200 {
		t.Errorf("after the held ones ended: %d", code)
	}
}

// buffers keeps each address within its share and all within the total,
// counting a body's first smallBody bytes against its address only; give
// undoes take.
func TestBuffers(t *testing.T) {
	const k = smallBody
	b := newBuffers(10*k, 8*k)
	for _, step := range []struct {
		addr       string
		held, want int64
		refused    string
	}{
		{"a", 0, 6 * k, ""}, {"a", 6 * k, 9 * k, "one client address"}, {"b", 0, 6 * k, ""},
		{"c", 0, k, ""},           // within its first smallBody: not counted in all
		{"c", k, 2 * k, "in all"}, // 5k + 5k held beyond the first, in all
		{"d", 0, k / 2, ""},       // small bodies still get in
	} {
		if got := b.take(step.addr, step.held, step.want); (step.refused == "") != (got == "") || !strings.Contains(got, step.refused) {
			t.Errorf("take(%s, %d, %d) = %q, want %q", step.addr, step.held, step.want, got, step.refused)
		}
	}
	b.give("a", 6*k)
	if all, a := b.inUse("a"); all != 5*k || a != 0 {
		t.Errorf("after give: %d in all, %d for a; want %d, 0", all, a, 5*k)
	}
	if got := b.take("c", k, 6*k); got != "" {
		t.Errorf("take(c, k, 6k) after a gave back its share: %s", got)
	}
}
