package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// serverError is an answer of the server that is not a success, with the
// server's problem document (title, detail, field errors) when it sent one.
type serverError struct {
	Method string `json:"-"`
	Path   string `json:"-"`
	Status int    `json:"-"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func (e *serverError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	msg := e.Detail
	if msg == "" {
		msg = e.Title
	}
	if msg != "" {
		b.WriteString(": " + msg)
	}
	for _, fe := range e.Errors {
		b.WriteString("; ")
		if fe.Field != "" {
			b.WriteString(fe.Field + ": ")
		}
		b.WriteString(fe.Message)
	}
	return b.String()
}

// statusOf is the HTTP status of a server's refusal, or 0 when the server
// did not answer (or answered with something that is not HTTP).
func statusOf(err error) int {
	var se *serverError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

// transient says whether a failed call is worth repeating: the server
// could not be reached, failed, or asked us to come back later.
func transient(err error) bool {
	s := statusOf(err)
	return s == 0 || s >= 500 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests
}

// forgotten says whether the server refused the node's own credential or
// no longer knows the node: it will not take it back by being asked again.
func forgotten(err error) bool {
	switch statusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// call sends in (if not nil) as JSON to the server with token as bearer and
// decodes the answer into out (if not nil). The token is only ever put in
// the Authorization header, so no error or log line can carry it.
func (a *agent) call(ctx context.Context, timeout time.Duration, method, path, token string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.server.Get()+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			// The server may have come back elsewhere: the next try goes
			// where its file says it is now.
			a.server.Reread()
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		se := &serverError{Method: method, Path: path, Status: resp.StatusCode}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(data, se) != nil || (se.Detail == "" && se.Title == "" && len(se.Errors) == 0) {
			se.Detail = strings.TrimSpace(string(data[:min(len(data), 512)]))
		}
		return se
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return nil
}

// backoff is a capped exponential wait between retries, with jitter so
// that the nodes of a cluster do not all come back at the same instant
// when the server does.
type backoff struct {
	cur, max time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = 100 * time.Millisecond
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }

// outage logs a run of failed calls as one warning when it starts and one
// line when it ends, rather than a line per retry.
type outage struct {
	what     string
	failures int
}

// failed notes a failed call, and returns ErrServerGone once the server
// has not answered for GiveUpAfter.
func (o *outage) failed(a *agent, err error) error {
	if silent := a.clock.Now().Sub(time.Unix(0, a.heard.Load())); silent > a.cfg.GiveUpAfter {
		a.log.Error("giving up: the server has not answered; exiting, runners keep going", "for", silent.Round(time.Second), "give_up_after", a.cfg.GiveUpAfter)
		return fmt.Errorf("%w (%s, --give-up-after %s): %w", ErrServerGone, silent.Round(time.Second), a.cfg.GiveUpAfter, err)
	}
	if o.failures == 0 {
		a.log.Warn("cannot reach the server; retrying, runners keep going", "call", o.what, "err", err)
	} else {
		a.log.Debug("server still unreachable", "call", o.what, "err", err)
	}
	o.failures++
	return nil
}

func (o *outage) ok(a *agent) {
	a.heard.Store(a.clock.Now().UnixNano())
	if o.failures > 0 {
		a.log.Info("server reachable again", "call", o.what, "failed_tries", o.failures)
	}
	o.failures = 0
}
