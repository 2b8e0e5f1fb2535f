package inferenceserver

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange writes req on a fresh connection, closes the writing side
// and returns all the replica answered. The deadline only guards against
// a hang; nothing is measured.
func rawExchange(t *testing.T, address string, req []byte) []byte {
	t.Helper()
	conn, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(req); err != nil {
		return nil // the replica closed first: fine, as long as it lives on
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the replica did not finish answering %q", req)
	}
	return b
}

const echoScript = `
def init():
    pass
def run(raw_data):
    return len(raw_data)
`

// TestMalformedRequests: requests a client should not send get a 4xx and
// leave the replica serving.
func TestMalformedRequests(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, echoScript, func(r *Replica) { r.MaxRequestBytes = 100 })
	addr := rep.ready(t).Address
	for _, tc := range []struct{ name, req, status string }{
		{"bad chunk size", "POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", " 400 "},
		{"negative chunk size", "POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nabc\r\n0\r\n\r\n", " 400 "},
		{"huge chunk size", "POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\nabc\r\n", " 413 "},
		{"chunked body cut short", "POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc", " 400 "},
		{"body cut short", "POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nabc", " 400 "},
		{"length not a number", "POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", " 400 "},
		{"declared too large with Expect", "POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\nExpect: 100-continue\r\n\r\n", " 413 "},
		{"chunked, two good chunks", "POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: t\r\n\r\n", " 200 "},
	} {
		got := rawExchange(t, addr, []byte(tc.req))
		if first, _, _ := bytes.Cut(got, []byte("\r\n")); !bytes.Contains(first, []byte(tc.status)) {
			t.Errorf("%s: answer %q, want%s", tc.name, got, tc.status)
		}
	}
	if code, body := get(t, URL(addr)+"/"); code != 200 {
		t.Errorf("GET / after the malformed requests: %d %s", code, body)
	}
}

// FuzzRequest: whatever bytes a client sends, the replica stays up and
// answers the next client.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST /score HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET /score?x=%zz HTTP/1.1\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\n\r\n",
		"\x00\xff garbage\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	python := requirePython(f)
	rep := startReplica(f, python, echoScript, func(r *Replica) { r.MaxRequestBytes = 1 << 16 })
	addr := rep.ready(f).Address
	client := &http.Client{Timeout: 30 * time.Second}
	f.Fuzz(func(t *testing.T, req []byte) {
		rawExchange(t, addr, req)
		resp, err := client.Post(URL(addr)+"/score", "text/plain", strings.NewReader("ok"))
		if err != nil {
			t.Fatalf("after %q: %v", req, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "2" {
			t.Fatalf("after %q: %d %s", req, resp.StatusCode, b)
		}
	})
}
