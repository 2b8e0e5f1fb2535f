package api

import (
	"net/http"
	"strconv"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
)

// modelRoutes are the model registry's operations. Like environments',
// they are for owner tokens only: a run token may not call them.
func (s *Server) modelRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/models", summary: "List registered models (?name= for the versions of one; ?include_archived=true to show archived versions)", handle: s.listModels},
		{method: "POST", path: "/v1/models", summary: "Register a model version: {spec, snapshot}, the Azure ML v2 model file as JSON and the snapshot of its files", handle: s.createModel},
		{method: "GET", path: "/v1/models/{name}/versions/{version}", summary: "Show a model version (version latest: the newest one not archived)", handle: s.getModel},
		{method: "POST", path: "/v1/models/{name}/versions/{version}/archive", summary: "Archive a model version: kept, but no longer listed or latest", handle: s.archiveModel(true)},
		{method: "POST", path: "/v1/models/{name}/versions/{version}/restore", summary: "Restore an archived model version", handle: s.archiveModel(false)},
	}
}

func (s *Server) createModel(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.ModelRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 {
		return nil, apperr.Invalid("spec: the model spec is missing")
	}
	f, err := spec.DecodeModelJSON(req.Spec)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.Assets().CreateModel(r.Context(), who, f, req.Snapshot)
}

func (s *Server) listModels(r *http.Request, _ auth.Principal) (any, error) {
	all, err := includeArchived(r)
	if err != nil {
		return nil, err
	}
	return s.ws.Assets().ListModels(r.Context(), r.URL.Query().Get("name"), all)
}

func (s *Server) getModel(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().GetModel(r.Context(), r.PathValue("name"), r.PathValue("version"))
}

func (s *Server) archiveModel(archived bool) func(*http.Request, auth.Principal) (any, error) {
	return func(r *http.Request, who auth.Principal) (any, error) {
		return s.ws.Assets().ArchiveModel(r.Context(), who, r.PathValue("name"), r.PathValue("version"), archived)
	}
}

// includeArchived reads ?include_archived= of a registry's list.
func includeArchived(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("include_archived")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, apperr.Invalid("include_archived: %q is not true or false", v)
	}
	return b, nil
}
