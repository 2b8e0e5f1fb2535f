package api

import (
	"net/http"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
)

// datastoreRoutes are the datastores' operations, for owner tokens only.
func (s *Server) datastoreRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/datastores", summary: "List datastores (the built-in workspaceblobstore among them until one of that name is created)", handle: s.listDatastores},
		{method: "POST", path: "/v1/datastores", summary: "Create or replace a datastore: {spec}, the datastore file as JSON (credentials, if any, are not kept)", handle: s.createDatastore},
		{method: "GET", path: "/v1/datastores/{name}", summary: "Show a datastore", handle: s.getDatastore},
		{method: "DELETE", path: "/v1/datastores/{name}", summary: "Delete a datastore; jobs submitted before keep what their inputs resolved to", handle: s.deleteDatastore},
	}
}

func (s *Server) createDatastore(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.DatastoreRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 {
		return nil, apperr.Invalid("spec: the datastore spec is missing")
	}
	f, err := spec.DecodeDatastoreJSON(req.Spec)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.Assets().CreateDatastore(r.Context(), who, f)
}

func (s *Server) listDatastores(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().ListDatastores(r.Context())
}

func (s *Server) getDatastore(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().GetDatastore(r.Context(), r.PathValue("name"))
}

func (s *Server) deleteDatastore(r *http.Request, who auth.Principal) (any, error) {
	if err := s.ws.Assets().DeleteDatastore(r.Context(), who, r.PathValue("name")); err != nil {
		return nil, err
	}
	return map[string]string{"deleted": r.PathValue("name")}, nil
}
