package api

// TEMPORARY: replaced by the deployments API being written beside this.

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

func (s *Server) tmpDeploymentRoutes() []route {
	return []route{
		{method: "POST", path: "/v1/online-endpoints/{endpoint}/deployments", summary: "tmp", handle: s.tmpCreateDeployment},
		{method: "PUT", path: "/v1/online-endpoints/{endpoint}/deployments/{name}", summary: "tmp", handle: s.tmpUpdateDeployment},
		{method: "GET", path: "/v1/online-endpoints/{endpoint}/deployments/{name}", summary: "tmp", handle: s.tmpGetDeployment},
		{method: "DELETE", path: "/v1/online-endpoints/{endpoint}/deployments/{name}", summary: "tmp", handle: s.tmpDeleteDeployment},
	}
}

type tmpDeploymentRequest struct {
	Spec    json.RawMessage             `json:"spec"`
	Uploads workspace.DeploymentUploads `json:"uploads"`
	Local   bool                        `json:"local"`
}

func (s *Server) tmpCreateDeployment(r *http.Request, who auth.Principal) (any, error) {
	data, _ := io.ReadAll(r.Body)
	var req tmpDeploymentRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, &workspace.Error{Code: workspace.CodeInvalid, Msg: err.Error()}
	}
	d, err := spec.DecodeOnlineDeploymentJSON(req.Spec)
	if err != nil {
		return nil, &workspace.Error{Code: workspace.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.CreateOnlineDeployment(r.Context(), who, d, req.Uploads, req.Local)
}

func (s *Server) tmpUpdateDeployment(r *http.Request, who auth.Principal) (any, error) {
	data, _ := io.ReadAll(r.Body)
	var req tmpDeploymentRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, &workspace.Error{Code: workspace.CodeInvalid, Msg: err.Error()}
	}
	d, err := spec.DecodeOnlineDeploymentJSON(req.Spec)
	if err != nil {
		return nil, &workspace.Error{Code: workspace.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.UpdateOnlineDeployment(r.Context(), who, d, workspace.DeploymentChange{Uploads: req.Uploads})
}

func (s *Server) tmpGetDeployment(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.GetOnlineDeployment(r.Context(), r.PathValue("endpoint"), r.PathValue("name"))
}

func (s *Server) tmpDeleteDeployment(r *http.Request, who auth.Principal) (any, error) {
	return map[string]string{}, s.ws.DeleteOnlineDeployment(r.Context(), who, r.PathValue("endpoint"), r.PathValue("name"))
}
