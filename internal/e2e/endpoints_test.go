package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

type endpointOut struct {
	Name, AuthMode, ScoringURI, ProvisioningState string
	Traffic                                       map[string]int
	Tags                                          map[string]string
}

func parseEndpoint(t *testing.T, r result) endpointOut {
	t.Helper()
	var raw struct {
		Name              string            `json:"name"`
		AuthMode          string            `json:"auth_mode"`
		ScoringURI        string            `json:"scoring_uri"`
		ProvisioningState string            `json:"provisioning_state"`
		Traffic           map[string]int    `json:"traffic"`
		Tags              map[string]string `json:"tags"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatalf("not an endpoint: %v\n%s", err, r)
	}
	return endpointOut{raw.Name, raw.AuthMode, raw.ScoringURI, raw.ProvisioningState, raw.Traffic, raw.Tags}
}

// score posts to a scoring URI with key ("" sends none) and returns the
// status and body.
func score(t *testing.T, uri, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", uri, strings.NewReader(`{"data": [[1, 2, 3, 4]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// An online endpoint through the real CLI and server: created from
// Azure's endpoint file, shown with its scoring_uri and never a key; its
// keys open the gateway on the server's own listener (which answers 503
// until deployments exist), a wrong key is 401, a regenerated key
// replaces the old one at once, it survives kill -9, and its keys are in
// no output but get-credentials' and nowhere in the server's log.
func TestOnlineEndpoint(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	// Azure's sample endpoint file (azureml-examples, endpoints/online/managed/sample/endpoint.yml).
	writeFiles(t, dir, map[string]string{
		"endpoint.yml": `$schema: https://azuremlschemas.azureedge.net/latest/managedOnlineEndpoint.schema.json
name: my-endpoint
auth_mode: key
description: this is a sample endpoint
tags:
  foo: bar
`,
		"sample-request.json": `{"data": [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]}`,
	})
	file := filepath.Join(dir, "endpoint.yml")
	var outputs []string // every output but get-credentials', searched for keys at the end
	keep := func(r result) result { outputs = append(outputs, r.stdout, r.stderr); return r }

	created := parseEndpoint(t, keep(s.mustFerry("online-endpoint", "create", "-f", file, "-o", "json")))
	wantURI := s.url + "/endpoints/my-endpoint/score"
	if created.ScoringURI != wantURI || created.AuthMode != "key" || created.ProvisioningState != "Succeeded" || created.Tags["foo"] != "bar" {
		t.Fatalf("created: %+v, want scoring_uri %s", created, wantURI)
	}
	shown := keep(s.mustFerry("online-endpoint", "show", "-n", "my-endpoint"))
	mustContain(t, "show", shown.stdout, "scoring_uri:", wantURI, "auth_mode:", "key", "Succeeded")
	keep(s.mustFerry("online-endpoint", "show", "my-endpoint", "-o", "yaml"))
	list := keep(s.mustFerry("online-endpoint", "list"))
	mustContain(t, "list", list.stdout, "my-endpoint", wantURI)
	keep(s.mustFerry("online-endpoint", "list", "-o", "json"))

	// Creating it twice is refused by name.
	r := keep(s.ferry("online-endpoint", "create", "-f", file))
	if r.code == 0 {
		t.Fatalf("second create succeeded: %s", r)
	}
	mustContain(t, "second create", r.stderr, "my-endpoint exists")

	// get-credentials prints the keys as az ml does.
	var keys struct {
		PrimaryKey   string `json:"primaryKey"`
		SecondaryKey string `json:"secondaryKey"`
	}
	creds := s.mustFerry("online-endpoint", "get-credentials", "-n", "my-endpoint")
	if err := json.Unmarshal([]byte(creds.stdout), &keys); err != nil || keys.PrimaryKey == "" || keys.SecondaryKey == "" {
		t.Fatalf("get-credentials: %v\n%s", err, creds)
	}

	// The keys reach the gateway: no deployment yet, so the gateway's
	// 503; a wrong key, no key and the workspace's own token are 401.
	for _, k := range []string{keys.PrimaryKey, keys.SecondaryKey} {
		if code, body := score(t, wantURI, k); code != http.StatusServiceUnavailable || !strings.Contains(body, "no traffic") {
			t.Errorf("a right key: %d %s, want the gateway's 503 (no deployment takes traffic)", code, body)
		}
	}
	for what, k := range map[string]string{"a wrong key": "not-the-key", "no key": "", "the owner token": s.token} {
		if code, body := score(t, wantURI, k); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", what, code, body)
		}
	}
	// invoke shows the gateway's answer plainly.
	inv := keep(s.ferry("online-endpoint", "invoke", "--name", "my-endpoint", "--request-file", filepath.Join(dir, "sample-request.json")))
	if inv.code == 0 {
		t.Errorf("invoke with no deployment succeeded: %s", inv)
	}
	mustContain(t, "invoke", inv.stderr, "503", "sends no traffic to any deployment", "--traffic")
	inv = keep(s.ferry("online-endpoint", "invoke", "my-endpoint", "--deployment", "blue", "--request-file", filepath.Join(dir, "sample-request.json")))
	if inv.code == 0 {
		t.Errorf("invoke --deployment blue succeeded: %s", inv)
	}
	mustContain(t, "invoke --deployment blue", inv.stderr, "404", "has no deployment blue")

	// Traffic to a deployment that does not exist is refused, naming it.
	tr := keep(s.ferry("online-endpoint", "update", "-n", "my-endpoint", "--traffic", "blue=90 green=10"))
	if tr.code == 0 {
		t.Errorf("traffic to no deployment accepted: %s", tr)
	}
	mustContain(t, "update --traffic", tr.stderr, "no deployment blue", "deployments come first")
	up := parseEndpoint(t, keep(s.mustFerry("online-endpoint", "update", "my-endpoint", "--traffic", "", "-o", "json")))
	if len(up.Traffic) != 0 {
		t.Errorf("empty traffic: %+v", up)
	}
	// update -f takes the file's description and tags.
	writeFiles(t, dir, map[string]string{"endpoint2.yml": "name: my-endpoint\ndescription: now with tags\ntags: {foo: baz, stage: prod}\n"})
	up = parseEndpoint(t, keep(s.mustFerry("online-endpoint", "update", "-f", filepath.Join(dir, "endpoint2.yml"), "-o", "json")))
	if up.Tags["foo"] != "baz" || up.Tags["stage"] != "prod" {
		t.Errorf("update -f: %+v", up)
	}

	// Regenerating the primary key: the old one fails at once, the new one
	// and the secondary work.
	keep(s.mustFerry("online-endpoint", "regenerate-keys", "-n", "my-endpoint", "--key-type", "primary"))
	var keys2 struct {
		PrimaryKey   string `json:"primaryKey"`
		SecondaryKey string `json:"secondaryKey"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("online-endpoint", "get-credentials", "my-endpoint").stdout), &keys2); err != nil {
		t.Fatal(err)
	}
	if keys2.PrimaryKey == keys.PrimaryKey || keys2.SecondaryKey != keys.SecondaryKey {
		t.Fatalf("regenerate primary: new primary %v, secondary kept %v", keys2.PrimaryKey != keys.PrimaryKey, keys2.SecondaryKey == keys.SecondaryKey)
	}
	if code, _ := score(t, wantURI, keys.PrimaryKey); code != http.StatusUnauthorized {
		t.Errorf("the old primary key after regenerate: %d, want 401", code)
	}
	if code, _ := score(t, wantURI, keys2.PrimaryKey); code != http.StatusServiceUnavailable {
		t.Errorf("the new primary key: %d, want 503", code)
	}

	// The metrics page is on the same listener, for the owner. (It has
	// no samples yet: the gateway counts requests by deployment, and
	// these met none.)
	if code, body := s.call("GET", "/metrics/endpoints", s.token, nil); code != 200 {
		t.Errorf("metrics page: %d %.300s", code, body)
	}
	if code, _ := s.call("GET", "/metrics/endpoints", "", nil); code != http.StatusUnauthorized {
		t.Errorf("metrics page with no token: %d, want 401", code)
	}

	// kill -9: the endpoint and its current keys come back.
	s.kill9()
	s.start()
	again := parseEndpoint(t, keep(s.mustFerry("online-endpoint", "show", "my-endpoint", "-o", "json")))
	if again.ScoringURI != wantURI || again.Tags["foo"] != "baz" {
		t.Errorf("after kill -9: %+v", again)
	}
	if code, _ := score(t, wantURI, keys2.PrimaryKey); code != http.StatusServiceUnavailable {
		t.Errorf("the primary key after kill -9: %d, want 503 (routed again)", code)
	}
	if code, _ := score(t, wantURI, keys.PrimaryKey); code != http.StatusUnauthorized {
		t.Errorf("the replaced key after kill -9: %d, want 401", code)
	}

	// Delete: the scoring URI stops answering.
	keep(s.mustFerry("online-endpoint", "delete", "-n", "my-endpoint", "--yes"))
	if code, _ := score(t, wantURI, keys2.PrimaryKey); code != http.StatusNotFound {
		t.Errorf("scoring a deleted endpoint: %d, want 404", code)
	}
	gone := keep(s.ferry("online-endpoint", "show", "my-endpoint"))
	if gone.code == 0 {
		t.Errorf("show after delete: %s", gone)
	}
	mustContain(t, "show after delete", gone.stderr, "does not exist")

	// No key in any output but get-credentials', nor in the server's log
	// (which does tell of the endpoint).
	log := s.output.String()
	mustContain(t, "server log", log, "endpoint created", "my-endpoint")
	for _, k := range []string{keys.PrimaryKey, keys.SecondaryKey, keys2.PrimaryKey} {
		for i, o := range outputs {
			if strings.Contains(o, k) {
				t.Errorf("a key is in output %d:\n%s", i, o)
			}
		}
		if strings.Contains(log, k) {
			t.Errorf("a key is in the server's log")
		}
	}
}
