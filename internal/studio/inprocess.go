package studio

import (
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/ferry-ml/ferry/internal/auth"
)

// handlerTransport is an http.RoundTripper that serves each request with
// an http.Handler in this process: the studio's client reaches the REST
// API through the very handlers (and token checks) a request over the
// network meets, without a socket. The response streams: its header goes
// back at the handler's first write or flush, and its body is a pipe the
// handler writes into, so a followed log arrives line by line.
//
// With tokenHash, each request acts as the token of that hash, carried in
// its context (auth.WithTokenHash): a session keeps no token to send.
type handlerTransport struct {
	h         http.Handler
	tokenHash string
}

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if t.tokenHash != "" {
		ctx = auth.WithTokenHash(ctx, t.tokenHash)
	}
	in := req.Clone(ctx)
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "studio"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				w.fail(fmt.Errorf("the API handler panicked: %v", v))
				return
			}
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing answered 200
			pw.Close()
		}()
		t.h.ServeHTTP(w, in)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	if w.err != nil {
		return nil, w.err
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req,
	}, nil
}

// pipeResponse is the http.ResponseWriter of handlerTransport.
type pipeResponse struct {
	header http.Header
	body   *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
	sent   http.Header // the header as it was when the status was written
	err    error
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush sends the header if it has not gone yet; written bytes are in the
// pipe already (a write returns once the reader has them).
func (w *pipeResponse) Flush() { w.WriteHeader(http.StatusOK) }

func (w *pipeResponse) fail(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.ready)
	})
	w.body.CloseWithError(err)
}
