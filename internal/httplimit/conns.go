package httplimit

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// connLimiter is a listener that counts its open connections, in all and
// by client address, and turns away one over either bound with an HTTP
// answer of its own: 503 over the total, 429 over the address's share.
//
// netutil.LimitListener bounds only the total, and by not accepting: the
// connections over it wait in the kernel's queue, a well-behaved
// client's among them, until some attacker's go. Turning them away at
// once keeps Accept free for the rest, and the per-address bound keeps
// one client from taking the whole total.
type connLimiter struct {
	net.Listener
	max, perAddr int // ≤ 0: no bound

	mu     sync.Mutex
	open   int
	byAddr map[netip.Addr]int

	// lingering counts the turned-away connections still being closed
	// gently (their answer sent, the client's request drained), which
	// is bounded: past it they are closed at once.
	lingering atomic.Int32
}

// maxLingering bounds the turned-away connections drained at once, and
// lingerFor how long each is.
const (
	maxLingering = 64
	lingerFor    = time.Second
)

func newConnLimiter(ln net.Listener, max, perAddr int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perAddr: perAddr, byAddr: map[netip.Addr]int{}}
}

// Accept returns the next connection within the bounds; those over them
// are answered and closed here.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := addrOf(c.RemoteAddr())
		l.mu.Lock()
		switch {
		case l.max > 0 && l.open >= l.max:
			l.mu.Unlock()
			l.turnAway(c, 503, "Service Unavailable", fmt.Sprintf("the server has %d connections open, its limit (--max-conns); try again", l.max))
		case l.perAddr > 0 && l.byAddr[addr] >= l.perAddr:
			l.mu.Unlock()
			l.turnAway(c, 429, "Too Many Requests", fmt.Sprintf("%s has %d connections open to the server, the limit for one address (--max-conns-per-addr); close some or try again", addr, l.perAddr))
		default:
			l.open++
			l.byAddr[addr]++
			l.mu.Unlock()
			return &countedConn{Conn: c, l: l, addr: addr}, nil
		}
	}
}

// release counts a connection of addr closed.
func (l *connLimiter) release(addr netip.Addr) {
	l.mu.Lock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
	l.mu.Unlock()
}

// counts returns the open connections, in all and of addr (for tests).
func (l *connLimiter) counts(addr netip.Addr) (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.byAddr[addr]
}

// turnAway answers c with code and closes it. The close is gentle where
// it can be: the write side first, then what the client sent is read
// and dropped for a moment, since closing a socket with unread bytes
// resets it and the client may then never read the answer.
func (l *connLimiter) turnAway(c net.Conn, code int, status, msg string) {
	body := fmt.Sprintf("{\"error\":{\"code\":%d,\"message\":%q}}\n", code, msg)
	_ = c.SetWriteDeadline(time.Now().Add(lingerFor))
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s", code, status, len(body), body)
	cw, ok := c.(interface{ CloseWrite() error })
	if err != nil || !ok {
		c.Close()
		return
	}
	if l.lingering.Add(1) > maxLingering {
		l.lingering.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.lingering.Add(-1)
		defer c.Close()
		_ = cw.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(lingerFor))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// addrOf is the client address of a connection; the zero Addr for one
// that has none (a Unix socket's), which then share one count.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// countedConn is a connection counted until it is closed.
type countedConn struct {
	net.Conn
	l    *connLimiter
	addr netip.Addr
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// CloseWrite and ReadFrom pass on what net/http looks for on a
// connection: the half-close of its gentle close, and sendfile for files
// it serves.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *countedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
