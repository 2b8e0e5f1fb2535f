package api

import (
	"context"
	"net/http"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/pipelines"
)

// Pipelines is what the pipeline routes ask of the pipeline workload
// (internal/workload/pipelines).
type Pipelines interface {
	SubmitPipeline(ctx context.Context, who auth.Principal, sub pipelines.Submission) (*apitypes.Job, error)
}

// pipelineRoutes are the component registry's operations and the
// submission of pipeline jobs, which are then jobs like any other
// (GET /v1/jobs/{name} shows their steps; cancel cascades).
func (s *Server) pipelineRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/components", summary: "List registered components (?name= for the versions of one)", handle: s.listComponents},
		{method: "POST", path: "/v1/components", summary: "Register a command component version: {spec}, the Azure ML v2 component as JSON with its code_snapshot", handle: s.createComponent},
		{method: "GET", path: "/v1/components/{name}/versions/{version}", summary: "Show a component version (version latest: the newest)", handle: s.getComponent},
		{method: "POST", path: "/v1/pipeline-jobs", summary: "Submit a pipeline job: {spec, input_snapshots}, its steps' component files resolved inline", handle: s.createPipelineJob},
	}
}

func (s *Server) createComponent(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.ComponentRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 {
		return nil, apperr.Invalid("spec: the component spec is missing")
	}
	c, err := spec.DecodeComponentJSON(req.Spec)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.Assets().CreateComponent(r.Context(), who, c)
}

func (s *Server) listComponents(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().ListComponents(r.Context(), r.URL.Query().Get("name"))
}

func (s *Server) getComponent(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().GetComponent(r.Context(), r.PathValue("name"), r.PathValue("version"))
}

func (s *Server) createPipelineJob(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.PipelineJobRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 {
		return nil, apperr.Invalid("spec: the pipeline job spec is missing")
	}
	p, err := spec.DecodePipelineJobJSON(req.Spec)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.wl.Pipelines.SubmitPipeline(r.Context(), who, pipelines.Submission{Spec: p, InputSnapshots: req.InputSnapshots})
}
