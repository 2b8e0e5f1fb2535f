package api

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/serving/gateway"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/workload/online"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// endpointRouter is the server's adapter, repeated here: the api package
// cannot import the server.
type endpointRouter struct{ g *gateway.Gateway }

func (r endpointRouter) SetEndpoint(e online.RoutedEndpoint) {
	var keys []string
	for _, k := range e.Keys {
		keys = append(keys, k.Reveal())
	}
	r.g.Set(gateway.Endpoint{Name: e.Name, AuthMode: e.AuthMode, Keys: keys, Traffic: e.Traffic, Mirror: e.Mirror})
}
func (r endpointRouter) RemoveEndpoint(name string) { r.g.Remove(name) }
func (r endpointRouter) Load(endpoint string) map[string]online.DeploymentLoad {
	out := map[string]online.DeploymentLoad{}
	for name, l := range r.g.Load(endpoint) {
		out[name] = online.DeploymentLoad{InFlight: l.InFlight, Requests: l.Requests, Errors: l.Errors}
	}
	return out
}

// Online endpoints take the owner's token on every route, as models do:
// a run token and no token are refused. Scoring takes no workspace token
// at all but the endpoint's key, and the metrics page the owner's token.
func TestEndpointRoutesAreForOwners(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := secrets.LoadOrCreateKey(filepath.Join(dir, "workspace.key"))
	if err != nil {
		t.Fatal(err)
	}
	gw := gateway.New(gateway.Options{})
	ws, err := workspace.New(context.Background(), workspace.Config{
		Store: st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://unused",
		Targets: func(*spec.Compute) (compute.Target, error) { return noTarget{}, nil },
		Secrets: key,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eps, err := online.New(ctx, ws, st, online.Config{Secrets: key, Router: endpointRouter{gw}})
	if err != nil {
		t.Fatal(err)
	}
	online.Register(ws, eps)
	owner, run := "fry_owner", "fry_run"
	for _, tok := range []store.Token{
		{Hash: auth.Hash(owner), Kind: auth.KindOwner, Subject: "owner", Created: time.Now()},
		{Hash: auth.Hash(run), Kind: auth.KindRun, Subject: "some-job", Attempt: 1, Created: time.Now()},
	} {
		if err := st.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	api := New(ws, Workloads{Online: eps}, st, slog.New(slog.DiscardHandler))
	api.MountGateway(gw, gw.Metrics())
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	var created apitypes.OnlineEndpoint
	if code := call(t, srv, "POST", "/v1/online-endpoints", owner, strings.NewReader(`{"name": "iris-ep"}`), nil, &created); code != 200 || created.ScoringURI != "http://unused/endpoints/iris-ep/score" {
		t.Fatalf("owner creates: %d %+v", code, created)
	}
	for _, r := range [][2]string{
		{"GET", "/v1/online-endpoints"},
		{"POST", "/v1/online-endpoints"},
		{"GET", "/v1/online-endpoints/iris-ep"},
		{"PATCH", "/v1/online-endpoints/iris-ep"},
		{"DELETE", "/v1/online-endpoints/iris-ep"},
		{"POST", "/v1/online-endpoints/iris-ep/list-keys"},
		{"POST", "/v1/online-endpoints/iris-ep/regenerate-keys"},
		{"GET", "/metrics/endpoints"},
		{"GET", "/v1/online-endpoints/iris-ep/deployments"},
		{"POST", "/v1/online-endpoints/iris-ep/deployments"},
		{"GET", "/v1/online-endpoints/iris-ep/deployments/blue"},
		{"PUT", "/v1/online-endpoints/iris-ep/deployments/blue"},
		{"DELETE", "/v1/online-endpoints/iris-ep/deployments/blue"},
		{"GET", "/v1/online-endpoints/iris-ep/deployments/blue/logs"},
	} {
		if code := call(t, srv, r[0], r[1], run, strings.NewReader(`{}`), nil, nil); code != 403 {
			t.Errorf("%s %s with a run token: %d, want 403", r[0], r[1], code)
		}
		if code := call(t, srv, r[0], r[1], "", strings.NewReader(`{}`), nil, nil); code != 401 {
			t.Errorf("%s %s with no token: %d, want 401", r[0], r[1], code)
		}
	}
	var p apitypes.Problem
	if code := call(t, srv, "POST", "/v1/online-endpoints", owner, strings.NewReader(`{"name": "x"}`), nil, &p); code != 400 || len(p.Errors) != 1 || p.Errors[0].Field != "name" {
		t.Errorf("a bad name: %d %+v; want 400 naming the field name", code, p)
	}
	if code := call(t, srv, "PATCH", "/v1/online-endpoints/iris-ep", owner, strings.NewReader(`{"traffic": {"blue": 100}}`), nil, &p); code != 400 || !strings.Contains(p.Detail, "deployments come first") {
		t.Errorf("traffic to no deployment: %d %+v", code, p)
	}

	// The endpoint in the path is the deployment's: a spec that names
	// another is refused naming both, and one that names none gets the
	// path's (so that the refusal is the next check's, the code not
	// uploaded).
	dep := func(endpoint, name string) string {
		return `{"spec": {"name": "` + name + `", "endpoint_name": "` + endpoint + `", "code_configuration": {"code": "src", "scoring_script": "score.py"}}, "uploads": {"code_snapshot": ""}}`
	}
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/v1/online-endpoints/iris-ep/deployments", dep("other-ep", "blue"), "spec.endpoint_name: the path names endpoint iris-ep, the spec other-ep"},
		{"PUT", "/v1/online-endpoints/iris-ep/deployments/blue", dep("other-ep", "blue"), "spec.endpoint_name: the path names endpoint iris-ep, the spec other-ep"},
		{"PUT", "/v1/online-endpoints/iris-ep/deployments/blue", dep("iris-ep", "green"), "spec.name: the path names deployment blue, the spec green"},
		{"POST", "/v1/online-endpoints/iris-ep/deployments", dep("", "blue"), "code_configuration.code"},
		{"POST", "/v1/online-endpoints/iris-ep/deployments", `{"spec": {"name": "blue", "endpoint_name": "iris-ep"}, "uploads": {}}`, "code_configuration"},
		{"PUT", "/v1/online-endpoints/iris-ep/deployments/blue", `{"spec": {}, "uploads": {}, "local": true}`, "local:"},
		{"GET", "/v1/online-endpoints/iris-ep/deployments/blue/logs?lines=x", "", "lines:"},
	} {
		p = apitypes.Problem{}
		if code := call(t, srv, c.method, c.path, owner, strings.NewReader(c.body), nil, &p); code != 400 || !strings.Contains(p.Detail, c.want) {
			t.Errorf("%s %s %s: %d %q, want 400 saying %q", c.method, c.path, c.body, code, p.Detail, c.want)
		}
	}
	p = apitypes.Problem{}
	if code := call(t, srv, "GET", "/v1/online-endpoints/iris-ep/deployments/blue", owner, nil, nil, &p); code != 404 || !strings.Contains(p.Detail, "no deployment blue") {
		t.Errorf("an unknown deployment: %d %q, want 404", code, p.Detail)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name string } `json:"parameters"`
		} `json:"paths"`
	}
	call(t, srv, "GET", "/openapi.json", "", nil, nil, &doc)
	for path, methods := range map[string][]string{
		"/v1/online-endpoints/{endpoint}/deployments":             {"get", "post"},
		"/v1/online-endpoints/{endpoint}/deployments/{name}":      {"get", "put", "delete"},
		"/v1/online-endpoints/{endpoint}/deployments/{name}/logs": {"get"},
	} {
		for _, m := range methods {
			if op, ok := doc.Paths[path][m]; !ok || len(op.Parameters) == 0 || op.Parameters[0].Name != "endpoint" {
				t.Errorf("openapi: %s %s is missing or lacks its endpoint parameter: %+v", m, path, op)
			}
		}
	}
	var deps []apitypes.OnlineDeployment
	if code := call(t, srv, "GET", "/v1/online-endpoints/iris-ep/deployments", owner, nil, nil, &deps); code != 200 || len(deps) != 0 {
		t.Errorf("an endpoint with no deployment lists %d: %+v", code, deps)
	}

	var keys apitypes.EndpointKeys
	if code := call(t, srv, "POST", "/v1/online-endpoints/iris-ep/list-keys", owner, nil, nil, &keys); code != 200 || keys.PrimaryKey == "" {
		t.Fatalf("owner lists keys: %d", code)
	}
	// The workspace token is not the endpoint's key, and the key scores.
	score := func(key string) (int, string) {
		req, err := http.NewRequest("POST", srv.URL+"/endpoints/iris-ep/score", strings.NewReader(`{"data": [1]}`))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := score(owner); code != 401 {
		t.Errorf("scoring with the owner token: %d %s, want 401", code, body)
	}
	if code, body := score(""); code != 401 {
		t.Errorf("scoring with no key: %d %s, want 401", code, body)
	}
	if code, body := score(keys.SecondaryKey); code != 503 || !strings.Contains(body, "no traffic") {
		t.Errorf("scoring with the secondary key and no deployment: %d %s, want the gateway's 503", code, body)
	}
	if code := call(t, srv, "GET", "/metrics/endpoints", owner, nil, nil, nil); code != 200 {
		t.Errorf("owner reads the metrics page: %d", code)
	}
	if code := call(t, srv, "DELETE", "/v1/online-endpoints/iris-ep", owner, nil, nil, nil); code != 200 {
		t.Errorf("owner deletes: %d", code)
	}
	if code, body := score(keys.PrimaryKey); code != 404 {
		t.Errorf("scoring a deleted endpoint: %d %s, want 404", code, body)
	}
}
