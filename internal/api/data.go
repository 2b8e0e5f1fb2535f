package api

import (
	"net/http"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
)

// dataRoutes are the data asset registry's operations, shaped as the
// model registry's and, like them, for owner tokens only.
func (s *Server) dataRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/data", summary: "List registered data assets (?name= for the versions of one; ?include_archived=true to show archived versions)", handle: s.listData},
		{method: "POST", path: "/v1/data", summary: "Register a data asset version: {spec, snapshot}, the Azure ML v2 data file as JSON and the snapshot of its files", handle: s.createData},
		{method: "GET", path: "/v1/data/{name}/versions/{version}", summary: "Show a data asset version (version latest: the newest one not archived)", handle: s.getData},
		{method: "POST", path: "/v1/data/{name}/versions/{version}/archive", summary: "Archive a data asset version: kept, but no longer listed or latest", handle: s.archiveData(true)},
		{method: "POST", path: "/v1/data/{name}/versions/{version}/restore", summary: "Restore an archived data asset version", handle: s.archiveData(false)},
	}
}

func (s *Server) createData(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.DataRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 {
		return nil, apperr.Invalid("spec: the data asset spec is missing")
	}
	f, err := spec.DecodeDataJSON(req.Spec)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.Assets().CreateData(r.Context(), who, f, req.Snapshot)
}

func (s *Server) listData(r *http.Request, _ auth.Principal) (any, error) {
	all, err := includeArchived(r)
	if err != nil {
		return nil, err
	}
	return s.ws.Assets().ListData(r.Context(), r.URL.Query().Get("name"), all)
}

func (s *Server) getData(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().GetData(r.Context(), r.PathValue("name"), r.PathValue("version"))
}

func (s *Server) archiveData(archived bool) func(*http.Request, auth.Principal) (any, error) {
	return func(r *http.Request, who auth.Principal) (any, error) {
		return s.ws.Assets().ArchiveData(r.Context(), who, r.PathValue("name"), r.PathValue("version"), archived)
	}
}
