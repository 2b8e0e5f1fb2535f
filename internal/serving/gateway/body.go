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

// A body is read into chunks: the first of firstRead bytes (or its
// length, if it is less), each next one twice the last, up to maxChunk.
// Chunks are never copied into larger ones as the body grows, so the
// memory a body takes is its bytes, with no trail of outgrown buffers
// left to the garbage collector.
const (
	firstRead = 4 << 10
	maxChunk  = 1 << 20
)

// readBody reads r's body whole, reserving its bytes in g's buffers as
// they come (a client that says its body is large but sends little holds
// little). The release gives them back: once the request and its
// mirrored copies are done with the body.
func (g *Gateway) readBody(r *http.Request) (body [][]byte, release func(), herr *httpError) {
	limit := g.opt.MaxBody
	if r.ContentLength > limit {
		return nil, nil, fail(http.StatusRequestEntityTooLarge, "the request body is over %d bytes, the limit (it is %d)", limit, r.ContentLength)
	}
	addr := clientAddr(r)
	var held, read int64
	release = func() {
		if held > 0 {
			g.buffers.give(addr, held)
		}
	}
	if r.ContentLength == 0 {
		return nil, release, nil
	}
	var cur []byte // the last chunk, being filled
	for {
		if len(cur) == cap(cur) {
			// Room for the rest of a body of known length (net/http
			// ends it there), else for the limit and one byte, to see a
			// body over it.
			size := int64(firstRead)
			if cur != nil {
				size = min(2*int64(cap(cur)), maxChunk)
			}
			if r.ContentLength >= 0 {
				size = min(size, r.ContentLength-read)
			}
			size = min(size, limit+1-read)
			if size == 0 {
				// All of a body of known length is in (net/http most
				// often says so with its last bytes): this read only
				// sees its end.
				size = 1
			}
			if refused := g.buffers.take(addr, held, held+size); refused != "" {
				release()
				return nil, nil, fail(http.StatusTooManyRequests, "the gateway holds as many request bodies as it may, %s; try again", refused)
			}
			held += size
			if len(cur) > 0 {
				body = append(body, cur)
			}
			cur = make([]byte, 0, size)
		}
		n, err := r.Body.Read(cur[len(cur):cap(cur)])
		cur = cur[:len(cur)+n]
		read += int64(n)
		if read > limit {
			release()
			return nil, nil, fail(http.StatusRequestEntityTooLarge, "the request body is over %d bytes, the limit", limit)
		}
		if errors.Is(err, io.EOF) {
			if len(cur) > 0 {
				body = append(body, cur)
			}
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

// bodyLen is the bytes of a body read into chunks.
func bodyLen(body [][]byte) int64 {
	var n int64
	for _, c := range body {
		n += int64(len(c))
	}
	return n
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
