package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/serving/gateway"
	"github.com/ferry-ml/ferry/internal/serving/probe"
	"github.com/ferry-ml/ferry/internal/unixsock"
	"github.com/ferry-ml/ferry/internal/workload/online"
)

// gatewayRouter feeds the online endpoints to the gateway that
// serves them on the server's listener (/endpoints/NAME/score). The
// gateway runs in the server, next to the API that owns its state: one
// process to run, and no snapshot to push to another one (see the
// gateway's package doc).
type gatewayRouter struct{ g *gateway.Gateway }

var _ online.EndpointRouter = gatewayRouter{}

// SetEndpoint routes e and its deployments' ready replicas.
func (r gatewayRouter) SetEndpoint(e online.RoutedEndpoint) {
	keys := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		keys[i] = k.Reveal()
	}
	deps := map[string]gateway.Deployment{}
	for name, d := range e.Deployments {
		var replicaSecrets map[string]string
		for url, secret := range d.Secrets {
			if replicaSecrets == nil {
				replicaSecrets = map[string]string{}
			}
			replicaSecrets[url] = secret.Reveal()
		}
		deps[name] = gateway.Deployment{Name: name, Replicas: d.Replicas, Workers: d.Workers, Secrets: replicaSecrets,
			RequestTimeout: d.RequestTimeout, MaxConcurrent: d.MaxConcurrent, MaxQueueWait: d.MaxQueueWait}
	}
	r.g.Set(gateway.Endpoint{Name: e.Name, AuthMode: e.AuthMode, Keys: keys, Traffic: e.Traffic, Mirror: e.Mirror, Deployments: deps})
}

// Load is the gateway's traffic of an endpoint's deployments.
func (r gatewayRouter) Load(endpoint string) map[string]online.DeploymentLoad {
	out := map[string]online.DeploymentLoad{}
	for name, l := range r.g.Load(endpoint) {
		out[name] = online.DeploymentLoad{InFlight: l.InFlight, Waiting: l.Waiting, PerReplica: l.PerReplica,
			LastRequest: l.LastRequest, Requests: l.Requests, Errors: l.Errors, P50: l.P50, P99: l.P99}
	}
	return out
}

// RemoveEndpoint stops routing an endpoint.
func (r gatewayRouter) RemoveEndpoint(name string) { r.g.Remove(name) }

// replicaProber is the deployment controller's probe: GET / on a
// replica, on connections of its own (a probe must not wait behind
// scoring requests, nor keep connections to replicas that go away).
//
// A replica on this host is probed on its Unix socket (unix:/PATH), the
// way the gateway reaches it, and every probe carries the replica's
// secret, as the gateway's requests do.
func replicaProber() func(ctx context.Context, baseURL string, secret secrets.Secret) error {
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	return func(ctx context.Context, baseURL string, secret secrets.Secret) error {
		path, ok := strings.CutPrefix(baseURL, "unix:")
		if !ok {
			return probe.Probe(ctx, client, baseURL, secret.Reveal())
		}
		// A client for the one connection: a socket's path is no URL
		// host, so its transport dials the path whatever the URL names.
		var dialer net.Dialer
		unixClient := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return unixsock.Dial(ctx, &dialer, path)
			}}}
		if err := probe.Probe(ctx, unixClient, "http://localhost", secret.Reveal()); err != nil {
			return fmt.Errorf("%s: %w", baseURL, err)
		}
		return nil
	}
}
