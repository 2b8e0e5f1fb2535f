// Package httplimit bounds what one client can hold of an HTTP server
// that anyone may reach: how long it may take to send its request's
// header and body, how big and how many header fields it may send, and
// how many connections it may hold, in all and from one address. Each
// limit is answered with its own status (408, 429, 431, 503), so a client
// learns which one it ran into, not a 502 from somewhere further in.
//
// `ferry server` puts one Limits in front of its listener, which serves
// the API, the studio and the online endpoints' gateway alike.
package httplimit

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// Limits are the bounds on one listener. A zero field means its default
// (Defaults); a negative one means no bound, where that is allowed.
type Limits struct {
	// HeaderTimeout is how long a request's header may take to arrive
	// (net/http's ReadHeaderTimeout).
	HeaderTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (net/http's
	// MaxHeaderBytes); over it, net/http answers 431.
	MaxHeaderBytes int
	// MaxHeaders bounds the header fields of a request (431 over it).
	MaxHeaders int
	// BodyGrace and BodyMinRate: a request's body must keep coming at
	// BodyMinRate bytes a second on average, with BodyGrace of slack (a
	// body that waits longer than that for its next bytes is cut off with
	// 408). Bytes sent early earn at most BodyGrace, so a client cannot
	// send a burst and then hold the connection.
	BodyGrace   time.Duration
	BodyMinRate int64
	// MaxConns bounds the connections open at once (503 over it);
	// MaxConnsPerAddr those from one client address (429 over it).
	MaxConns        int
	MaxConnsPerAddr int
}

// Defaults are the limits of a field left zero. The header and body
// bounds are those Envoy (60 KiB, 100 fields) and Apache's
// mod_reqtimeout (body=20,MinRate=500) are known for, with the rate at a
// round 1 KiB/s: a legitimate client on any link sends faster.
var Defaults = Limits{
	HeaderTimeout:   10 * time.Second,
	IdleTimeout:     2 * time.Minute,
	MaxHeaderBytes:  64 << 10,
	MaxHeaders:      100,
	BodyGrace:       20 * time.Second,
	BodyMinRate:     1 << 10,
	MaxConns:        4096,
	MaxConnsPerAddr: 512,
}

// WithDefaults is l with its zero fields set from Defaults.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defDur(&l.HeaderTimeout, Defaults.HeaderTimeout)
	defDur(&l.IdleTimeout, Defaults.IdleTimeout)
	defDur(&l.BodyGrace, Defaults.BodyGrace)
	def(&l.MaxHeaderBytes, Defaults.MaxHeaderBytes)
	def(&l.MaxHeaders, Defaults.MaxHeaders)
	def(&l.MaxConns, Defaults.MaxConns)
	def(&l.MaxConnsPerAddr, Defaults.MaxConnsPerAddr)
	if l.BodyMinRate == 0 {
		l.BodyMinRate = Defaults.BodyMinRate
	}
	return l
}

// Check says which field of l (after WithDefaults) cannot be used, naming
// the flag of `ferry server` that sets it.
func (l Limits) Check() error {
	switch {
	case l.HeaderTimeout < 0:
		return fmt.Errorf("--header-timeout must be positive (got %v)", l.HeaderTimeout)
	case l.IdleTimeout < 0:
		return fmt.Errorf("--idle-timeout must be positive (got %v)", l.IdleTimeout)
	case l.MaxHeaderBytes < 1024:
		return fmt.Errorf("--max-header-bytes must be at least 1KiB (got %d)", l.MaxHeaderBytes)
	case l.MaxHeaders < 1:
		return fmt.Errorf("--max-headers must be at least 1 (got %d)", l.MaxHeaders)
	case l.BodyGrace < 0:
		return fmt.Errorf("--body-grace must be positive (got %v)", l.BodyGrace)
	case l.BodyMinRate < 1:
		return fmt.Errorf("--body-min-rate must be at least 1 byte a second (got %d)", l.BodyMinRate)
	}
	return nil
}

// Server is an http.Server for handler with l's header, idle and body
// bounds (l after WithDefaults). Its listener's connections are bounded
// apart, by Listen.
func (l Limits) Server(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           l.Handler(handler),
		ReadHeaderTimeout: l.HeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// Handler answers 431 to a request with more than MaxHeaders header
// fields, and gives the others' bodies BodyGrace and BodyMinRate.
func (l Limits) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 0
		for _, vs := range r.Header {
			n += len(vs)
		}
		if n > l.MaxHeaders {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the request has %d header fields; the server takes at most %d", n, l.MaxHeaders))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			if b := newRateBody(w, r.Body, l.BodyGrace, l.BodyMinRate); b != nil {
				r.Body = b
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Listen bounds ln's connections by MaxConns and MaxConnsPerAddr.
func (l Limits) Listen(ln net.Listener) net.Listener {
	return newConnLimiter(ln, l.MaxConns, l.MaxConnsPerAddr)
}

// writeError answers with a limit's status and a JSON message, in the
// shape the gateway answers its own errors in.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, "{\"error\":{\"code\":%d,\"message\":%q}}\n", code, msg)
}
