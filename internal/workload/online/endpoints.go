package online

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Online endpoints (Azure ML v2 managedOnlineEndpoint): a name, two keys
// and a traffic split between the endpoint's deployments. The keys are
// secrets: sealed with the workspace key before they are stored, opened
// only to route (EndpointRouter) and for GetEndpointCredentials, and in
// no view, error or log line.

// Provisioning states of an endpoint, as Azure names them. An endpoint is
// Succeeded once stored; deployments bring Creating and Updating.
const (
	EndpointSucceeded = "Succeeded"
)

// EndpointRouter is what routes scoring requests (the gateway). The
// Service tells it each endpoint's auth mode, keys and traffic when the
// endpoint is created, changed or deleted, and every endpoint at start.
// Calls must not block; they are made in the order of the store's writes.
type EndpointRouter interface {
	SetEndpoint(RoutedEndpoint)
	RemoveEndpoint(name string)
	// Load says, per deployment of the endpoint, what traffic it has:
	// the deployment controller scales and drains by it.
	Load(endpoint string) map[string]DeploymentLoad
}

// RoutedEndpoint is what the router needs of an endpoint. Keys are the
// opened keys, typed so that printing or logging them shows
// secrets.Redacted.
type RoutedEndpoint struct {
	Name     string
	AuthMode string
	Keys     []secrets.Secret // primary, secondary
	Traffic  map[string]int
	Mirror   map[string]int
	// Deployments are the endpoint's deployments with their ready
	// replicas.
	Deployments map[string]RoutedDeployment
}

// EndpointTokenLifetime is how long an aml_token endpoint's token is
// good for, as Azure's are.
const EndpointTokenLifetime = 24 * time.Hour

// tokenLabel binds an endpoint's tokens to it: a token of one endpoint
// does not open as another's.
func tokenLabel(endpoint string) string { return "endpoint/" + endpoint + "/aml_token" }

// newEndpointToken makes a token for an aml_token endpoint: its expiry,
// sealed (authenticated encryption) with the workspace key, so only this
// workspace can make one and a changed one does not open. Like Azure's,
// it cannot be revoked: it ends when it expires.
func (s *Service) newEndpointToken(endpoint string) (*apitypes.EndpointKeys, error) {
	if s.cfg.Secrets == nil {
		return nil, apperr.Invalid("this server has no workspace key to sign endpoint tokens with")
	}
	now := s.now()
	exp := now.Add(EndpointTokenLifetime)
	tok, err := s.cfg.Secrets.Seal([]byte(strconv.FormatInt(exp.Unix(), 10)), tokenLabel(endpoint))
	if err != nil {
		return nil, err
	}
	return &apitypes.EndpointKeys{AccessToken: tok, TokenType: "Bearer", ExpiryTimeUTC: exp.Unix(),
		RefreshAfterTimeUTC: now.Add(EndpointTokenLifetime / 2).Unix()}, nil
}

// CheckEndpointToken says whether token is a token of endpoint that has
// not expired (the gateway's check for auth_mode aml_token).
func (s *Service) CheckEndpointToken(endpoint, token string) bool {
	if s.cfg.Secrets == nil {
		return false
	}
	raw, err := s.cfg.Secrets.Open(token, tokenLabel(endpoint))
	if err != nil {
		return false
	}
	exp, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && s.now().Unix() < exp
}

// keyLabel binds a sealed key to its endpoint and slot, so that a sealed
// key copied to another endpoint or slot does not open.
func keyLabel(endpoint, slot string) string { return "endpoint/" + endpoint + "/" + slot + "_key" }

// newEndpointKey makes a key: 32 random bytes, URL-safe base64.
func newEndpointKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("endpoint key: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func (s *Service) sealKey(endpoint, slot string) (string, error) {
	if s.cfg.Secrets == nil {
		return "", apperr.Invalid("this server has no workspace key to seal endpoint keys with; endpoints cannot be made")
	}
	k, err := newEndpointKey()
	if err != nil {
		return "", err
	}
	return s.cfg.Secrets.Seal([]byte(k), keyLabel(endpoint, slot))
}

func (s *Service) openKeys(rec store.Endpoint) ([]secrets.Secret, error) {
	if s.cfg.Secrets == nil {
		return nil, fmt.Errorf("endpoint %s: its keys are sealed, but this server has no workspace key", rec.Name)
	}
	var out []secrets.Secret
	for _, k := range []struct{ slot, sealed string }{{"primary", rec.PrimaryKey}, {"secondary", rec.SecondaryKey}} {
		plain, err := s.cfg.Secrets.Open(k.sealed, keyLabel(rec.Name, k.slot))
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %s key: %w (was the workspace key replaced?)", rec.Name, k.slot, err)
		}
		out = append(out, secrets.Secret(plain))
	}
	return out, nil
}

func endpointSpecOf(rec store.Endpoint) (*spec.OnlineEndpoint, error) {
	var e spec.OnlineEndpoint
	if err := json.Unmarshal(rec.Spec, &e); err != nil {
		return nil, fmt.Errorf("endpoint %s: stored spec: %w", rec.Name, err)
	}
	return &e, nil
}

func (s *Service) endpointView(rec store.Endpoint) (*apitypes.OnlineEndpoint, error) {
	e, err := endpointSpecOf(rec)
	if err != nil {
		return nil, err
	}
	orEmpty := func(m map[string]int) map[string]int {
		if m == nil {
			return map[string]int{}
		}
		return m
	}
	v := &apitypes.OnlineEndpoint{
		Name: rec.Name, Description: e.Description, Tags: e.Tags, Properties: e.Properties,
		AuthMode: e.AuthMode, Traffic: orEmpty(e.Traffic), MirrorTraffic: orEmpty(e.MirrorTraffic),
		ScoringURI:        s.core.APIURL() + "/endpoints/" + rec.Name + "/score",
		ProvisioningState: rec.State, PublicNetworkAccess: e.PublicNetworkAccess, Identity: e.Identity,
		Compute: e.Compute, Created: rec.Created, Updated: rec.Updated,
	}
	if s.cfg.Router != nil {
		for name, l := range s.cfg.Router.Load(rec.Name) {
			if l.Requests == 0 {
				continue
			}
			if v.Deployments == nil {
				v.Deployments = map[string]*apitypes.DeploymentStats{}
			}
			v.Deployments[name] = statsOf(l)
		}
	}
	return v, nil
}

// route tells the router what rec is now, with its deployments.
func (s *Service) route(rec store.Endpoint) error {
	if s.cfg.Router == nil {
		return nil
	}
	deps, err := s.routedDeployments(context.Background(), rec.Name)
	if err != nil {
		return err
	}
	return s.routeWith(rec, deps)
}

func (s *Service) routeWith(rec store.Endpoint, deps map[string]RoutedDeployment) error {
	e, err := endpointSpecOf(rec)
	if err != nil {
		return err
	}
	keys, err := s.openKeys(rec)
	if err != nil {
		return err
	}
	s.cfg.Router.SetEndpoint(RoutedEndpoint{Name: rec.Name, AuthMode: e.AuthMode, Keys: keys, Traffic: e.Traffic, Mirror: e.MirrorTraffic, Deployments: deps})
	s.deployCtl.release(rec.Name, deps)
	return nil
}

// routeEndpoints hands every stored endpoint to the router, at start. An
// endpoint whose keys do not open is logged and left unrouted (it answers
// 404 at the gateway) rather than keeping the server from starting.
func (s *Service) routeEndpoints(ctx context.Context) error {
	if s.cfg.Router == nil {
		return nil
	}
	recs, err := s.st.ListEndpoints(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := s.route(rec); err != nil {
			s.log.Error("endpoint not routed", "endpoint", rec.Name, "err", err)
		}
	}
	return nil
}

// CreateOnlineEndpoint stores an endpoint from its file and makes its
// primary and secondary keys.
func (s *Service) CreateOnlineEndpoint(ctx context.Context, who auth.Principal, e *spec.OnlineEndpoint) (*apitypes.OnlineEndpoint, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot create endpoints")
	}
	if e == nil {
		return nil, apperr.Invalid("the endpoint is missing")
	}
	if err := e.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if e.AuthMode == "" {
		e.AuthMode = "key"
	}
	if err := s.checkTrafficTargets(ctx, e); err != nil {
		return nil, err
	}
	if err := s.checkEndpointCompute(ctx, e); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	rec := store.Endpoint{Name: e.Name, Spec: raw, State: EndpointSucceeded, Created: s.now(), Updated: s.now()}
	if rec.PrimaryKey, err = s.sealKey(e.Name, "primary"); err != nil {
		return nil, err
	}
	if rec.SecondaryKey, err = s.sealKey(e.Name, "secondary"); err != nil {
		return nil, err
	}
	s.epMu.Lock()
	defer s.epMu.Unlock()
	if err := s.st.CreateEndpoint(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("endpoint %s exists; change it with ferry online-endpoint update, or pick another name", e.Name)
		}
		return nil, apperr.NoSpace(err, "endpoint "+e.Name)
	}
	if err := s.route(rec); err != nil {
		return nil, err
	}
	s.log.Info("endpoint created", "endpoint", e.Name, "auth_mode", e.AuthMode)
	return s.endpointView(rec)
}

func (s *Service) getEndpointRecord(ctx context.Context, name string) (store.Endpoint, error) {
	rec, err := s.st.GetEndpoint(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return rec, apperr.NotFound("endpoint %s does not exist; ferry online-endpoint list shows those that do", name)
	}
	return rec, err
}

// GetOnlineEndpoint shows an endpoint.
func (s *Service) GetOnlineEndpoint(ctx context.Context, name string) (*apitypes.OnlineEndpoint, error) {
	rec, err := s.getEndpointRecord(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.endpointView(rec)
}

// ListOnlineEndpoints lists the endpoints by name.
func (s *Service) ListOnlineEndpoints(ctx context.Context) ([]*apitypes.OnlineEndpoint, error) {
	recs, err := s.st.ListEndpoints(ctx)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.OnlineEndpoint{}
	for _, rec := range recs {
		v, err := s.endpointView(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// UpdateOnlineEndpoint changes an endpoint's description, tags, traffic
// and mirror traffic; the split is checked as a new endpoint's is.
func (s *Service) UpdateOnlineEndpoint(ctx context.Context, who auth.Principal, name string, u apitypes.EndpointUpdate) (*apitypes.OnlineEndpoint, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot change endpoints")
	}
	s.epMu.Lock()
	defer s.epMu.Unlock()
	rec, err := s.getEndpointRecord(ctx, name)
	if err != nil {
		return nil, err
	}
	e, err := endpointSpecOf(rec)
	if err != nil {
		return nil, err
	}
	if u.AuthMode != "" && u.AuthMode != e.AuthMode {
		return nil, apperr.Invalid("auth_mode: endpoint %s uses %s, and an endpoint's auth_mode does not change; delete it and create it again with auth_mode %s", name, e.AuthMode, u.AuthMode)
	}
	if u.Description != nil {
		e.Description = *u.Description
	}
	if u.Tags != nil {
		e.Tags = u.Tags
	}
	if u.Traffic != nil {
		e.Traffic = u.Traffic
	}
	if u.MirrorTraffic != nil {
		e.MirrorTraffic = u.MirrorTraffic
	}
	if err := e.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := s.checkTrafficTargets(ctx, e); err != nil {
		return nil, err
	}
	if rec.Spec, err = json.Marshal(e); err != nil {
		return nil, err
	}
	rec.Updated = s.now()
	if err := s.writeEndpoint(ctx, rec); err != nil {
		return nil, err
	}
	s.log.Info("endpoint updated", "endpoint", name, "traffic", spec.FormatTraffic(e.Traffic), "mirror_traffic", spec.FormatTraffic(e.MirrorTraffic))
	return s.endpointView(rec)
}

// writeEndpoint stores rec and routes it; the caller holds epMu.
func (s *Service) writeEndpoint(ctx context.Context, rec store.Endpoint) error {
	if err := s.st.UpdateEndpoint(ctx, rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return apperr.NotFound("endpoint %s was deleted meanwhile", rec.Name)
		}
		return apperr.NoSpace(err, "endpoint "+rec.Name)
	}
	return s.route(rec)
}

// DeleteOnlineEndpoint deletes an endpoint; its scoring URI stops
// answering at once.
func (s *Service) DeleteOnlineEndpoint(ctx context.Context, who auth.Principal, name string) error {
	if !who.IsOwner() {
		return apperr.Forbidden("a run token cannot delete endpoints")
	}
	s.epMu.Lock()
	defer s.epMu.Unlock()
	deps, err := s.st.ListDeployments(ctx, name)
	if err != nil {
		return err
	}
	if err := s.st.DeleteEndpoint(ctx, name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return apperr.NotFound("endpoint %s does not exist", name)
		}
		return err
	}
	// Its deployments go with it: the controller stops their replicas
	// and removes them.
	for _, d := range deps {
		if d.State != apitypes.DeploymentDeleting {
			d.State, d.Updated = apitypes.DeploymentDeleting, s.now()
			if err := s.st.UpdateDeployment(ctx, d); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	s.kickDeployments()
	if s.cfg.Router != nil {
		s.cfg.Router.RemoveEndpoint(name)
	}
	s.log.Info("endpoint deleted", "endpoint", name)
	return nil
}

// GetEndpointCredentials returns an endpoint's keys: the one place they
// leave the server. Owner only.
func (s *Service) GetEndpointCredentials(ctx context.Context, who auth.Principal, name string) (*apitypes.EndpointKeys, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("only the workspace owner may read an endpoint's keys")
	}
	rec, err := s.getEndpointRecord(ctx, name)
	if err != nil {
		return nil, err
	}
	e, err := endpointSpecOf(rec)
	if err != nil {
		return nil, err
	}
	if e.AuthMode == "aml_token" {
		return s.newEndpointToken(name)
	}
	keys, err := s.openKeys(rec)
	if err != nil {
		return nil, err
	}
	return &apitypes.EndpointKeys{PrimaryKey: keys[0].Reveal(), SecondaryKey: keys[1].Reveal()}, nil
}

// RegenerateEndpointKey replaces an endpoint's primary or secondary key:
// the old one stops working at once, the other key goes on working (so
// clients move to it first, as with Azure's).
func (s *Service) RegenerateEndpointKey(ctx context.Context, who auth.Principal, name, keyType string) (*apitypes.OnlineEndpoint, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("only the workspace owner may regenerate an endpoint's keys")
	}
	if keyType == "" {
		keyType = "primary"
	}
	if keyType != "primary" && keyType != "secondary" {
		return nil, apperr.Invalid("key_type: %q is not primary or secondary", keyType)
	}
	s.epMu.Lock()
	defer s.epMu.Unlock()
	rec, err := s.getEndpointRecord(ctx, name)
	if err != nil {
		return nil, err
	}
	if e, err := endpointSpecOf(rec); err != nil {
		return nil, err
	} else if e.AuthMode != "key" {
		return nil, apperr.Invalid("endpoint %s uses auth_mode %s: it has no keys to regenerate; its tokens expire after %v (ferry online-endpoint get-credentials gives a new one)", name, e.AuthMode, EndpointTokenLifetime)
	}
	sealed, err := s.sealKey(name, keyType)
	if err != nil {
		return nil, err
	}
	if keyType == "primary" {
		rec.PrimaryKey = sealed
	} else {
		rec.SecondaryKey = sealed
	}
	rec.Updated = s.now()
	if err := s.writeEndpoint(ctx, rec); err != nil {
		return nil, err
	}
	s.log.Info("endpoint key regenerated", "endpoint", name, "key_type", keyType)
	return s.endpointView(rec)
}
