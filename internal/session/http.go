package session

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Protocol is the HTTP Upgrade token of Ferry's session routes: a request
// carries `Connection: Upgrade` and `Upgrade: ferry-session`, and a 101
// Switching Protocols answer turns the connection into the session stream.
const Protocol = "ferry-session"

// AuthHeader is set on the server's 101 answer to the user's upgrade, with
// the value "publickey", when the instance asks the client for one of its
// ssh_settings.ssh_key_value keys.
const AuthHeader = "Ferry-Session-Auth"

// RefusedError is a server's answer other than 101 to an upgrade: its
// status and body (a problem document, usually) for the caller to report.
type RefusedError struct {
	Status int
	Body   []byte
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Body)
}

// DialHTTP asks url (GET, with token as bearer) to upgrade the connection
// to a session stream, and returns the stream and the 101's headers. ctx
// bounds the wait for the answer; once upgraded, the stream lives until it
// is closed. hc's transport is used for HTTP/1.1 only (an upgrade has no
// HTTP/2 form) and its Timeout does not apply.
func DialHTTP(ctx context.Context, hc *http.Client, url, token string) (net.Conn, http.Header, error) {
	// The request's context must outlive the call (the stream is its
	// response body), so ctx cancels only the call itself.
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	req, err := http.NewRequestWithContext(dctx, "GET", url, nil)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Protocol)
	resp, err := upgradeClient(hc).Do(req)
	if !stop() {
		// ctx ended during the call: whatever came back is unwanted.
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		return nil, nil, ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		defer cancel()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, nil, &RefusedError{Status: resp.StatusCode, Body: body}
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		cancel()
		return nil, nil, errors.New("the server switched protocols but gave no writable stream")
	}
	return StreamConn(rwc, cancel), resp.Header, nil
}

// upgradeClients caches the HTTP/1.1 copies of the clients DialHTTP is
// given, so that each session does not make a new transport.
var upgradeClients sync.Map // *http.Client -> *http.Client

func upgradeClient(hc *http.Client) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	if c, ok := upgradeClients.Load(hc); ok {
		return c.(*http.Client)
	}
	c := *hc
	c.Timeout = 0
	var t *http.Transport
	switch rt := hc.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = rt.Clone()
	}
	if t != nil {
		t.ForceAttemptHTTP2 = false
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		c.Transport = t
	}
	v, _ := upgradeClients.LoadOrStore(hc, &c)
	return v.(*http.Client)
}

// StreamConn makes a net.Conn of an upgraded HTTP stream, which may have
// no addresses or deadlines of its own; onClose (may be nil) runs once,
// when it is closed.
func StreamConn(rwc io.ReadWriteCloser, onClose func()) net.Conn {
	return &streamConn{rwc: rwc, onClose: onClose}
}

type streamConn struct {
	rwc     io.ReadWriteCloser
	onClose func()
	once    sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.rwc.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.rwc.Write(p) }

func (c *streamConn) Close() error {
	err := c.rwc.Close()
	c.once.Do(func() {
		if c.onClose != nil {
			c.onClose()
		}
	})
	return err
}

func (c *streamConn) LocalAddr() net.Addr  { return c.addr(true) }
func (c *streamConn) RemoteAddr() net.Addr { return c.addr(false) }

func (c *streamConn) addr(local bool) net.Addr {
	if nc, ok := c.rwc.(net.Conn); ok {
		if local {
			return nc.LocalAddr()
		}
		return nc.RemoteAddr()
	}
	return streamAddr{}
}

func (c *streamConn) SetDeadline(t time.Time) error {
	if nc, ok := c.rwc.(net.Conn); ok {
		return nc.SetDeadline(t)
	}
	return errors.ErrUnsupported
}

func (c *streamConn) SetReadDeadline(t time.Time) error {
	if nc, ok := c.rwc.(net.Conn); ok {
		return nc.SetReadDeadline(t)
	}
	return errors.ErrUnsupported
}

func (c *streamConn) SetWriteDeadline(t time.Time) error {
	if nc, ok := c.rwc.(net.Conn); ok {
		return nc.SetWriteDeadline(t)
	}
	return errors.ErrUnsupported
}

type streamAddr struct{}

func (streamAddr) Network() string { return Protocol }
func (streamAddr) String() string  { return Protocol }
