package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/online"
)

// deploymentRoutes are an online endpoint's deployments, for owner tokens
// only, as the endpoints' own routes are.
func (s *Server) deploymentRoutes() []route {
	const base = "/v1/online-endpoints/{endpoint}/deployments"
	return []route{
		{method: "GET", path: base, summary: "List an online endpoint's deployments", handle: s.listDeployments},
		{method: "POST", path: base, summary: "Create an online deployment: {spec (an Azure ML v2 managedOnlineDeployment file as JSON), uploads: {code_snapshot, model_snapshot, environment_snapshot}, local}; it is Creating until its replicas are ready (Succeeded) or one fails (Failed)", handle: s.createDeployment},
		{method: "GET", path: base + "/{name}", summary: "Show an online deployment: its provisioning_state, reason and replicas", handle: s.getDeployment},
		{method: "PUT", path: base + "/{name}", summary: "Change an online deployment: {spec, uploads}; it is Updating until the change is rolled out", handle: s.updateDeployment},
		{method: "DELETE", path: base + "/{name}", summary: "Delete an online deployment that takes no live traffic: it is Deleting until its replicas stopped, then gone", handle: s.deleteDeployment},
		{method: "GET", path: base + "/{name}/logs", summary: "The end of each replica's log as text (?lines=N, the last N lines of each; all when left out)", raw: s.deploymentLogs},
	}
}

// deploymentOf reads the request's online deployment (specOf).
func deploymentOf(r *http.Request, req apitypes.DeploymentRequest) (*spec.OnlineDeployment, error) {
	return specOf(r, req.Spec, "an online deployment file", "endpoint", spec.DecodeOnlineDeploymentJSON)
}

// specOf reads a deployment's spec from a request, its endpoint_name (and,
// for a path that names the deployment, its name) filled from the path
// when the spec leaves them out, and refused when it names others; then
// decodes it strictly with decode. what says what the spec is (as JSON),
// endpoint what kind of endpoint the path names.
func specOf[D any](r *http.Request, raw json.RawMessage, what, endpoint string, decode func([]byte) (*D, error)) (*D, error) {
	if len(raw) == 0 {
		return nil, apperr.Invalid("spec: the deployment spec is missing")
	}
	// The names are filled before the strict decode, which requires them.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, apperr.Invalid("spec: must be a JSON object (%s as JSON)", what)
	}
	for _, p := range []struct{ field, param, what string }{
		{"endpoint_name", "endpoint", endpoint},
		{"name", "name", "deployment"},
	} {
		want := r.PathValue(p.param)
		if want == "" {
			continue
		}
		var got string
		if raw, ok := fields[p.field]; ok && json.Unmarshal(raw, &got) != nil {
			return nil, apperr.Invalid("spec.%s: must be a string", p.field)
		}
		switch {
		case got == "":
			fields[p.field], _ = json.Marshal(want)
		case got != want:
			return nil, apperr.Invalid("spec.%s: the path names %s %s, the spec %s; give one %s", p.field, p.what, want, got, p.what)
		}
	}
	data, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	d, err := decode(data)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return d, nil
}

func (s *Server) createDeployment(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.DeploymentRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	d, err := deploymentOf(r, req)
	if err != nil {
		return nil, err
	}
	return s.wl.Online.CreateOnlineDeployment(r.Context(), who, d, req.Uploads, req.Local)
}

func (s *Server) updateDeployment(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.DeploymentRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if req.Local {
		return nil, apperr.Invalid("local: where a deployment runs is chosen when it is created; delete it and create it again to move it")
	}
	d, err := deploymentOf(r, req)
	if err != nil {
		return nil, err
	}
	return s.wl.Online.UpdateOnlineDeployment(r.Context(), who, d, online.DeploymentChange{Uploads: req.Uploads})
}

func (s *Server) listDeployments(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Online.ListOnlineDeployments(r.Context(), r.PathValue("endpoint"))
}

func (s *Server) getDeployment(r *http.Request, _ auth.Principal) (any, error) {
	return s.wl.Online.GetOnlineDeployment(r.Context(), r.PathValue("endpoint"), r.PathValue("name"))
}

func (s *Server) deleteDeployment(r *http.Request, who auth.Principal) (any, error) {
	if err := s.wl.Online.DeleteOnlineDeployment(r.Context(), who, r.PathValue("endpoint"), r.PathValue("name")); err != nil {
		return nil, err
	}
	return map[string]string{"deleting": r.PathValue("name")}, nil
}

func (s *Server) deploymentLogs(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	lines := 0
	if v := r.URL.Query().Get("lines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return apperr.Invalid("lines: %q is not a number of lines (0 or more)", v)
		}
		lines = n
	}
	// Written whole once it is read, so that an error is still a problem
	// document rather than a cut text.
	var b bytes.Buffer
	if err := s.wl.Online.DeploymentLogs(r.Context(), r.PathValue("endpoint"), r.PathValue("name"), lines, &b); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.Copy(w, &b) // a client gone meanwhile has nobody to tell
	return nil
}
