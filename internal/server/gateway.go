package server

import (
	"github.com/ferry-ml/ferry/internal/serving/gateway"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// gatewayRouter feeds the workspace's endpoints to the gateway that
// serves them on the server's listener (/endpoints/NAME/score). The
// gateway runs in the server, next to the API that owns its state: one
// process to run, and no snapshot to push to another one (see the
// gateway's package doc).
type gatewayRouter struct{ g *gateway.Gateway }

var _ workspace.EndpointRouter = gatewayRouter{}

// SetEndpoint routes e. The deployments come with online deployments;
// until then the gateway answers each request with its 503 that says no
// deployment takes traffic.
func (r gatewayRouter) SetEndpoint(e workspace.RoutedEndpoint) {
	keys := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		keys[i] = k.Reveal()
	}
	r.g.Set(gateway.Endpoint{Name: e.Name, AuthMode: e.AuthMode, Keys: keys, Traffic: e.Traffic, Mirror: e.Mirror})
}

// RemoveEndpoint stops routing an endpoint.
func (r gatewayRouter) RemoveEndpoint(name string) { r.g.Remove(name) }
