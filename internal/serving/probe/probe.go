// Package probe asks Ferry's inference server replicas whether they are
// live and ready over HTTP (GET /), as liveness and readiness probes do.
// It is apart from package inferenceserver so that what starts and
// watches replicas (status lines, command lines) needs no HTTP client:
// the workspace uses that part, and gets its probe from the server.
package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// SecretHeader is inferenceserver.SecretHeader, the header that carries a
// replica's secret. It is repeated here rather than imported: package
// inferenceserver's tests probe replicas with this package, which could
// then not import it (a test there checks that the two agree).
const SecretHeader = "X-Ferry-Replica-Secret"

// ErrExited is what WaitProbe returns, wrapped, when the launcher says
// the replica's process is gone before it answered.
var ErrExited = errors.New("inference server exited before it was ready")

// Probe asks a replica at baseURL whether it is live and ready (GET /),
// as a liveness or readiness probe does: nil for 200. secret is the
// replica's (inferenceserver.Replica.Secret), sent in the SecretHeader
// header as the gateway sends it: a replica
// that has one answers nothing else. Empty sends none.
func Probe(ctx context.Context, client *http.Client, baseURL, secret string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/", nil)
	if err != nil {
		return err
	}
	if secret != "" {
		req.Header.Set(SecretHeader, secret)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s: %s", baseURL, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// WaitProbe probes the replica at baseURL every interval until it answers
// 200, for a launcher that does not read the replica's stdout (one on
// another node, say). It returns ErrExited, wrapped, once exited is closed
// (the launcher closes it when the process is gone; nil if it cannot
// tell), or the context's error with the last probe's.
func WaitProbe(ctx context.Context, client *http.Client, baseURL, secret string, interval time.Duration, exited <-chan struct{}) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error // the last probe that ended on its own
	for {
		err := Probe(ctx, client, baseURL, secret)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be ready: %w (last probe: %v)", baseURL, ctx.Err(), last)
		case <-exited:
			return fmt.Errorf("%s: %w", baseURL, ErrExited)
		case <-tick.C:
		}
	}
}
