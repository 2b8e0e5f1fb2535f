package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
)

// The job's metrics endpoint also speaks the part of MLflow's tracking
// REST API (/api/2.0/mlflow/...) that a client uses for one run, so that a
// training script written for Azure ML, which logs with mlflow, runs
// unchanged: the job gets MLFLOW_TRACKING_URI (this endpoint),
// MLFLOW_RUN_ID (its own name), MLFLOW_EXPERIMENT_NAME and
// MLFLOW_TRACKING_TOKEN (its run token), as Azure sets them.
//
// There is one run, the job's own: runs/create answers it, whatever
// experiment it names, and every experiment name resolves to the job's
// experiment. Metrics go to the durable queue the JSON route feeds
// (metrics.go), so they are delivered once across restarts of the server.
// Params and tags are passed to the server as they come (setting one again
// replaces its value, so a retry does no harm); while the server is down
// the client is told 503 and tries again, as MLflow's client does by
// itself. Artifacts are not served here: the run's artifact_uri is the
// job's ./outputs folder as a file: URI, which a real mlflow client copies
// into directly.

// mlflowPrefixes are the path prefixes of MLflow's tracking API.
var mlflowPrefixes = []string{"/api/2.0/mlflow/", "/api/2.0/preview/mlflow/"}

// mlflowExperimentID is the id of the one experiment the endpoint knows.
const mlflowExperimentID = "1"

// Bounds of one MLflow request, MLflow's own for log-batch.
const (
	maxMLflowBody    = 4 << 20
	maxMLflowMetrics = 1000
)

// mlflowRun is the job's run as MLflow sees it.
type mlflowRun struct {
	job, experiment string
	artifactURI     string // file:// URI of the job's ./outputs
	started         time.Time
	// setValues passes params and tags to the server.
	setValues func(ctx context.Context, v apitypes.RunValues) error

	mu      sync.Mutex
	status  string // RUNNING, or what runs/update last set
	ended   int64  // end_time from runs/update, in ms
	name    string // run_name from runs/create or runs/update
	params  map[string]string
	tags    map[string]string
	metrics map[string]mlflowMetric // the last value of each, for runs/get
}

// mlflowError is an error in MLflow's shape: an error code its client
// knows, and the HTTP status.
type mlflowError struct {
	status int
	code   string
	msg    string
}

func (e *mlflowError) Error() string { return e.msg }

func badParam(format string, args ...any) error {
	return &mlflowError{http.StatusBadRequest, "INVALID_PARAMETER_VALUE", fmt.Sprintf(format, args...)}
}

// flexInt is an int64 that MLflow's JSON may carry as a number or, as
// proto3 JSON does for 64-bit integers, a string.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" || s == "" {
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fl, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || fl != math.Trunc(fl) || math.Abs(fl) > 1<<62 {
			return fmt.Errorf("%s is not an integer", b)
		}
		n = int64(fl)
	}
	*f = flexInt(n)
	return nil
}

// flexFloat is a double that MLflow's JSON may carry as a number or a
// string ("NaN", "Infinity" among them).
type flexFloat float64

func (f *flexFloat) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", b)
	}
	*f = flexFloat(v)
	return nil
}

// mlflowMetric is a metric as MLflow sends and answers it.
type mlflowMetric struct {
	Key       string    `json:"key"`
	Value     flexFloat `json:"value"`
	Timestamp flexInt   `json:"timestamp"`
	Step      flexInt   `json:"step"`
}

// mlflowKV is a param or a tag.
type mlflowKV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// mlflowRequest is any request of the subset, decoded: the fields each
// call reads, the rest zero. Unknown fields are ignored, as MLflow's own
// server does: newer clients send more.
type mlflowRequest struct {
	call           string  // the path after the prefix: "runs/log-metric"
	RunID          string  `json:"run_id"`
	RunUUID        string  `json:"run_uuid"` // older clients' name for run_id
	ExperimentID   string  `json:"experiment_id"`
	ExperimentName string  `json:"experiment_name"`
	Name           string  `json:"name"` // experiments/create
	RunName        string  `json:"run_name"`
	Status         string  `json:"status"`
	EndTime        flexInt `json:"-"` // end_time, decoded by decodeMLflow
	mlflowMetric
	Metrics []mlflowMetric `json:"metrics"`
	Params  []mlflowKV     `json:"params"`
	Tags    []mlflowKV     `json:"tags"`
	// StrValue is "value" of log-parameter and set-tag, a string where
	// log-metric's is a number.
	StrValue string `json:"-"`
}

// mlflowCalls are the calls of the subset and their methods. log-inputs
// and log-model (datasets and model records a real client sends along)
// are taken and kept nowhere.
var mlflowCalls = map[string]string{
	"runs/log-metric":         http.MethodPost,
	"runs/log-batch":          http.MethodPost,
	"runs/log-parameter":      http.MethodPost,
	"runs/set-tag":            http.MethodPost,
	"runs/get":                http.MethodGet,
	"runs/update":             http.MethodPost,
	"runs/create":             http.MethodPost,
	"runs/log-inputs":         http.MethodPost,
	"runs/log-model":          http.MethodPost,
	"experiments/get-by-name": http.MethodGet,
	"experiments/get":         http.MethodGet,
	"experiments/create":      http.MethodPost,
}

// decodeMLflow decodes a request of the subset from its method, the path
// after the API prefix, the query and the body. It checks what the
// request holds, not whether it names the job's run.
func decodeMLflow(method, call string, query url.Values, body []byte) (*mlflowRequest, error) {
	want, known := mlflowCalls[call]
	if !known {
		return nil, &mlflowError{http.StatusNotFound, "ENDPOINT_NOT_FOUND",
			fmt.Sprintf("MLflow's %s is not supported by Ferry's runner; see docs/metrics.md for the calls that are", call)}
	}
	if method != want {
		return nil, &mlflowError{http.StatusMethodNotAllowed, "BAD_REQUEST", fmt.Sprintf("%s takes %s, not %s", call, want, method)}
	}
	req := &mlflowRequest{call: call}
	if method == http.MethodGet {
		req.RunID, req.RunUUID = query.Get("run_id"), query.Get("run_uuid")
		req.ExperimentID, req.ExperimentName = query.Get("experiment_id"), query.Get("experiment_name")
		return checked(req)
	}
	if len(body) > maxMLflowBody {
		return nil, badParam("the request body is over %d bytes", maxMLflowBody)
	}
	// Unknown fields are ignored, as MLflow's own server does: newer
	// clients send more than this subset reads.
	var raw struct {
		mlflowRequest
		Value   json.RawMessage `json:"value"`
		EndTime flexInt         `json:"end_time"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, badParam("%s: the body is not the JSON MLflow sends: %v", call, err)
	}
	raw.mlflowRequest.call, raw.mlflowRequest.EndTime = call, raw.EndTime
	*req = raw.mlflowRequest
	if len(raw.Value) > 0 && string(raw.Value) != "null" {
		if call == "runs/log-metric" {
			if err := json.Unmarshal(raw.Value, &req.mlflowMetric.Value); err != nil {
				return nil, badParam("value: %v", err)
			}
		} else if err := json.Unmarshal(raw.Value, &req.StrValue); err != nil {
			return nil, badParam("value: a string is needed: %v", err)
		}
	}
	return checked(req)
}

// checked is req, or nil and what is wrong with it.
func checked(req *mlflowRequest) (*mlflowRequest, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	return req, nil
}

// check says what is wrong with a decoded request, naming the field.
func (q *mlflowRequest) check() error {
	switch q.call {
	case "runs/log-metric":
		return checkMLflowMetric("", q.mlflowMetric)
	case "runs/log-parameter", "runs/set-tag":
		if strings.TrimSpace(q.Key) == "" {
			return badParam("key: a key is needed")
		}
	case "runs/log-batch":
		if len(q.Metrics) > maxMLflowMetrics {
			return badParam("metrics: at most %d a batch (got %d)", maxMLflowMetrics, len(q.Metrics))
		}
		for i, m := range q.Metrics {
			if err := checkMLflowMetric(fmt.Sprintf("metrics[%d].", i), m); err != nil {
				return err
			}
		}
	case "experiments/get-by-name":
		if q.ExperimentName == "" {
			return badParam("experiment_name: a name is needed")
		}
	case "experiments/create":
		if strings.TrimSpace(q.Name) == "" {
			return badParam("name: an experiment needs a name")
		}
	case "runs/update":
		switch q.Status {
		case "", "RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED":
		default:
			return badParam("status: one of RUNNING, SCHEDULED, FINISHED, FAILED, KILLED (got %q)", q.Status)
		}
	}
	return workspaceCheck(q.kv())
}

func checkMLflowMetric(field string, m mlflowMetric) error {
	if err := apitypes.CheckMetric(apitypes.Metric{Name: m.Key}); err != nil {
		return badParam("%skey: a metric needs a name of 1 to 255 characters", field)
	}
	if v := float64(m.Value); math.IsNaN(v) || math.IsInf(v, 0) {
		return badParam("%svalue: %s is %v; Ferry records finite values only", field, m.Key, v)
	}
	return nil
}

// kv are the params and tags a request sets.
func (q *mlflowRequest) kv() apitypes.RunValues {
	v := apitypes.RunValues{Params: map[string]string{}, Tags: map[string]string{}}
	switch q.call {
	case "runs/log-parameter":
		v.Params[q.Key] = q.StrValue
	case "runs/set-tag":
		v.Tags[q.Key] = q.StrValue
	default:
		for _, p := range q.Params {
			v.Params[p.Key] = p.Value
		}
		for _, t := range q.Tags {
			v.Tags[t.Key] = t.Value
		}
	}
	return v
}

func workspaceCheck(v apitypes.RunValues) error {
	if err := apitypes.CheckRunValues(v); err != nil {
		return badParam("%v", err)
	}
	return nil
}

// metricsOf turns a request's metrics into the queue's values.
func (q *mlflowRequest) metricsOf(now time.Time) []apitypes.Metric {
	ms := q.Metrics
	if q.call == "runs/log-metric" {
		ms = []mlflowMetric{q.mlflowMetric}
	}
	out := make([]apitypes.Metric, len(ms))
	for i, m := range ms {
		t := now
		if m.Timestamp > 0 {
			t = time.UnixMilli(int64(m.Timestamp))
		}
		out[i] = apitypes.Metric{Name: m.Key, Value: float64(m.Value), Step: int64(m.Step), Time: t}
	}
	return out
}

// serveMLflow answers a request of MLflow's tracking API with the job's
// run token.
func (e *metricsEndpoint) serveMLflow(w http.ResponseWriter, r *http.Request, call string) {
	v, err := e.mlflow(r, call)
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		var me *mlflowError
		if !errors.As(err, &me) {
			me = &mlflowError{http.StatusInternalServerError, "INTERNAL_ERROR", err.Error()}
		}
		w.WriteHeader(me.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error_code": me.code, "message": me.msg})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func (e *metricsEndpoint) mlflow(r *http.Request, call string) (any, error) {
	run := e.run
	if run == nil {
		return nil, &mlflowError{http.StatusNotFound, "ENDPOINT_NOT_FOUND", "this runner serves no MLflow run"}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxMLflowBody+1))
	if err != nil {
		return nil, badParam("reading the body: %v", err)
	}
	q, err := decodeMLflow(r.Method, call, r.URL.Query(), body)
	if err != nil {
		return nil, err
	}
	switch q.call {
	case "experiments/get-by-name":
		return map[string]any{"experiment": run.experimentJSON(q.ExperimentName)}, nil
	case "experiments/get":
		run.mu.Lock()
		name := run.experiment
		run.mu.Unlock()
		return map[string]any{"experiment": run.experimentJSON(name)}, nil
	case "experiments/create":
		return map[string]string{"experiment_id": mlflowExperimentID}, nil
	case "runs/create":
		if err := e.setRunValues(r.Context(), q); err != nil {
			return nil, err
		}
		run.mu.Lock()
		if q.RunName != "" {
			run.name = q.RunName
		}
		run.mu.Unlock()
		return map[string]any{"run": run.runJSON()}, nil
	}
	id := q.RunID
	if id == "" {
		id = q.RunUUID
	}
	if id != run.job {
		return nil, &mlflowError{http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST",
			fmt.Sprintf("run_id: run %q is not this job's; a job logs to its own run, %q (MLFLOW_RUN_ID)", id, run.job)}
	}
	switch q.call {
	case "runs/get":
		return map[string]any{"run": run.runJSON()}, nil
	case "runs/update":
		run.mu.Lock()
		if q.Status != "" {
			run.status = q.Status
		}
		if q.EndTime > 0 {
			run.ended = int64(q.EndTime)
		}
		if q.RunName != "" {
			run.name = q.RunName
		}
		run.mu.Unlock()
		return map[string]any{"run_info": run.runJSON()["info"]}, nil
	case "runs/log-inputs", "runs/log-model":
		return map[string]any{}, nil // datasets and model records: nothing is kept
	}
	if ms := q.metricsOf(e.now()); len(ms) > 0 {
		if err := e.q.add(ms); err != nil {
			return nil, &mlflowError{http.StatusServiceUnavailable, "TEMPORARILY_UNAVAILABLE", fmt.Sprintf("%v: %v", errQueue, err)}
		}
		run.mu.Lock()
		for _, m := range q.Metrics {
			run.metrics[m.Key] = m
		}
		if q.call == "runs/log-metric" {
			run.metrics[q.Key] = q.mlflowMetric
		}
		run.mu.Unlock()
	}
	return map[string]any{}, e.setRunValues(r.Context(), q)
}

// setRunValues passes the params and tags of q to the server.
func (e *metricsEndpoint) setRunValues(ctx context.Context, q *mlflowRequest) error {
	v := q.kv()
	if len(v.Params)+len(v.Tags) == 0 {
		return nil
	}
	if err := e.run.setValues(ctx, v); err != nil {
		if s := client.StatusOf(err); s >= 400 && s < 500 {
			return badParam("%v", err)
		}
		return &mlflowError{http.StatusServiceUnavailable, "TEMPORARILY_UNAVAILABLE", fmt.Sprintf("the server did not take the params and tags yet; try again: %v", err)}
	}
	e.run.mu.Lock()
	defer e.run.mu.Unlock()
	for k, x := range v.Params {
		e.run.params[k] = x
	}
	for k, x := range v.Tags {
		e.run.tags[k] = x
	}
	return nil
}

func (run *mlflowRun) experimentJSON(name string) map[string]any {
	return map[string]any{"experiment_id": mlflowExperimentID, "name": name,
		"artifact_location": run.artifactURI, "lifecycle_stage": "active", "tags": []any{}}
}

// runJSON is the run as runs/get answers it.
func (run *mlflowRun) runJSON() map[string]map[string]any {
	run.mu.Lock()
	defer run.mu.Unlock()
	info := map[string]any{"run_id": run.job, "run_uuid": run.job, "run_name": run.name,
		"experiment_id": mlflowExperimentID, "user_id": "", "status": run.status,
		"start_time": run.started.UnixMilli(), "artifact_uri": run.artifactURI, "lifecycle_stage": "active"}
	if run.ended > 0 {
		info["end_time"] = run.ended
	}
	metrics, params, tags := []mlflowMetric{}, []mlflowKV{}, []mlflowKV{}
	for _, m := range run.metrics {
		metrics = append(metrics, m)
	}
	for k, v := range run.params {
		params = append(params, mlflowKV{k, v})
	}
	for k, v := range run.tags {
		tags = append(tags, mlflowKV{k, v})
	}
	return map[string]map[string]any{"info": info,
		"data": {"metrics": metrics, "params": params, "tags": tags}, "inputs": {}}
}
