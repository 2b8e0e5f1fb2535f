package online

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

// routerLog records what the workspace routes, as the gateway would hold it.
type routerLog struct {
	mu     sync.Mutex
	routed map[string]RoutedEndpoint
}

func (r *routerLog) SetEndpoint(e RoutedEndpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routed[e.Name] = e
}

func (r *routerLog) RemoveEndpoint(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.routed, name)
}

func (r *routerLog) Load(string) map[string]DeploymentLoad { return map[string]DeploymentLoad{} }

func (r *routerLog) get(name string) (RoutedEndpoint, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.routed[name]
	return e, ok
}

type endpointRig struct {
	k      *workloadtest.Keyed
	s      *Service
	router *routerLog
}

// newEndpointService is the online endpoints of a workspace with a
// workspace key (as the server has) and a router that records what it is
// told; the log is kept to be searched for keys.
func newEndpointService(t *testing.T) *endpointRig {
	t.Helper()
	rig := &endpointRig{k: workloadtest.NewKeyed(t, 1)}
	rig.s = rig.open(t)
	return rig
}

// open makes the online endpoints of the rig's workspace with a new
// router, registered, as a starting server does.
func (rig *endpointRig) open(t *testing.T) *Service {
	t.Helper()
	rig.router = &routerLog{routed: map[string]RoutedEndpoint{}}
	s, err := New(context.Background(), rig.k.WS, rig.k.Store, Config{Secrets: rig.k.Key, Router: rig.router, Log: rig.k.Log})
	if err != nil {
		t.Fatal(err)
	}
	Register(rig.k.WS, s)
	return s
}

// restart is a restarted server: a new workspace on the same store and
// key, and its online endpoints.
func (rig *endpointRig) restart(t *testing.T) *Service {
	t.Helper()
	rig.k.Restart(t)
	return rig.open(t)
}

func endpointFile(t *testing.T, yml string) *spec.OnlineEndpoint {
	t.Helper()
	e, err := spec.ParseOnlineEndpoint([]byte(yml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEndpointLifecycleAndKeys(t *testing.T) {
	ctx := context.Background()
	rig := newEndpointService(t)
	s := rig.s
	ep, err := s.CreateOnlineEndpoint(ctx, owner, endpointFile(t, "name: iris-ep\ndescription: first\ntags: {team: ml}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ep.ScoringURI != "http://test/endpoints/iris-ep/score" || ep.AuthMode != "key" || ep.ProvisioningState != "Succeeded" {
		t.Errorf("created: %+v", ep)
	}
	keys, err := s.GetEndpointCredentials(ctx, owner, "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.PrimaryKey) < 40 || len(keys.SecondaryKey) < 40 || keys.PrimaryKey == keys.SecondaryKey {
		t.Fatalf("keys are not two long random strings: %d and %d characters", len(keys.PrimaryKey), len(keys.SecondaryKey))
	}
	// The router got both keys, opened.
	r, ok := rig.router.get("iris-ep")
	if !ok || len(r.Keys) != 2 || r.Keys[0].Reveal() != keys.PrimaryKey || r.Keys[1].Reveal() != keys.SecondaryKey || r.AuthMode != "key" {
		t.Fatalf("routed: %v %v", r, ok)
	}
	// The store holds them sealed, not in plain text.
	rec, err := rig.k.Store.GetEndpoint(ctx, "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	if !secrets.IsSealed(rec.PrimaryKey) || !secrets.IsSealed(rec.SecondaryKey) {
		t.Errorf("stored keys are not sealed")
	}

	// Update: description and tags change; a nil field keeps.
	desc := "second"
	ep, err = s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{Description: &desc})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Description != "second" || ep.Tags["team"] != "ml" {
		t.Errorf("after update: %+v", ep)
	}
	_, err = s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{AuthMode: "aml_token"})
	wantCode(t, "auth_mode change", err, apperr.CodeInvalid, "auth_mode", "does not change")

	// Regenerating the primary key replaces it, keeps the secondary, and
	// the router hears of it.
	if _, err := s.RegenerateEndpointKey(ctx, owner, "iris-ep", "primary"); err != nil {
		t.Fatal(err)
	}
	keys2, err := s.GetEndpointCredentials(ctx, owner, "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	if keys2.PrimaryKey == keys.PrimaryKey || keys2.SecondaryKey != keys.SecondaryKey {
		t.Errorf("regenerate primary: primary changed %v, secondary kept %v", keys2.PrimaryKey != keys.PrimaryKey, keys2.SecondaryKey == keys.SecondaryKey)
	}
	if r, _ := rig.router.get("iris-ep"); r.Keys[0].Reveal() != keys2.PrimaryKey {
		t.Errorf("the router still has the old primary key")
	}
	if _, err := s.RegenerateEndpointKey(ctx, owner, "iris-ep", "secondary"); err != nil {
		t.Fatal(err)
	}
	keys3, _ := s.GetEndpointCredentials(ctx, owner, "iris-ep")
	if keys3.SecondaryKey == keys.SecondaryKey || keys3.PrimaryKey != keys2.PrimaryKey {
		t.Errorf("regenerate secondary changed the wrong key")
	}
	_, err = s.RegenerateEndpointKey(ctx, owner, "iris-ep", "tertiary")
	wantCode(t, "key type tertiary", err, apperr.CodeInvalid, "key_type", "primary or secondary")

	// No view, list or log line holds a key.
	list, err := s.ListOnlineEndpoints(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	shown, _ := s.GetOnlineEndpoint(ctx, "iris-ep")
	views, _ := json.Marshal([]any{list, shown, ep})
	for _, k := range []string{keys.PrimaryKey, keys.SecondaryKey, keys2.PrimaryKey, keys3.SecondaryKey} {
		if bytes.Contains(views, []byte(k)) {
			t.Errorf("a key is in a view: %s", views)
		}
		if strings.Contains(rig.k.Logged(), k) {
			t.Errorf("a key is in the log:\n%s", rig.k.Logged())
		}
		if strings.Contains(string(rec.Spec), k) {
			t.Errorf("a key is in the stored spec")
		}
	}
	if printed := fmt.Sprint(r); strings.Contains(printed, keys.PrimaryKey) {
		t.Errorf("a routed endpoint prints its key: %s", printed)
	}

	// A restart routes the endpoint again with its current keys.
	s2 := rig.restart(t)
	if r, ok := rig.router.get("iris-ep"); !ok || r.Keys[0].Reveal() != keys3.PrimaryKey || r.Keys[1].Reveal() != keys3.SecondaryKey {
		t.Errorf("after a restart the router has %v, %v", r, ok)
	}

	// Delete: gone from the store and from the router; the name is free.
	if err := s2.DeleteOnlineEndpoint(ctx, owner, "iris-ep"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rig.router.get("iris-ep"); ok {
		t.Errorf("deleted endpoint still routed")
	}
	_, err = s2.GetOnlineEndpoint(ctx, "iris-ep")
	wantCode(t, "show after delete", err, apperr.CodeNotFound, "iris-ep")
	wantCode(t, "delete again", s2.DeleteOnlineEndpoint(ctx, owner, "iris-ep"), apperr.CodeNotFound)
	_, err = s2.GetEndpointCredentials(ctx, owner, "iris-ep")
	wantCode(t, "credentials after delete", err, apperr.CodeNotFound)
}

// Traffic names deployments, and none exist yet: any split is refused
// with a message that names the deployment and says deployments come
// first, at create and at update; a split that is wrong in itself is
// refused naming its field.
func TestEndpointTrafficNeedsDeployments(t *testing.T) {
	ctx := context.Background()
	s := newEndpointService(t).s
	_, err := s.CreateOnlineEndpoint(ctx, owner, endpointFile(t, "name: iris-ep\ntraffic: {blue: 100}\n"))
	wantCode(t, "create with traffic", err, apperr.CodeInvalid, "traffic.blue", "no deployment blue", "deployments come first")
	if _, err := s.GetOnlineEndpoint(ctx, "iris-ep"); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("a refused endpoint was stored: %v", err)
	}
	if _, err := s.CreateOnlineEndpoint(ctx, owner, endpointFile(t, "name: iris-ep\n")); err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{Traffic: map[string]int{"blue": 90, "green": 10}})
	wantCode(t, "update traffic", err, apperr.CodeInvalid, "traffic.blue", "no deployment blue", "deployments come first")
	_, err = s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{MirrorTraffic: map[string]int{"green": 10}})
	wantCode(t, "update mirror", err, apperr.CodeInvalid, "mirror_traffic.green", "no deployment green")
	_, err = s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{Traffic: map[string]int{"blue": 90, "green": 20}})
	wantCode(t, "traffic over 100", err, apperr.CodeInvalid, "traffic", "add up to 110")
	_, err = s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{MirrorTraffic: map[string]int{"green": 60}})
	wantCode(t, "mirror over 50", err, apperr.CodeInvalid, "mirror_traffic.green", "0 to 50")
	// An empty split is allowed (and is what there is).
	ep, err := s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{Traffic: map[string]int{}})
	if err != nil || len(ep.Traffic) != 0 {
		t.Errorf("empty traffic: %+v, %v", ep, err)
	}
	_, err = s.CreateOnlineEndpoint(ctx, owner, endpointFile(t, "name: iris-ep\n"))
	wantCode(t, "create twice", err, apperr.CodeConflict, "iris-ep exists")
}

func TestEndpointsAreTheOwners(t *testing.T) {
	ctx := context.Background()
	rig := newEndpointService(t)
	s := rig.s
	run := auth.Principal{Kind: auth.KindRun, Subject: "a-job", Attempt: 1}
	_, err := s.CreateOnlineEndpoint(ctx, run, endpointFile(t, "name: iris-ep\n"))
	wantCode(t, "run token creates", err, apperr.CodeForbidden)
	if _, err := s.CreateOnlineEndpoint(ctx, owner, endpointFile(t, "name: iris-ep\n")); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetEndpointCredentials(ctx, run, "iris-ep")
	wantCode(t, "run token reads keys", err, apperr.CodeForbidden)
	_, err = s.RegenerateEndpointKey(ctx, run, "iris-ep", "primary")
	wantCode(t, "run token regenerates", err, apperr.CodeForbidden)
	_, err = s.UpdateOnlineEndpoint(ctx, run, "iris-ep", apitypes.EndpointUpdate{})
	wantCode(t, "run token updates", err, apperr.CodeForbidden)
	wantCode(t, "run token deletes", s.DeleteOnlineEndpoint(ctx, run, "iris-ep"), apperr.CodeForbidden)

	// An aml_token endpoint gives a token, not keys: good for its own
	// endpoint until it expires, refused changed, for another endpoint,
	// and after its expiry.
	if _, err := s.CreateOnlineEndpoint(ctx, owner, endpointFile(t, "name: tok-ep\nauth_mode: aml_token\n")); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetEndpointCredentials(ctx, run, "tok-ep")
	wantCode(t, "run token reads a token", err, apperr.CodeForbidden)
	tok, err := s.GetEndpointCredentials(ctx, owner, "tok-ep")
	if err != nil {
		t.Fatal(err)
	}
	if tok.PrimaryKey != "" || tok.AccessToken == "" || tok.TokenType != "Bearer" || tok.ExpiryTimeUTC != rig.k.Clock.Now().Add(EndpointTokenLifetime).Unix() {
		t.Fatalf("aml_token credentials: keys %v, token %v, type %q, expiry %d", tok.PrimaryKey != "", tok.AccessToken != "", tok.TokenType, tok.ExpiryTimeUTC)
	}
	if !s.CheckEndpointToken("tok-ep", tok.AccessToken) {
		t.Error("the token is refused by its own endpoint")
	}
	if s.CheckEndpointToken("iris-ep", tok.AccessToken) {
		t.Error("the token of tok-ep opens iris-ep")
	}
	changed := tok.AccessToken[:len(tok.AccessToken)-2] + "AA"
	if changed != tok.AccessToken && s.CheckEndpointToken("tok-ep", changed) {
		t.Error("a changed token is taken")
	}
	_, err = s.RegenerateEndpointKey(ctx, owner, "tok-ep", "primary")
	wantCode(t, "regenerate the keys of an aml_token endpoint", err, apperr.CodeInvalid, "no keys to regenerate")
	rig.k.Clock.Advance(EndpointTokenLifetime + time.Second)
	if s.CheckEndpointToken("tok-ep", tok.AccessToken) {
		t.Error("an expired token is taken")
	}
}

// Writers of one endpoint that race (key regenerations and updates) leave
// the router holding what the store holds: the router hears of each
// write in the store's order.
func TestEndpointRouterFollowsTheStore(t *testing.T) {
	ctx := context.Background()
	rig := newEndpointService(t)
	s := rig.s
	if _, err := s.CreateOnlineEndpoint(ctx, owner, endpointFile(t, "name: iris-ep\n")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kt := []string{"primary", "secondary"}[i%2]
			if _, err := s.RegenerateEndpointKey(ctx, owner, "iris-ep", kt); err != nil {
				t.Error(err)
			}
			d := fmt.Sprint("writer ", i)
			if _, err := s.UpdateOnlineEndpoint(ctx, owner, "iris-ep", apitypes.EndpointUpdate{Description: &d}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	keys, err := s.GetEndpointCredentials(ctx, owner, "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := rig.router.get("iris-ep")
	if len(r.Keys) != 2 || r.Keys[0].Reveal() != keys.PrimaryKey || r.Keys[1].Reveal() != keys.SecondaryKey {
		t.Errorf("the router's keys are not the stored ones")
	}
}
