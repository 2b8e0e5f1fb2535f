package httplimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// ErrBodyTooSlow is the error of a body read that a client sent too
// slowly (Limits.BodyGrace, BodyMinRate). A handler that meets it
// answers 408.
var ErrBodyTooSlow = errors.New("the request body came too slowly")

// rateBody is a request body that must keep coming: the connection's
// read deadline is moved on before each read, to when the body's credit
// runs out. The credit starts at grace, drains with time and grows by a
// second for each minRate bytes read, up to grace again.
//
// net/http puts no deadline on a body's reads (ReadTimeout would bound
// the whole request, a 1 GiB snapshot's upload included); this one bounds
// what matters, a client that holds a connection without sending.
type rateBody struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	grace   time.Duration
	minRate int64

	credit time.Duration
	last   time.Time // when credit was worked out
	set    time.Time // the read deadline set last
	done   bool      // the body ended or failed: no deadline any more
}

// newRateBody is body under grace and minRate; nil where the connection's
// read deadline cannot be set (the body is then read as it is).
func newRateBody(w http.ResponseWriter, body io.ReadCloser, grace time.Duration, minRate int64) *rateBody {
	b := &rateBody{body: body, rc: http.NewResponseController(w), grace: grace, minRate: minRate, credit: grace, last: time.Now()}
	if err := b.rc.SetReadDeadline(b.last.Add(grace)); err != nil {
		return nil
	}
	b.set = b.last.Add(grace)
	return b
}

func (b *rateBody) Read(p []byte) (int, error) {
	if b.done {
		return b.body.Read(p)
	}
	if d := b.last.Add(b.credit); !d.Equal(b.set) {
		_ = b.rc.SetReadDeadline(d)
		b.set = d
	}
	n, err := b.body.Read(p)
	now := time.Now()
	b.credit = min(b.grace, b.credit-now.Sub(b.last)+time.Duration(int64(n)*int64(time.Second)/b.minRate))
	b.last = now
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done = true
		return n, fmt.Errorf("%w: less than %d bytes a second after a grace of %v", ErrBodyTooSlow, b.minRate, b.grace)
	default:
		// The end of the body (or of the connection): net/http reads on
		// after it, for the client going away and for the next request,
		// and a deadline left set would cut those reads off.
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
		return n, err
	}
}

func (b *rateBody) Close() error { return b.body.Close() }
