package httplimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// serve runs l's server for handler on a loopback port until the test
// ends, and returns its address and its listener.
func serve(t *testing.T, l Limits, handler http.Handler) (string, *connLimiter) {
	t.Helper()
	l = l.WithDefaults()
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := l.Listen(ln).(*connLimiter)
	hs := l.Server(handler)
	go func() { _ = hs.Serve(cl) }()
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String(), cl
}

// readAll answers with the bytes of the body it read, or 408 with the
// error when the body came too slowly.
var readAll = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if errors.Is(err, ErrBodyTooSlow) {
		http.Error(w, err.Error(), http.StatusRequestTimeout)
		return
	}
	fmt.Fprintf(w, "%d", n)
})

// A body that trickles (a byte at a time, slower than the minimum rate)
// is cut off with 408 once its grace is spent, as is one that sends a
// burst and then holds; a body at a good pace passes, and the
// connection then carries the next request with no deadline left from
// the body.
func TestSlowBody(t *testing.T) {
	addr, _ := serve(t, Limits{BodyGrace: 300 * time.Millisecond, BodyMinRate: 1000}, readAll)

	t.Run("trickle", func(t *testing.T) {
		c := testutil.DialFrom(t, "127.0.0.1", addr)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 100; i++ {
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		if code, body := testutil.ReadAnswer(t, c); code != http.StatusRequestTimeout || !strings.Contains(body, "too slowly") {
			t.Errorf("trickling body: %d %q, want 408", code, body)
		}
		c.Close()
		<-done
	})
	t.Run("burst then hold", func(t *testing.T) {
		c := testutil.DialFrom(t, "127.0.0.1", addr)
		// 50 KB earns 50 s at 1000 B/s, but no more than the grace counts.
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("x", 50000))
		if code, _ := testutil.ReadAnswer(t, c); code != http.StatusRequestTimeout {
			t.Errorf("held body: %d, want 408", code)
		}
	})
	t.Run("steady", func(t *testing.T) {
		c := testutil.DialFrom(t, "127.0.0.1", addr)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n")
		for i := 0; i < 20; i++ { // 100 bytes each 20 ms: 5000 B/s
			fmt.Fprint(c, strings.Repeat("y", 100))
			time.Sleep(20 * time.Millisecond)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "2000" {
			t.Fatalf("steady body: %d %q", resp.StatusCode, b)
		}
		// Past the body's deadline, the connection still carries a
		// request (its deadline was cleared at the body's end).
		time.Sleep(500 * time.Millisecond)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("second request on the connection: %v", err)
		}
		b, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "3" {
			t.Fatalf("second request: %d %q", resp.StatusCode, b)
		}
	})
}

// A header over MaxHeaderBytes, and one of more than MaxHeaders fields,
// are answered 431 by the server itself.
func TestHeaderLimits(t *testing.T) {
	addr, _ := serve(t, Limits{MaxHeaderBytes: 8 << 10, MaxHeaders: 20}, readAll)
	for _, tc := range []struct {
		name, header string
	}{
		{"huge field", "X-Big: " + strings.Repeat("a", 64<<10) + "\r\n"},
		{"many fields", strings.Repeat("X-Many: 1\r\n", 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testutil.DialFrom(t, "127.0.0.1", addr)
			fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\n%sContent-Length: 1\r\n\r\nx", tc.header)
			if code, body := testutil.ReadAnswer(t, c); code != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("%d %q, want 431", code, body)
			}
		})
	}
	c := testutil.DialFrom(t, "127.0.0.1", addr)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\n%sContent-Length: 1\r\n\r\nx", strings.Repeat("X-Some: 1\r\n", 10))
	if code, body := testutil.ReadAnswer(t, c); code != 200 {
		t.Errorf("within the limits: %d %q", code, body)
	}
}

// Connections over the bound of one address are turned away with 429,
// those over the total with 503, and a closed connection frees its
// place.
func TestConnLimits(t *testing.T) {
	addr, cl := serve(t, Limits{MaxConns: 5, MaxConnsPerAddr: 3}, readAll)
	a2 := netip.MustParseAddr("127.0.0.2")
	var held []net.Conn
	for range 3 {
		held = append(held, testutil.DialFrom(t, "127.0.0.2", addr))
	}
	waitCounts(t, cl, a2, 3, 3)
	over := testutil.DialFrom(t, "127.0.0.2", addr)
	fmt.Fprintf(over, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, body := testutil.ReadAnswer(t, over); code != http.StatusTooManyRequests || !strings.Contains(body, "127.0.0.2") {
		t.Errorf("4th connection from one address: %d %q, want 429", code, body)
	}
	// Another address still gets in, up to the total.
	for range 2 {
		held = append(held, testutil.DialFrom(t, "127.0.0.3", addr))
	}
	waitCounts(t, cl, a2, 5, 3)
	full := testutil.DialFrom(t, "127.0.0.4", addr)
	fmt.Fprintf(full, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, _ := testutil.ReadAnswer(t, full); code != http.StatusServiceUnavailable {
		t.Errorf("connection over the total: %d, want 503", code)
	}
	held[0].Close()
	waitCounts(t, cl, a2, 4, 2)
	ok := testutil.DialFrom(t, "127.0.0.2", addr)
	fmt.Fprintf(ok, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	if code, body := testutil.ReadAnswer(t, ok); code != 200 || body != "2" {
		t.Errorf("after one closed: %d %q", code, body)
	}
}

// waitCounts waits until cl counts open connections in all and for addr
// (the server closes and counts them in its own goroutines).
func waitCounts(t *testing.T, cl *connLimiter, addr netip.Addr, open, ofAddr int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, a := cl.counts(addr)
		if o == open && a == ofAddr {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections open: %d, of %s: %d; want %d and %d", o, addr, a, open, ofAddr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Check names the flag of a field out of range.
func TestCheck(t *testing.T) {
	l := Limits{MaxHeaders: -1}.WithDefaults()
	if err := l.Check(); err == nil || !strings.Contains(err.Error(), "--max-headers") {
		t.Errorf("MaxHeaders -1: %v", err)
	}
	if err := (Limits{}).WithDefaults().Check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
