package api

import (
	"context"
	"net/http"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/pipelines"
	"github.com/ferry-ml/ferry/internal/workload/schedules"
)

// Schedules is what the schedule routes ask of the schedule workload
// (internal/workload/schedules).
type Schedules interface {
	CreateSchedule(ctx context.Context, who auth.Principal, req schedules.Request) (*apitypes.Schedule, error)
	ListSchedules(ctx context.Context) ([]*apitypes.Schedule, error)
	GetSchedule(ctx context.Context, name string) (*apitypes.Schedule, error)
	SetScheduleEnabled(ctx context.Context, who auth.Principal, name string, enabled bool) (*apitypes.Schedule, error)
	DeleteSchedule(ctx context.Context, who auth.Principal, name string) error
}

// scheduleRoutes are job schedules' operations, and the reference check
// the CLI makes before it uploads a job's files.
func (s *Server) scheduleRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/schedules", summary: "List job schedules", handle: s.listSchedules},
		{method: "POST", path: "/v1/schedules", summary: "Create or update a job schedule: {spec, job} (spec: the Azure ML v2 schedule file as JSON; job: what POST /v1/jobs takes), {spec, pipeline} (pipeline: what POST /v1/pipeline-jobs takes) or {spec, copy_job, overrides} (a job of the workspace to copy, with fields laid over it)", handle: s.createSchedule},
		{method: "GET", path: "/v1/schedules/{name}", summary: "Show a job schedule: its trigger, next and last firing", handle: s.getSchedule},
		{method: "POST", path: "/v1/schedules/{name}/enable", summary: "Enable a schedule: it fires from its next occurrence on", handle: s.enableSchedule(true)},
		{method: "POST", path: "/v1/schedules/{name}/disable", summary: "Disable a schedule: it fires no more until enabled", handle: s.enableSchedule(false)},
		{method: "DELETE", path: "/v1/schedules/{name}", summary: "Delete a schedule (the jobs it fired stay)", handle: s.deleteSchedule},
		{method: "POST", path: "/v1/references/check", summary: "Check references a job makes before uploading its files: {references: [{field, kind, ref}]} with kind environment, data or compute; answers {problems: [{field, ref, message}]}, empty when every one resolves", handle: s.checkReferences},
	}
}

func (s *Server) createSchedule(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.ScheduleRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 {
		return nil, apperr.Invalid("spec: the schedule spec is missing")
	}
	f, err := spec.DecodeScheduleJSON(req.Spec)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	wreq := schedules.Request{File: f, CopyJob: req.CopyJob, Overrides: req.Overrides}
	if req.Job != nil {
		sub, err := submission(*req.Job)
		if err != nil {
			return nil, err
		}
		wreq.Job = &sub
	}
	if req.Pipeline != nil {
		if len(req.Pipeline.Spec) == 0 {
			return nil, apperr.Invalid("pipeline.spec: the pipeline job spec is missing")
		}
		p, err := spec.DecodePipelineJobJSON(req.Pipeline.Spec)
		if err != nil {
			return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: "create_job: " + err.Error(), Err: err}
		}
		wreq.Pipeline = &pipelines.Submission{Spec: p, InputSnapshots: req.Pipeline.InputSnapshots}
	}
	return s.wl.Schedules.CreateSchedule(r.Context(), who, wreq)
}

func (s *Server) listSchedules(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Schedules.ListSchedules(r.Context())
}

func (s *Server) getSchedule(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Schedules.GetSchedule(r.Context(), r.PathValue("name"))
}

func (s *Server) enableSchedule(enabled bool) func(*http.Request, auth.Principal) (any, error) {
	return func(r *http.Request, who auth.Principal) (any, error) {
		return s.wl.Schedules.SetScheduleEnabled(r.Context(), who, r.PathValue("name"), enabled)
	}
}

func (s *Server) deleteSchedule(r *http.Request, who auth.Principal) (any, error) {
	if err := s.wl.Schedules.DeleteSchedule(r.Context(), who, r.PathValue("name")); err != nil {
		return nil, err
	}
	return map[string]string{"deleted": r.PathValue("name")}, nil
}

func (s *Server) checkReferences(r *http.Request, _ auth.Principal) (any, error) {
	var req apitypes.ReferencesRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	ps, err := s.ws.Assets().CheckReferences(r.Context(), req.References)
	if err != nil {
		return nil, err
	}
	return apitypes.ReferencesAnswer{Problems: ps}, nil
}
