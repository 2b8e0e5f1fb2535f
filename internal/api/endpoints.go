package api

import (
	"io"
	"net/http"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
)

// endpointRoutes are the online endpoints' operations: for owner tokens
// only, like the model registry's. Scoring itself is not here: it goes to
// the gateway (MountGateway), which checks the endpoint's own keys.
func (s *Server) endpointRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/online-endpoints", summary: "List online endpoints", handle: s.listEndpoints},
		{method: "POST", path: "/v1/online-endpoints", summary: "Create an online endpoint from an Azure ML v2 managedOnlineEndpoint file (as JSON); it gets a primary and a secondary key", handle: s.createEndpoint},
		{method: "GET", path: "/v1/online-endpoints/{name}", summary: "Show an online endpoint (its scoring_uri, auth_mode, traffic, state; never its keys)", handle: s.getEndpoint},
		{method: "PATCH", path: "/v1/online-endpoints/{name}", summary: "Change an endpoint: {description, tags, traffic, mirror_traffic}; a field left out or null keeps its value", handle: s.updateEndpoint},
		{method: "DELETE", path: "/v1/online-endpoints/{name}", summary: "Delete an online endpoint", handle: s.deleteEndpoint},
		{method: "POST", path: "/v1/online-endpoints/{name}/list-keys", summary: "An endpoint's keys: {primaryKey, secondaryKey} (the only operation that returns them)", handle: s.endpointKeys},
		{method: "POST", path: "/v1/online-endpoints/{name}/regenerate-keys", summary: "Replace an endpoint's primary or secondary key: {key_type}", handle: s.regenerateEndpointKey},
	}
}

func (s *Server) createEndpoint(r *http.Request, who auth.Principal) (any, error) {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxJSONBody))
	if err != nil {
		return nil, err
	}
	e, err := spec.DecodeOnlineEndpointJSON(data)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.wl.Online.CreateOnlineEndpoint(r.Context(), who, e)
}

func (s *Server) listEndpoints(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Online.ListOnlineEndpoints(r.Context())
}

func (s *Server) getEndpoint(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Online.GetOnlineEndpoint(r.Context(), r.PathValue("name"))
}

func (s *Server) updateEndpoint(r *http.Request, who auth.Principal) (any, error) {
	var u apitypes.EndpointUpdate
	if err := decode(r, &u); err != nil {
		return nil, err
	}
	return s.wl.Online.UpdateOnlineEndpoint(r.Context(), who, r.PathValue("name"), u)
}

func (s *Server) deleteEndpoint(r *http.Request, who auth.Principal) (any, error) {
	if err := s.wl.Online.DeleteOnlineEndpoint(r.Context(), who, r.PathValue("name")); err != nil {
		return nil, err
	}
	return map[string]string{"deleted": r.PathValue("name")}, nil
}

func (s *Server) endpointKeys(r *http.Request, who auth.Principal) (any, error) {
	return s.wl.Online.GetEndpointCredentials(r.Context(), who, r.PathValue("name"))
}

func (s *Server) regenerateEndpointKey(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.RegenerateKeysRequest
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return nil, err
		}
	}
	return s.wl.Online.RegenerateEndpointKey(r.Context(), who, r.PathValue("name"), req.KeyType)
}

// MountGateway serves scoring requests (POST /endpoints/NAME/score,
// Azure's scoring_uri shape) with score, which checks the endpoint's key
// itself, and the gateway's Prometheus page at GET /metrics/endpoints for
// the owner's token.
func (s *Server) MountGateway(score, metrics http.Handler) {
	rts := []route{
		{method: "POST", path: "/endpoints/{name}/score", summary: "Score with an online endpoint: send its key as `Authorization: Bearer KEY`; the azureml-model-deployment header picks a deployment", public: true,
			raw: func(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
				score.ServeHTTP(w, r)
				return nil
			}},
		{method: "GET", path: "/metrics/endpoints", summary: "Prometheus metrics of the endpoint gateway: requests by endpoint, deployment and status, and their latency",
			raw: func(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
				metrics.ServeHTTP(w, r)
				return nil
			}},
	}
	for _, rt := range rts {
		s.routes = append(s.routes, rt)
		s.mux.HandleFunc(rt.method+" "+rt.path, s.wrap(rt))
	}
}
