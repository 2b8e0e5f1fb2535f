package gateway

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/unixsock"
)

// upstream is the gateway's HTTP/1.1 client to replicas: a pool of
// keep-alive connections per replica address, and one exchange (request
// out, answer in) done by the calling goroutine itself.
//
// Why not net/http's Transport: with it, every request passes between
// three goroutines (the handler, the connection's write loop, which sends
// it, and its read loop, which reads the answer and hands it over), and
// each hand-off is a wake-up through the scheduler. Where the gateway
// shares the CPUs with the replicas (a replica on the gateway's host, as
// bench/endpoint measures it), those wake-ups were a visible part of what
// the hop costs and came out of the replicas' time. The requests a
// gateway sends are of one simple shape (a body read whole, an answer
// streamed back), which is all this client does.
type upstream struct {
	dialer      net.Dialer
	maxIdle     int           // idle connections kept per address
	idleTimeout time.Duration // an idle connection older than this is closed

	mu    sync.Mutex
	idle  map[string][]*upConn // by address, the most recently used last
	sweep *time.Timer          // set while idle connections exist
}

func newUpstream() *upstream {
	return &upstream{
		dialer:      net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle:     256,
		idleTimeout: 90 * time.Second,
		idle:        map[string][]*upConn{},
	}
}

// upConn is one connection to a replica.
type upConn struct {
	net.Conn
	addr   string
	br     *bufio.Reader
	bw     *bufio.Writer
	unix   bool      // to a Unix socket
	reused bool      // it answered a request before
	since  time.Time // idle since
}

// upResponse is a replica's answer; its Body must be closed, which gives
// the connection back to the pool when the answer was read whole.
type upResponse struct {
	StatusCode    int
	Header        http.Header
	ContentLength int64 // -1 when unknown (chunked, or up to the end of the connection)
	Body          *upBody
}

// upBody reads an answer's body from its connection.
type upBody struct {
	u    *upstream
	c    *upConn
	r    io.Reader // the body as net/http decodes it (length or chunks)
	keep bool      // the connection may answer another request once r ends
	stop func() bool
	eof  bool
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close ends the exchange: the connection goes back to the pool when its
// answer was read to the end and nothing cut it off, else it is closed
// (an answer left unread is not drained: a stream may never end).
func (b *upBody) Close() error {
	stopped := b.stop()
	if b.eof && b.keep && stopped {
		b.u.put(b.c)
		return nil
	}
	return b.c.Close()
}

// errBadReplica is a replica address the gateway cannot reach.
var errBadReplica = errors.New("replica URL is not http://HOST:PORT or unix:/PATH")

// splitReplica reads a replica's base URL (http://host:port, maybe with a
// path, or unix:/path/of/its.sock) into the address to dial and the path
// of its scoring route.
func splitReplica(replica string) (addr, path string, err error) {
	if sock, ok := strings.CutPrefix(replica, "unix:"); ok {
		if !strings.HasPrefix(sock, "/") {
			return "", "", fmt.Errorf("%w: %q", errBadReplica, replica)
		}
		return sock, "/score", nil
	}
	rest, ok := strings.CutPrefix(replica, "http://")
	if !ok || rest == "" {
		return "", "", fmt.Errorf("%w: %q", errBadReplica, replica)
	}
	addr, prefix, _ := strings.Cut(rest, "/")
	if addr == "" {
		return "", "", fmt.Errorf("%w: %q", errBadReplica, replica)
	}
	if prefix == "" {
		return addr, "/score", nil
	}
	return addr, "/" + strings.TrimSuffix(prefix, "/") + "/score", nil
}

// do sends method PATH?query with hdr (less the headers that stay at the
// gateway), the replica's secret (when not empty) and body to replica,
// and returns its answer once its header is in. ctx bounds the whole exchange, the body's reading included: when it
// ends, the connection is cut off.
//
// A connection used before that the replica closed while it was idle
// (its answer's first byte never came) is not an answer: the request is
// sent once more, to the same replica on a new connection. A replica
// closes only connections that wait for a request, so it had not seen
// this one. If that replica cannot be reached any more, it may have died
// with the request under way: the first error is the answer, not a
// refused connection, so the request is not run again on another replica.
func (u *upstream) do(ctx context.Context, replica, secret, method, query string, hdr http.Header, body [][]byte) (*upResponse, error) {
	addr, path, err := splitReplica(replica)
	if err != nil {
		return nil, err
	}
	var first error
	for attempt := 0; ; attempt++ {
		c, err := u.get(ctx, addr, attempt > 0)
		if err != nil {
			if first != nil {
				return nil, first
			}
			return nil, err
		}
		host := addr
		if c.unix {
			host = "localhost" // a Unix socket's path is no Host
		}
		resp, retry, err := u.exchange(ctx, c, host, path, secret, method, query, hdr, body)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if !retry || attempt > 0 || ctx.Err() != nil {
			return nil, cmp.Or(first, err)
		}
		first = err
	}
}

// aLongTimeAgo, as a connection's deadline, makes its reads and writes
// under way fail at once.
var aLongTimeAgo = time.Unix(1, 0)

func (u *upstream) exchange(ctx context.Context, c *upConn, host, path, secret, method, query string, hdr http.Header, body [][]byte) (resp *upResponse, retry bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
	defer func() {
		if err != nil {
			stop()
		}
	}()
	writeRequest(c.bw, host, path, secret, method, query, hdr, body)
	if err := c.bw.Flush(); err != nil {
		return nil, c.reused, err
	}
	var hr *http.Response
	for {
		// Nothing of an answer at all, on a connection used before: the
		// replica had closed it.
		if _, err := c.br.Peek(1); err != nil {
			return nil, c.reused, err
		}
		hr, err = http.ReadResponse(c.br, &http.Request{Method: method})
		if err != nil {
			return nil, false, err
		}
		// 1xx answers (a 100 Continue) come before the real one.
		if hr.StatusCode >= 200 || hr.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	cl := hr.ContentLength
	if hr.Header.Get("Transfer-Encoding") != "" || len(hr.TransferEncoding) > 0 {
		cl = -1
	}
	return &upResponse{
		StatusCode: hr.StatusCode, Header: hr.Header, ContentLength: cl,
		Body: &upBody{u: u, c: c, r: hr.Body, keep: !hr.Close && hr.StatusCode != http.StatusSwitchingProtocols, stop: stop},
	}, false, nil
}

// writeRequest writes a request with a body of known length, and the
// replica's secret when it has one; hdr's values were checked by the
// server that read them.
func writeRequest(w *bufio.Writer, host, path, secret, method, query string, hdr http.Header, body [][]byte) {
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(path)
	if query != "" {
		w.WriteByte('?')
		w.WriteString(query)
	}
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	if secret != "" {
		w.WriteString(inferenceserver.SecretHeader)
		w.WriteString(": ")
		w.WriteString(secret)
		w.WriteString("\r\n")
	}
	for k, vs := range hdr {
		if !forwarded(k) {
			continue
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	w.WriteString("Content-Length: ")
	var num [20]byte
	w.Write(strconv.AppendInt(num[:0], bodyLen(body), 10))
	w.WriteString("\r\n\r\n")
	for _, c := range body {
		w.Write(c)
	}
}

// forwarded says whether a request header goes on to the replica: not
// the endpoint's key (it stays at the gateway), not those of one hop, not
// Host (the replica's own is sent), not Expect (the body is here whole
// already), and not a replica secret of the client's (the gateway sends
// the replica's own, and a client's must not stand in for it where the
// replica has none).
func forwarded(k string) bool {
	switch k {
	case "Authorization", "Host", "Expect", inferenceserver.SecretHeader:
		return false
	}
	return !hopByHop(k)
}

// get returns an idle connection to addr that the replica has not closed,
// or dials one (always, when fresh).
func (u *upstream) get(ctx context.Context, addr string, fresh bool) (*upConn, error) {
	if !fresh {
		for {
			u.mu.Lock()
			list := u.idle[addr]
			if len(list) == 0 {
				u.mu.Unlock()
				break
			}
			c := list[len(list)-1]
			list[len(list)-1] = nil
			u.idle[addr] = list[:len(list)-1]
			if len(list) == 1 {
				delete(u.idle, addr)
			}
			u.mu.Unlock()
			if time.Since(c.since) < u.idleTimeout && c.br.Buffered() == 0 && peerOpen(c.Conn) {
				return c, nil
			}
			c.Close()
		}
	}
	network := "tcp"
	if strings.HasPrefix(addr, "/") {
		network = "unix" // a replica on this host, at its Unix socket
	}
	var nc net.Conn
	var err error
	if network == "unix" {
		nc, err = unixsock.Dial(ctx, &u.dialer, addr)
	} else {
		nc, err = u.dialer.DialContext(ctx, network, addr)
	}
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return &upConn{Conn: nc, addr: addr, unix: network == "unix", br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 16<<10)}, nil
}

// put keeps c for the next request to its address.
func (u *upstream) put(c *upConn) {
	if err := c.SetDeadline(time.Time{}); err != nil {
		c.Close()
		return
	}
	c.reused = true
	c.since = time.Now()
	u.mu.Lock()
	if len(u.idle[c.addr]) >= u.maxIdle {
		u.mu.Unlock()
		c.Close()
		return
	}
	u.idle[c.addr] = append(u.idle[c.addr], c)
	if u.sweep == nil {
		u.sweep = time.AfterFunc(u.idleTimeout, u.closeIdle)
	}
	u.mu.Unlock()
}

// closeIdle closes the connections idle longer than idleTimeout (those to
// replicas no longer routed among them), and comes again while any are
// left.
func (u *upstream) closeIdle() {
	var old []*upConn
	u.mu.Lock()
	cutoff := time.Now().Add(-u.idleTimeout)
	for addr, list := range u.idle {
		keep := list[:0]
		for _, c := range list {
			if c.since.Before(cutoff) {
				old = append(old, c)
			} else {
				keep = append(keep, c)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(u.idle, addr)
		} else {
			u.idle[addr] = keep
		}
	}
	u.sweep = nil
	if len(u.idle) > 0 {
		u.sweep = time.AfterFunc(u.idleTimeout, u.closeIdle)
	}
	u.mu.Unlock()
	for _, c := range old {
		c.Close()
	}
}

// idleCount is how many idle connections the pool holds (for tests).
func (u *upstream) idleCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, list := range u.idle {
		n += len(list)
	}
	return n
}
