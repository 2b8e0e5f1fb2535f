// Package api serves Ferry's REST API v1 over HTTP: handlers only. Each
// handler validates its input, asks the workspace service, and returns a
// value or an error; one function turns errors into problem documents
// (RFC 9457), so status codes are decided in one place.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/httplimit"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workload/online"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Body size limits for requests that are not blobs.
const (
	maxJSONBody = 16 << 20
	maxLogChunk = 8 << 20
)

// Server is the HTTP API of one workspace.
type Server struct {
	ws     *workspace.Service
	wl     Workloads
	tokens store.Store
	log    *slog.Logger
	mux    *http.ServeMux
	routes []route
}

// route is one API operation. The route table is also the source of the
// OpenAPI document, so the two cannot drift apart.
type route struct {
	method, path, summary string
	public                bool // no token needed
	run                   bool // run-scoped tokens may call it (authorize says which)
	node                  bool // node agents' tokens (join, node) may call it, and only they
	handle                func(r *http.Request, who auth.Principal) (any, error)
	raw                   func(w http.ResponseWriter, r *http.Request, who auth.Principal) error // writes its own response
	upgrade               bool                                                                   // answers 101 and carries a session stream (raw)
}

// Workloads are the workloads built on the job core whose routes the API
// serves beside the core's, each through its own package (internal/workload).
// A workload left nil has no routes.
type Workloads struct {
	// Batch is batch endpoints.
	Batch BatchEndpoints
	// Pipelines and Schedules are pipeline jobs and job schedules.
	Pipelines Pipelines
	Schedules Schedules
	// Online is the online endpoints and their deployments.
	Online *online.Service
}

// New makes the API server. tokens is where API tokens are looked up.
func New(ws *workspace.Service, wl Workloads, tokens store.Store, log *slog.Logger) *Server {
	s := &Server{ws: ws, wl: wl, tokens: tokens, log: log, mux: http.NewServeMux()}
	s.routes = []route{
		{method: "GET", path: "/healthz", summary: "Liveness check", public: true, handle: s.healthz},
		{method: "GET", path: "/openapi.json", summary: "This API's OpenAPI document", public: true, handle: s.openapi},
		{method: "GET", path: "/v1/computes", summary: "List compute targets", handle: s.listComputes},
		{method: "POST", path: "/v1/computes", summary: "Create a compute target from an Azure ML v2 compute spec (as JSON)", handle: s.createCompute},
		{method: "GET", path: "/v1/computes/{name}", summary: "Show a compute target", handle: s.getCompute},
		{method: "GET", path: "/v1/computes/{name}/nodes", summary: "List a cluster's nodes", handle: s.listNodes},
		{method: "GET", path: "/v1/computes/{name}/events", summary: "Every event of a compute, oldest first (a compute's view has only the newest)", handle: s.computeEvents},
		{method: "POST", path: "/v1/computes/{name}/nodes/{node}/preempt", summary: "Preempt a node of a low-priority cluster now, as its cloud would: its jobs stop, keep their outputs and are queued again", handle: s.preemptNode},
		{method: "POST", path: "/v1/computes/{name}/resize", summary: "Change a cluster's bounds: {min_instances, max_instances, idle_time_before_scale_down}", handle: s.resizeCompute},
		{method: "POST", path: "/v1/computes/{name}/start", summary: "Start a stopped compute instance", handle: s.instanceAction("start")},
		{method: "POST", path: "/v1/computes/{name}/stop", summary: "Stop a compute instance", handle: s.instanceAction("stop")},
		{method: "POST", path: "/v1/computes/{name}/restart", summary: "Restart a compute instance on a fresh node", handle: s.instanceAction("restart")},
		{method: "GET", path: "/v1/computes/{name}/session", summary: "Open an exec, shell or port-forward session on a compute instance (?kind=exec|shell|forward): an upgrade (Connection: Upgrade, Upgrade: ferry-session) to an SSH stream to its agent", raw: s.openSession, upgrade: true},
		{method: "GET", path: "/v1/quotas", summary: "Core quotas and use per size family", handle: s.listQuotas},
		{method: "PUT", path: "/v1/quotas/{family}", summary: "Set a family's core quota: {cores}", handle: s.setQuota},
		{method: "POST", path: "/v1/sizes/{size}/enable", summary: "Let clusters of a restricted size be made", handle: s.enableSize},
		{method: "POST", path: "/v1/nodes/join", summary: "Agent: join with a node's join token", node: true, handle: s.joinNode},
		{method: "POST", path: "/v1/nodes/{node}/heartbeat", summary: "Agent: renew the node's lease", node: true, handle: s.nodeHeartbeat},
		{method: "GET", path: "/v1/nodes/{node}/assignments", summary: "Agent: attempts placed on the node (?wait=SECONDS long-polls)", node: true, handle: s.nodeAssignments},
		{method: "GET", path: "/v1/nodes/{node}/sessions/{id}", summary: "Agent: connect to a session its poll asked for: an upgrade (Connection: Upgrade, Upgrade: ferry-session)", node: true, raw: s.nodeSession, upgrade: true},
		{method: "DELETE", path: "/v1/computes/{name}", summary: "Delete a compute target", handle: s.deleteCompute},
		{method: "GET", path: "/v1/sizes", summary: "The size catalog: node shapes clusters and serverless jobs use", handle: s.listSizes},
		{method: "GET", path: "/v1/environments", summary: "List registered environments (?name= for the versions of one)", handle: s.listEnvironments},
		{method: "POST", path: "/v1/environments", summary: "Register an environment version: {spec, context_snapshot}", handle: s.createEnvironment},
		{method: "GET", path: "/v1/environments/catalog", summary: "The catalog of curated environments (Azure's built-in ones) that references resolve through after the registered ones", handle: s.environmentCatalog},
		{method: "GET", path: "/v1/environments/{name}/versions/{version}", summary: "Show an environment version (version latest: the one registered last)", handle: s.getEnvironment},
		{method: "POST", path: "/v1/jobs", summary: "Submit a job: {spec, code_snapshot, input_snapshots, environment_snapshot}", handle: s.createJob},
		{method: "GET", path: "/v1/jobs", summary: "List jobs, newest first (?status=&compute=&experiment=&limit=; ?before=NAME for the page after the one that ended with job NAME)", handle: s.listJobs},
		{method: "GET", path: "/v1/jobs/{name}", summary: "Show a job with its status history", handle: s.getJob},
		{method: "POST", path: "/v1/jobs/{name}/cancel", summary: "Cancel a job", handle: s.cancelJob},
		{method: "GET", path: "/v1/jobs/{name}/logs", summary: "A job's log from ?offset=, following it while it runs with ?follow=true", raw: s.streamLogs},
		{method: "GET", path: "/v1/jobs/{name}/metrics", summary: "A job's metric series (?name= for one metric)", handle: s.listMetrics},
		{method: "POST", path: "/v1/jobs/{name}/metrics", summary: "Log metric values: {name, value, step, time} or {metrics: [...]}", run: true, handle: s.addMetrics},
		{method: "GET", path: "/v1/jobs/{name}/run-values", summary: "A job's MLflow params and tags", handle: s.getRunValues},
		{method: "POST", path: "/v1/jobs/{name}/run-values", summary: "Set params and tags: {params: {KEY: VALUE}, tags: {KEY: VALUE}}", run: true, handle: s.setRunValues},
		{method: "GET", path: "/v1/jobs/{name}/outputs", summary: "Snapshot ids of a job's outputs", handle: s.getOutputs},
		{method: "GET", path: "/v1/jobs/{name}/attempts/{attempt}/assignment", summary: "Runner: what to run", run: true, handle: s.assignment},
		{method: "POST", path: "/v1/jobs/{name}/attempts/{attempt}/heartbeat", summary: "Runner: renew the lease; says whether to stop", run: true, handle: s.heartbeat},
		{method: "POST", path: "/v1/jobs/{name}/attempts/{attempt}/status", summary: "Runner: report progress or the end", run: true, handle: s.reportStatus},
		{method: "GET", path: "/v1/jobs/{name}/attempts/{attempt}/logs", summary: "Runner: how many log bytes are stored", run: true, handle: s.logSize},
		{method: "POST", path: "/v1/jobs/{name}/attempts/{attempt}/logs", summary: "Runner: append log bytes starting at ?offset=", run: true, handle: s.appendLog},
		{method: "PUT", path: "/v1/jobs/{name}/attempts/{attempt}/outputs", summary: "Runner: record output snapshots", run: true, handle: s.setOutputs},
		{method: "POST", path: "/v1/blobs/missing", summary: "Which of {digests: [...]} are not stored", run: true, handle: s.missingBlobs},
		{method: "POST", path: "/v1/blobs/batch", summary: "Upload many blobs in one request: a tar stream (application/x-tar) of regular files each named by the SHA-256 of its content; all or none are stored", run: true, handle: s.putBlobs},
		{method: "PUT", path: "/v1/blobs/{digest}", summary: "Upload content by its SHA-256", run: true, handle: s.putBlob},
		{method: "GET", path: "/v1/blobs/{digest}", summary: "Download content by its SHA-256", run: true, raw: s.getBlob},
		{method: "POST", path: "/v1/snapshots/stream", summary: "Upload a whole folder as a snapshot in one request: a snapshot stream (application/x-ferry-snapshot-stream): the magic FRYSNAP\\x01, then per file a uvarint path length, the path, a uvarint mode, a uvarint size and the content, ended by a uvarint 0. The server checks every path and size, hashes the content, stores it and the manifest it builds, all or nothing, and answers {id, files, bytes}", run: true, handle: s.putSnapshotStream},
		{method: "POST", path: "/v1/snapshots", summary: "Store a snapshot manifest whose files are uploaded", run: true, handle: s.createSnapshot},
		{method: "GET", path: "/v1/snapshots/{id}", summary: "Get a snapshot manifest", run: true, handle: s.getSnapshot},
	}
	s.routes = append(s.routes, s.modelRoutes()...)
	s.routes = append(s.routes, s.dataRoutes()...)
	s.routes = append(s.routes, s.pipelineRoutes()...)
	s.routes = append(s.routes, s.datastoreRoutes()...)
	if wl.Online != nil {
		s.routes = append(s.routes, s.endpointRoutes()...)
		s.routes = append(s.routes, s.deploymentRoutes()...)
	}
	s.routes = append(s.routes, s.scheduleRoutes()...)
	if wl.Batch != nil {
		s.routes = append(s.routes, s.batchRoutes()...)
	}
	for _, rt := range s.routes {
		s.mux.HandleFunc(rt.method+" "+rt.path, s.wrap(rt))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, apperr.NotFound("no API operation %s %s; see /openapi.json", r.Method, r.URL.Path))
	})
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) wrap(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var who auth.Principal
		if !rt.public {
			p, err := s.authenticate(r)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if err := authorize(rt, p, r); err != nil {
				s.writeError(w, r, err)
				return
			}
			who = p
		}
		if rt.raw != nil {
			if err := rt.raw(w, r, who); err != nil {
				s.writeError(w, r, err)
			}
			return
		}
		v, err := rt.handle(r, who)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *Server) authenticate(r *http.Request) (auth.Principal, error) {
	// The studio's in-process calls carry their session's token hash in
	// the request's context, which no network request can (auth.WithTokenHash).
	hash, inProcess := auth.TokenHashFrom(r.Context())
	if !inProcess {
		h := r.Header.Get("Authorization")
		secret, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || strings.TrimSpace(secret) == "" {
			return auth.Principal{}, apperr.Unauthorized("missing token: send `Authorization: Bearer <token>` (the owner token is in the server's data dir, owner.token)")
		}
		hash = auth.Hash(secret)
	}
	t, err := s.tokens.TokenByHash(r.Context(), hash)
	if errors.Is(err, store.ErrNotFound) {
		return auth.Principal{}, apperr.Unauthorized("the token is not valid for this workspace (wrong, revoked or from another workspace)")
	}
	if err != nil {
		return auth.Principal{}, err
	}
	return auth.Principal{Kind: t.Kind, Subject: t.Subject, Attempt: t.Attempt}, nil
}

var statusOf = map[apperr.Code]int{
	apperr.CodeInternal:     http.StatusInternalServerError,
	apperr.CodeInvalid:      http.StatusBadRequest,
	apperr.CodeNotFound:     http.StatusNotFound,
	apperr.CodeConflict:     http.StatusConflict,
	apperr.CodeUnauthorized: http.StatusUnauthorized,
	apperr.CodeForbidden:    http.StatusForbidden,
	apperr.CodeTooLarge:     http.StatusRequestEntityTooLarge,
	apperr.CodeUnavailable:  http.StatusServiceUnavailable,
	apperr.CodeNoSpace:      http.StatusInsufficientStorage,
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := apperr.CodeOf(err)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		code = apperr.CodeTooLarge
		err = &apperr.Error{Code: code, Msg: fmt.Sprintf("the request body is over its limit of %d bytes", tooBig.Limit)}
	}
	status := statusOf[code]
	if errors.Is(err, httplimit.ErrBodyTooSlow) {
		// The client's own doing, with its own status; the rest of the
		// body will not come, so the connection ends with the answer.
		code, status = apperr.CodeInvalid, http.StatusRequestTimeout
		err = &apperr.Error{Code: code, Msg: "reading the request body: " + err.Error()}
		w.Header().Set("Connection", "close")
	}
	p := apitypes.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: err.Error()}
	var fe spec.Errors
	if errors.As(err, &fe) {
		p.Errors = fe
	}
	if we := (*apperr.Error)(nil); code == apperr.CodeNoSpace && !errors.As(err, &we) {
		p.Detail = "the server's disk is full: nothing was stored; free space in the server's data directory and try again"
	}
	if code == apperr.CodeNoSpace {
		s.log.Warn("the data directory's disk is full; writes are refused until there is room", "method", r.Method, "path", r.URL.Path, "err", errors.Unwrap(err))
	}
	if code == apperr.CodeInternal {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		p.Detail = "internal error; the server's log has the details"
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a strict JSON body into v.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) || errors.Is(err, httplimit.ErrBodyTooSlow) {
			return err
		}
		return apperr.Invalid("request body: %v", err)
	}
	return nil
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
}

func attemptOf(r *http.Request) (int, error) {
	a, err := strconv.Atoi(r.PathValue("attempt"))
	if err != nil || a < 1 {
		return 0, apperr.Invalid("attempt: %q is not an attempt number", r.PathValue("attempt"))
	}
	return a, nil
}

func (s *Server) healthz(*http.Request, auth.Principal) (any, error) {
	return map[string]string{"status": "ok"}, nil
}

// ---- computes ----

func (s *Server) listComputes(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.ListComputes(r.Context())
}

func (s *Server) createCompute(r *http.Request, who auth.Principal) (any, error) {
	body, err := readBody(r, maxJSONBody)
	if err != nil {
		return nil, err
	}
	c, err := spec.DecodeComputeJSON(body)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.CreateCompute(r.Context(), c)
}

func (s *Server) getCompute(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.GetCompute(r.Context(), r.PathValue("name"))
}

func (s *Server) deleteCompute(r *http.Request, _ auth.Principal) (any, error) {
	if err := s.ws.DeleteCompute(r.Context(), r.PathValue("name")); err != nil {
		return nil, err
	}
	return map[string]string{"deleted": r.PathValue("name")}, nil
}

// ---- nodes and clusters ----

func (s *Server) listNodes(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Nodes().ListNodes(r.Context(), r.PathValue("name"))
}

func (s *Server) computeEvents(r *http.Request, _ auth.Principal) (any, error) {
	if _, err := s.ws.GetCompute(r.Context(), r.PathValue("name")); err != nil {
		return nil, err
	}
	return s.ws.Nodes().ComputeEvents(r.Context(), r.PathValue("name"), 0)
}

func (s *Server) preemptNode(r *http.Request, who auth.Principal) (any, error) {
	return s.ws.Nodes().PreemptNode(r.Context(), who, r.PathValue("name"), r.PathValue("node"))
}

func (s *Server) resizeCompute(r *http.Request, who auth.Principal) (any, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("only an owner may resize computes")
	}
	var req apitypes.ResizeRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	return s.ws.Nodes().ResizeCompute(r.Context(), r.PathValue("name"), req.MinInstances, req.MaxInstances, req.IdleTimeBeforeScaleDown)
}

func (s *Server) instanceAction(action string) func(*http.Request, auth.Principal) (any, error) {
	return func(r *http.Request, who auth.Principal) (any, error) {
		name := r.PathValue("name")
		switch action {
		case "start":
			return s.ws.Nodes().StartInstance(r.Context(), who, name)
		case "stop":
			return s.ws.Nodes().StopInstance(r.Context(), who, name)
		}
		return s.ws.Nodes().RestartInstance(r.Context(), who, name)
	}
}

func (s *Server) listQuotas(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Nodes().ListQuotas(r.Context())
}

func (s *Server) setQuota(r *http.Request, who auth.Principal) (any, error) {
	var req struct {
		Cores *int `json:"cores"`
	}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if req.Cores == nil {
		return nil, apperr.Invalid("cores: say how many cores the family may use, e.g. {\"cores\": 48}")
	}
	if err := s.ws.Nodes().SetQuota(r.Context(), who, r.PathValue("family"), *req.Cores); err != nil {
		return nil, err
	}
	return s.ws.Nodes().ListQuotas(r.Context())
}

func (s *Server) enableSize(r *http.Request, who auth.Principal) (any, error) {
	if err := s.ws.Nodes().EnableSize(r.Context(), who, r.PathValue("size")); err != nil {
		return nil, err
	}
	return map[string]string{"enabled": r.PathValue("size")}, nil
}

func (s *Server) joinNode(r *http.Request, who auth.Principal) (any, error) {
	var req nodeproto.JoinRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	return s.ws.Nodes().JoinNode(r.Context(), who, req)
}

func (s *Server) nodeHeartbeat(r *http.Request, who auth.Principal) (any, error) {
	var hb nodeproto.Heartbeat
	if err := decode(r, &hb); err != nil {
		return nil, err
	}
	return s.ws.Nodes().NodeHeartbeat(r.Context(), who, r.PathValue("node"), hb)
}

func (s *Server) nodeAssignments(r *http.Request, who auth.Principal) (any, error) {
	wait := time.Duration(0)
	if w := r.URL.Query().Get("wait"); w != "" {
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 || n > 3600 {
			return nil, apperr.Invalid("wait: %q is not a number of seconds from 0 to 3600 (the server waits at most 60)", w)
		}
		wait = time.Duration(n) * time.Second
	}
	return s.ws.Nodes().NodeAssignments(r.Context(), who, r.PathValue("node"), wait)
}

// ---- sizes ----

func (s *Server) listSizes(*http.Request, auth.Principal) (any, error) { return s.ws.ListSizes(), nil }

// ---- environments ----

func (s *Server) createEnvironment(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.EnvironmentRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 {
		return nil, apperr.Invalid("spec: the environment spec is missing")
	}
	f, err := spec.DecodeEnvironmentJSON(req.Spec)
	if err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return s.ws.Assets().CreateEnvironment(r.Context(), who, f, req.ContextSnapshot)
}

func (s *Server) listEnvironments(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().ListEnvironments(r.Context(), r.URL.Query().Get("name"))
}

func (s *Server) environmentCatalog(*http.Request, auth.Principal) (any, error) {
	return s.ws.Assets().CatalogEnvironments(), nil
}

func (s *Server) getEnvironment(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.Assets().GetEnvironment(r.Context(), r.PathValue("name"), r.PathValue("version"))
}

// ---- jobs ----

func (s *Server) createJob(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.JobRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	sub, err := submission(req)
	if err != nil {
		return nil, err
	}
	return s.ws.SubmitJob(r.Context(), who, sub)
}

func (s *Server) listJobs(r *http.Request, _ auth.Principal) (any, error) {
	q := r.URL.Query()
	f := store.JobFilter{Compute: q.Get("compute"), Experiment: q.Get("experiment"), Before: q.Get("before")}
	if st := q.Get("status"); st != "" {
		f.Statuses = strings.Split(st, ",")
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return nil, apperr.Invalid("limit: %q is not a count", l)
		}
		f.Limit = n
	}
	return s.ws.ListJobs(r.Context(), f)
}

func (s *Server) getJob(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.GetJob(r.Context(), r.PathValue("name"), true)
}

func (s *Server) cancelJob(r *http.Request, who auth.Principal) (any, error) {
	return s.ws.CancelJob(r.Context(), who, r.PathValue("name"))
}

// submission reads the job of a request: POST /v1/jobs's, and the job a
// schedule fires.
func submission(req apitypes.JobRequest) (workspace.Submission, error) {
	if len(req.Spec) == 0 {
		return workspace.Submission{}, apperr.Invalid("spec: the job spec is missing")
	}
	j, err := spec.DecodeJobJSON(req.Spec)
	if err != nil {
		return workspace.Submission{}, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return workspace.Submission{
		Spec: j, CodeSnapshot: req.CodeSnapshot, InputSnapshots: req.InputSnapshots, EnvironmentSnapshot: req.EnvironmentSnapshot}, nil
}

// flushWriter flushes after every write so a follower sees lines at once.
type flushWriter struct {
	w http.ResponseWriter
	f *http.ResponseController
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if err == nil {
		err = fw.f.Flush()
	}
	return n, err
}

func (s *Server) streamLogs(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	name := r.PathValue("name")
	var offset int64
	if o := r.URL.Query().Get("offset"); o != "" {
		n, err := strconv.ParseInt(o, 10, 64)
		if err != nil || n < 0 {
			return apperr.Invalid("offset: %q is not a byte offset", o)
		}
		offset = n
	}
	follow := r.URL.Query().Get("follow") == "true"
	rank, err := rankOf(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	// Check the job exists before the 200 goes out.
	if _, _, err := s.ws.ReadLog(ctx, name, rank, 0, 0, io.Discard); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	out := flushWriter{w: w, f: http.NewResponseController(w)}
	for {
		changed := s.ws.Changes(name) // before reading, so no change is missed
		n, status, err := s.ws.ReadLog(ctx, name, rank, offset, 4<<20, out)
		offset += n
		if err != nil {
			s.log.Warn("log stream ended", "job", name, "err", err)
			return nil // the body has begun: all we can do is stop
		}
		if n > 0 {
			continue
		}
		// A runner ships all of its log before its final status, so once the
		// status read before this read was terminal, nothing more will come.
		if !follow || apitypes.IsTerminal(status) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(15 * time.Second):
		}
	}
}

func (s *Server) addMetrics(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.MetricsRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	ms := req.Metrics
	if req.Name != "" {
		ms = append(ms, req.Metric)
	}
	if req.Seq != 0 {
		rank, err := rankOf(r)
		if err != nil {
			return nil, err
		}
		high, err := s.ws.AddNumberedMetrics(r.Context(), who, r.PathValue("name"), rank, req.Seq, ms)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"recorded": int64(len(ms)), "seq": high}, nil
	}
	if err := s.ws.AddMetrics(r.Context(), who, r.PathValue("name"), ms); err != nil {
		return nil, err
	}
	return map[string]int{"recorded": len(ms)}, nil
}

func (s *Server) listMetrics(r *http.Request, _ auth.Principal) (any, error) {
	return s.ws.ListMetrics(r.Context(), r.PathValue("name"), r.URL.Query().Get("name"))
}

func (s *Server) getOutputs(r *http.Request, _ auth.Principal) (any, error) {
	j, err := s.ws.GetJob(r.Context(), r.PathValue("name"), false)
	if err != nil {
		return nil, err
	}
	if j.Outputs == nil {
		return &apitypes.Outputs{}, nil
	}
	return j.Outputs, nil
}

// ---- runner ----

func (s *Server) assignment(r *http.Request, who auth.Principal) (any, error) {
	a, err := attemptOf(r)
	if err != nil {
		return nil, err
	}
	return s.ws.Assignment(r.Context(), who, r.PathValue("name"), a)
}

func (s *Server) heartbeat(r *http.Request, who auth.Principal) (any, error) {
	a, err := attemptOf(r)
	if err != nil {
		return nil, err
	}
	return s.ws.Heartbeat(r.Context(), who, r.PathValue("name"), a)
}

func (s *Server) reportStatus(r *http.Request, who auth.Principal) (any, error) {
	a, err := attemptOf(r)
	if err != nil {
		return nil, err
	}
	var rep apitypes.Report
	if err := decode(r, &rep); err != nil {
		return nil, err
	}
	if err := s.ws.ReportStatus(r.Context(), who, r.PathValue("name"), a, rep); err != nil {
		return nil, err
	}
	return map[string]string{"status": rep.Status}, nil
}

// rankOf reads ?rank=, the node rank of a multi-node job's runner (0 when absent).
func rankOf(r *http.Request) (int, error) {
	v := r.URL.Query().Get("rank")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 100000 {
		return 0, apperr.Invalid("rank: %q is not a node rank", v)
	}
	return n, nil
}

func (s *Server) logSize(r *http.Request, who auth.Principal) (any, error) {
	a, err := attemptOf(r)
	if err != nil {
		return nil, err
	}
	rank, err := rankOf(r)
	if err != nil {
		return nil, err
	}
	n, err := s.ws.LogSize(r.Context(), who, r.PathValue("name"), a, rank)
	return apitypes.LogSize{Size: n}, err
}

func (s *Server) appendLog(r *http.Request, who auth.Principal) (any, error) {
	a, err := attemptOf(r)
	if err != nil {
		return nil, err
	}
	offset, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil || offset < 0 {
		return nil, apperr.Invalid("offset: %q is not a byte offset", r.URL.Query().Get("offset"))
	}
	data, err := readBody(r, maxLogChunk)
	if err != nil {
		return nil, err
	}
	rank, err := rankOf(r)
	if err != nil {
		return nil, err
	}
	n, err := s.ws.AppendLog(r.Context(), who, r.PathValue("name"), a, rank, offset, data)
	return apitypes.LogSize{Size: n}, err
}

func (s *Server) setOutputs(r *http.Request, who auth.Principal) (any, error) {
	a, err := attemptOf(r)
	if err != nil {
		return nil, err
	}
	var out apitypes.Outputs
	if err := decode(r, &out); err != nil {
		return nil, err
	}
	rank, err := rankOf(r)
	if err != nil {
		return nil, err
	}
	if rank > 0 {
		// A multi-node job's outputs are rank 0's, as Azure keeps the
		// outputs of the first node; the other ranks' are not recorded.
		return out, nil
	}
	if err := s.ws.SetOutputs(r.Context(), who, r.PathValue("name"), a, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ---- blobs and snapshots ----

func (s *Server) missingBlobs(r *http.Request, who auth.Principal) (any, error) {
	var req apitypes.DigestList
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	missing, err := s.ws.MissingBlobs(r.Context(), who, req.Digests)
	if missing == nil {
		missing = []string{}
	}
	return apitypes.DigestList{Digests: missing}, err
}

func (s *Server) putBlob(r *http.Request, who auth.Principal) (any, error) {
	d := r.PathValue("digest")
	if err := s.ws.PutBlob(r.Context(), who, d, http.MaxBytesReader(nil, r.Body, s.ws.MaxSnapshotSize())); err != nil {
		return nil, err
	}
	return map[string]string{"digest": d}, nil
}

func (s *Server) putBlobs(r *http.Request, who auth.Principal) (any, error) {
	n, err := s.ws.PutBlobs(r.Context(), who, http.MaxBytesReader(nil, r.Body, s.ws.MaxSnapshotSize()))
	return apitypes.BlobCount{Blobs: n}, err
}

func (s *Server) getBlob(w http.ResponseWriter, r *http.Request, who auth.Principal) error {
	f, err := s.ws.OpenBlob(r.Context(), who, r.PathValue("digest"))
	if err != nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, f)
	return nil
}

func (s *Server) createSnapshot(r *http.Request, who auth.Principal) (any, error) {
	body, err := readBody(r, 512<<20)
	if err != nil {
		return nil, err
	}
	id, err := s.ws.CreateSnapshot(r.Context(), who, body)
	return apitypes.SnapshotID{ID: id}, err
}

func (s *Server) putSnapshotStream(r *http.Request, who auth.Principal) (any, error) {
	return s.ws.PutSnapshotStream(r.Context(), who, r.Body)
}

func (s *Server) getSnapshot(r *http.Request, who auth.Principal) (any, error) {
	return s.ws.GetSnapshot(r.Context(), who, r.PathValue("id"))
}
