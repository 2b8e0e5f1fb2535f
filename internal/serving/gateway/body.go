package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/ferry-ml/ferry/internal/httplimit"
)

// buffers bounds the bytes of request bodies the gateway holds at once,
// in all and per client address. The gateway reads a body whole before
// it forwards it (a request refused by one replica is sent to another,
// and mirrored copies are sent from it), so without a bound, clients
// that each send most of a large body and hold the rest would hold the
// server's memory.
//
// A request's first smallBody bytes count only against its address's
// share, not the total: small bodies (most scoring requests) then never
// wait behind large ones held by other clients, and what they hold is
// bounded by the connections the server admits (Limits.MaxConns ×
// smallBody).
type buffers struct {
	total, perAddr int64

	mu     sync.Mutex
	used   int64
	byAddr map[string]int64
}

func newBuffers(total, perAddr int64) *buffers {
	return &buffers{total: total, perAddr: perAddr, byAddr: map[string]int64{}}
}

// smallBody is how much of each body counts only against its address.
const smallBody = 16 << 10

// take grows a body of addr's that holds held bytes to want, if both
// bounds allow it; else it says which bound is in the way, in words.
func (b *buffers) take(addr string, held, want int64) (refused string) {
	n, big := want-held, beyondSmall(want)-beyondSmall(held)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byAddr[addr]+n > b.perAddr {
		return fmt.Sprintf("%d bytes for one client address (--endpoint-max-buffered-per-addr)", b.perAddr)
	}
	if b.used+big > b.total {
		return fmt.Sprintf("%d bytes in all (--endpoint-max-buffered)", b.total)
	}
	b.used += big
	b.byAddr[addr] += n
	return ""
}

// give returns the held bytes of a body of addr's.
func (b *buffers) give(addr string, held int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= beyondSmall(held)
	if b.byAddr[addr] -= held; b.byAddr[addr] <= 0 {
		delete(b.byAddr, addr)
	}
}

func beyondSmall(n int64) int64 { return max(0, n-smallBody) }

// inUse is the bytes reserved, in all (beyond each body's first
// smallBody) and for addr (for tests).
func (b *buffers) inUse(addr string) (int64, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.byAddr[addr]
}

// firstRead is what a body is first read into (or its length, if it
// is less); it grows by doubling.
const firstRead = 4 << 10

// readBody reads r's body whole, reserving its bytes in g's buffers as
// they come (a client that says its body is large but sends little holds
// little). The release gives them back: once the request and its
// mirrored copies are done with the body.
func (g *Gateway) readBody(r *http.Request) (body []byte, release func(), herr *httpError) {
	limit := g.opt.MaxBody
	if r.ContentLength > limit {
		return nil, nil, fail(http.StatusRequestEntityTooLarge, "the request body is over %d bytes, the limit (it is %d)", limit, r.ContentLength)
	}
	addr := clientAddr(r)
	var held int64
	release = func() {
		if held > 0 {
			g.buffers.give(addr, held)
		}
	}
	// grow makes room for at least one more byte, doubling what is held
	// (up to the body's length where it is known, else up to the limit
	// and one byte, to see a body over it).
	grow := func() *httpError {
		want := max(int64(cap(body))*2, firstRead)
		if r.ContentLength >= 0 {
			want = min(want, r.ContentLength+1)
		}
		want = min(want, limit+1)
		if refused := g.buffers.take(addr, held, want); refused != "" {
			return fail(http.StatusTooManyRequests, "the gateway holds as many request bodies as it may, %s; try again", refused)
		}
		held = want
		nb := make([]byte, len(body), want)
		copy(nb, body)
		body = nb
		return nil
	}
	if r.ContentLength == 0 {
		return nil, release, nil
	}
	for {
		if len(body) == cap(body) {
			if err := grow(); err != nil {
				release()
				return nil, nil, err
			}
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if int64(len(body)) > limit {
			release()
			return nil, nil, fail(http.StatusRequestEntityTooLarge, "the request body is over %d bytes, the limit", limit)
		}
		if errors.Is(err, io.EOF) {
			return body, release, nil
		}
		if err != nil {
			release()
			if errors.Is(err, httplimit.ErrBodyTooSlow) {
				return nil, nil, fail(http.StatusRequestTimeout, "reading the request body: %v", err)
			}
			return nil, nil, fail(http.StatusBadRequest, "reading the request body: %v", err)
		}
	}
}

// clientAddr is the address a request came from, without its port: the
// bytes one client may hold are counted by it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// hold counts the users of a body read by readBody (the request and its
// mirrored copies, which may outlive it), and releases its bytes when the
// last is done.
type hold struct {
	users   atomic.Int32
	release func()
}

func newHold(release func()) *hold {
	h := &hold{release: release}
	h.users.Store(1)
	return h
}

func (h *hold) add() { h.users.Add(1) }

func (h *hold) done() {
	if h.users.Add(-1) == 0 {
		h.release()
	}
}
