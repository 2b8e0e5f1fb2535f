package testutil

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// DialFrom connects to addr (host:port) from the loopback address from:
// all of 127.0.0.0/8 is this host's on Linux, so one test plays many
// clients, each with an address of its own. The connection is closed when
// the test ends.
func DialFrom(t testing.TB, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ReadAnswer reads the HTTP answer on c, waiting at most 30 s, and
// returns its status and body; one that does not come fails the test.
func ReadAnswer(t testing.TB, c net.Conn) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
