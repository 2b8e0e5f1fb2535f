package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/ferry-ml/ferry/internal/session"
)

// SessionConn is the stream of a session with a compute instance's agent,
// which speaks SSH (package session).
type SessionConn struct {
	net.Conn
	// KeyRequired says the instance asks for one of the keys of its
	// ssh_settings.ssh_key_value.
	KeyRequired bool
}

// DialSession opens a session of kind (exec, shell or forward) with the
// compute instance named compute. It returns once the instance's agent has
// connected; a refusal (a stopped instance, an agent that does not
// answer) is an *APIError that says what to do.
func (c *Client) DialSession(ctx context.Context, compute, kind string) (*SessionConn, error) {
	path := "/v1/computes/" + url.PathEscape(compute) + "/session?kind=" + url.QueryEscape(kind)
	base := c.base.Get()
	conn, hdr, err := session.DialHTTP(ctx, c.http, base+path, c.token)
	var re *session.RefusedError
	switch {
	case errors.As(err, &re):
		ae := &APIError{}
		if json.Unmarshal(re.Body, &ae.Problem) != nil || ae.Detail == "" {
			ae.Problem = apitypes.Problem{Status: re.Status, Title: http.StatusText(re.Status),
				Detail: fmt.Sprintf("GET %s: %d %s: %s", path, re.Status, http.StatusText(re.Status), strings.TrimSpace(string(re.Body)))}
		}
		ae.Status = re.Status
		return nil, ae
	case err != nil && ctx.Err() == nil:
		return nil, fmt.Errorf("cannot reach the Ferry workspace at %s: %w", base, err)
	case err != nil:
		return nil, err
	}
	return &SessionConn{Conn: conn, KeyRequired: hdr.Get(session.AuthHeader) == "publickey"}, nil
}
