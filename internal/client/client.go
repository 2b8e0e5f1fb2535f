// Package client is the Go client of Ferry's REST API v1. The CLI and the
// runner use nothing else to talk to a workspace.
package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/serverurl"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Client calls one workspace with one token. Safe for concurrent use.
type Client struct {
	base  *serverurl.URL
	token string
	http  *http.Client
	// Rank is the node rank a runner reports logs and status as, and
	// whose log StreamLogs reads (0: single-node jobs, and rank 0 of
	// multi-node ones).
	Rank int
	// Heard, when set, is called each time the server answers, whatever
	// the answer: a runner measures how long its server has been silent
	// with it. A gateway's 502, 503 or 504 is not the server answering.
	Heard func()
	// Unreached, when set, is called each time a request gets no answer
	// from the server (it could not be reached, or a gateway answered
	// 502, 503 or 504 for it), with the error: a runner logs each one
	// until the server first answers.
	Unreached func(err error)
}

// New returns a client of the workspace at baseURL.
func New(baseURL, token string) *Client {
	return NewWithHTTP(baseURL, token, &http.Client{})
}

// BaseURL is the workspace URL the client calls now.
func (c *Client) BaseURL() string { return c.base.Get() }

// FollowURLFile has the client read path, the file in which a server on
// this host records its URL (serverurl.FileName in its work dir), each
// time a call cannot reach the server, and call the URL it names from
// then on: what the server started on its host finds it again when it
// comes back at another address. moved, when not nil, hears each switch
// once; bad, when not nil, hears a file that cannot be read or holds no
// URL. Call it before the client is used.
func (c *Client) FollowURLFile(path string, moved func(from, to string), bad func(error)) {
	u := serverurl.New(c.base.Get(), path)
	u.Moved, u.BadFile = moved, bad
	c.base = u
}

// APIError is a problem document returned by the server.
type APIError struct {
	apitypes.Problem
}

func (e *APIError) Error() string {
	if len(e.Errors) > 1 {
		var b strings.Builder
		b.WriteString("invalid request:")
		for _, fe := range e.Errors {
			b.WriteString("\n  - " + fe.Error())
		}
		return b.String()
	}
	return e.Detail
}

// StatusOf returns the HTTP status of an API error, or 0 for other errors
// (the server could not be reached, for example).
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

func (c *Client) request(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	base := c.base.Get()
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		err = fmt.Errorf("cannot reach the Ferry workspace at %s: %w", base, err)
		if ctx.Err() == nil {
			// The server may have come back elsewhere: the caller's
			// next try goes where the file says it is now.
			c.base.Reread()
			if u := c.Unreached; u != nil {
				u(err)
			}
		}
		return nil, err
	}
	if resp.StatusCode < 502 || resp.StatusCode > 504 {
		if h := c.Heard; h != nil {
			h()
		}
	} else if u := c.Unreached; u != nil {
		u(fmt.Errorf("%s %s: a gateway answered %s for the Ferry workspace at %s", method, path, resp.Status, base))
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		ae := &APIError{}
		if json.Unmarshal(data, &ae.Problem) != nil || ae.Detail == "" {
			ae.Problem = apitypes.Problem{Status: resp.StatusCode, Title: resp.Status, Detail: fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))}
		}
		ae.Status = resp.StatusCode
		return nil, ae
	}
	return resp, nil
}

// do sends in as JSON (if not nil) and decodes the reply into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(data), "application/json"
	}
	resp, err := c.request(ctx, method, path, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Health checks that the server answers.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, "GET", "/healthz", nil, nil)
}

// ---- computes ----

// Computes are the compute targets.
var Computes = Named[apitypes.Compute, *spec.Compute]{Path: "/v1/computes"}

// CreateCompute creates a compute target.
func (c *Client) CreateCompute(ctx context.Context, s *spec.Compute) (*apitypes.Compute, error) {
	return Computes.Create(ctx, c, s)
}

// ListComputes lists compute targets.
func (c *Client) ListComputes(ctx context.Context) ([]*apitypes.Compute, error) {
	return Computes.List(ctx, c)
}

// GetCompute shows one compute target.
func (c *Client) GetCompute(ctx context.Context, name string) (*apitypes.Compute, error) {
	return Computes.Get(ctx, c, name)
}

// DeleteCompute deletes a compute target.
func (c *Client) DeleteCompute(ctx context.Context, name string) error {
	return Computes.Delete(ctx, c, name)
}

// ---- jobs ----

// SubmitJob creates a job.
func (c *Client) SubmitJob(ctx context.Context, req apitypes.JobRequest) (*apitypes.Job, error) {
	var out apitypes.Job
	return &out, c.do(ctx, "POST", "/v1/jobs", req, &out)
}

// ListNodes lists a cluster's nodes.
func (c *Client) ListNodes(ctx context.Context, compute string) ([]*apitypes.Node, error) {
	var out []*apitypes.Node
	return out, c.do(ctx, "GET", Computes.ItemPath(compute)+"/nodes", nil, &out)
}

// ComputeEvents returns every event of a compute, oldest first.
func (c *Client) ComputeEvents(ctx context.Context, compute string) ([]apitypes.ComputeEvent, error) {
	var out []apitypes.ComputeEvent
	return out, c.do(ctx, "GET", Computes.ItemPath(compute)+"/events", nil, &out)
}

// PreemptNode preempts a node of a low-priority cluster.
func (c *Client) PreemptNode(ctx context.Context, compute, node string) (*apitypes.Node, error) {
	var out apitypes.Node
	return &out, c.do(ctx, "POST", Computes.ItemPath(compute)+"/nodes/"+url.PathEscape(node)+"/preempt", nil, &out)
}

// ResizeCompute changes a cluster's bounds.
func (c *Client) ResizeCompute(ctx context.Context, compute string, req apitypes.ResizeRequest) (*apitypes.Compute, error) {
	var out apitypes.Compute
	return &out, c.do(ctx, "POST", Computes.ItemPath(compute)+"/resize", req, &out)
}

// InstanceAction starts, stops or restarts a compute instance.
func (c *Client) InstanceAction(ctx context.Context, compute, action string) (*apitypes.Compute, error) {
	var out apitypes.Compute
	return &out, c.do(ctx, "POST", Computes.ItemPath(compute)+"/"+action, nil, &out)
}

// ListQuotas lists core quotas and use per family.
func (c *Client) ListQuotas(ctx context.Context) ([]apitypes.Quota, error) {
	var out []apitypes.Quota
	return out, c.do(ctx, "GET", "/v1/quotas", nil, &out)
}

// SetQuota sets a family's core quota.
func (c *Client) SetQuota(ctx context.Context, family string, cores int) ([]apitypes.Quota, error) {
	var out []apitypes.Quota
	return out, c.do(ctx, "PUT", "/v1/quotas/"+url.PathEscape(family), map[string]int{"cores": cores}, &out)
}

// EnableSize lets clusters of a restricted size be made.
func (c *Client) EnableSize(ctx context.Context, size string) error {
	return c.do(ctx, "POST", "/v1/sizes/"+url.PathEscape(size)+"/enable", nil, nil)
}

// ListSizes returns the workspace's size catalog.
func (c *Client) ListSizes(ctx context.Context) ([]sizes.Size, error) {
	var out []sizes.Size
	return out, c.do(ctx, "GET", "/v1/sizes", nil, &out)
}

// GetJob shows a job with its history.
func (c *Client) GetJob(ctx context.Context, name string) (*apitypes.Job, error) {
	var out apitypes.Job
	return &out, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(name), nil, &out)
}

// ListJobs lists jobs, newest first. q may hold status, compute and limit.
func (c *Client) ListJobs(ctx context.Context, q url.Values) ([]*apitypes.Job, error) {
	var out []*apitypes.Job
	return out, c.do(ctx, "GET", "/v1/jobs?"+q.Encode(), nil, &out)
}

// CancelJob cancels a job.
func (c *Client) CancelJob(ctx context.Context, name string) (*apitypes.Job, error) {
	var out apitypes.Job
	return &out, c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(name)+"/cancel", nil, &out)
}

// StreamLogs copies a job's log from offset to w, following it until the
// job ends when follow is set, and returns the new offset. On an error the
// offset says how far it got, so a caller can resume.
func (c *Client) StreamLogs(ctx context.Context, name string, offset int64, follow bool, w io.Writer) (int64, error) {
	path := fmt.Sprintf("/v1/jobs/%s/logs?offset=%d&follow=%t", url.PathEscape(name), offset, follow) + c.rankQuery("&")
	resp, err := c.request(ctx, "GET", path, nil, "")
	if err != nil {
		return offset, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	return offset + n, err
}

// Metrics returns a job's metric series (all metrics if name is "").
func (c *Client) Metrics(ctx context.Context, job, name string) ([]apitypes.Metric, error) {
	var out []apitypes.Metric
	return out, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(job)+"/metrics?name="+url.QueryEscape(name), nil, &out)
}

// AddNumberedMetrics logs metric values numbered from first in the
// sequence of the run token's attempt and the client's Rank; values the
// server already has under their numbers are skipped (see
// api.MetricsRequest).
func (c *Client) AddNumberedMetrics(ctx context.Context, job string, first int64, ms []apitypes.Metric) error {
	return c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(job)+"/metrics"+c.rankQuery("?"), apitypes.MetricsRequest{Metrics: ms, Seq: first}, nil)
}

// AddMetrics logs metric values.
func (c *Client) AddMetrics(ctx context.Context, job string, ms []apitypes.Metric) error {
	return c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(job)+"/metrics", apitypes.MetricsRequest{Metrics: ms}, nil)
}

// Outputs returns the snapshot ids of a job's outputs.
func (c *Client) Outputs(ctx context.Context, job string) (*apitypes.Outputs, error) {
	var out apitypes.Outputs
	return &out, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(job)+"/outputs", nil, &out)
}

// ---- runner calls ----

func attemptPath(job string, attempt int, what string) string {
	return "/v1/jobs/" + url.PathEscape(job) + "/attempts/" + strconv.Itoa(attempt) + "/" + what
}

// Assignment fetches what an attempt runs.
func (c *Client) Assignment(ctx context.Context, job string, attempt int) (*apitypes.Assignment, error) {
	var out apitypes.Assignment
	return &out, c.do(ctx, "GET", attemptPath(job, attempt, "assignment"), nil, &out)
}

// Heartbeat renews an attempt's lease.
func (c *Client) Heartbeat(ctx context.Context, job string, attempt int) (*apitypes.HeartbeatReply, error) {
	var out apitypes.HeartbeatReply
	return &out, c.do(ctx, "POST", attemptPath(job, attempt, "heartbeat"), struct{}{}, &out)
}

// ReportStatus reports an attempt's progress or end, as the client's Rank.
func (c *Client) ReportStatus(ctx context.Context, job string, attempt int, r apitypes.Report) error {
	r.Rank = c.Rank
	return c.do(ctx, "POST", attemptPath(job, attempt, "status"), r, nil)
}

// rankQuery is "rank=R" after sep for a runner of node rank R > 0.
func (c *Client) rankQuery(sep string) string {
	if c.Rank == 0 {
		return ""
	}
	return sep + "rank=" + strconv.Itoa(c.Rank)
}

// LogSize returns how many bytes of an attempt's log the server has.
func (c *Client) LogSize(ctx context.Context, job string, attempt int) (int64, error) {
	var out apitypes.LogSize
	err := c.do(ctx, "GET", attemptPath(job, attempt, "logs")+c.rankQuery("?"), nil, &out)
	return out.Size, err
}

// AppendLog sends log bytes that start at offset; it returns the stored size.
func (c *Client) AppendLog(ctx context.Context, job string, attempt int, offset int64, data []byte) (int64, error) {
	resp, err := c.request(ctx, "POST", attemptPath(job, attempt, "logs")+"?offset="+strconv.FormatInt(offset, 10)+c.rankQuery("&"), bytes.NewReader(data), "application/octet-stream")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out apitypes.LogSize
	return out.Size, json.NewDecoder(resp.Body).Decode(&out)
}

// SetOutputs records an attempt's output snapshots.
func (c *Client) SetOutputs(ctx context.Context, job string, attempt int, o apitypes.Outputs) error {
	return c.do(ctx, "PUT", attemptPath(job, attempt, "outputs")+c.rankQuery("?"), o, nil)
}

// Download writes snapshot id into dest.
func (c *Client) Download(ctx context.Context, id, dest string) error {
	m, err := c.GetSnapshot(ctx, id)
	if err != nil {
		return err
	}
	return snapshot.Extract(m, dest, func(d string) (io.ReadCloser, error) { return c.GetBlob(ctx, d) })
}

// Retry calls fn until it succeeds, ctx ends, or fn fails with an error the
// server meant (a 4xx), backing off up to max between tries. It is how the
// runner rides out a server restart.
func Retry(ctx context.Context, max time.Duration, fn func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if s := StatusOf(err); s >= 400 && s < 500 {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(wait*2, max)
	}
}

// RunValues returns a job's MLflow params and tags.
func (c *Client) RunValues(ctx context.Context, job string) (*apitypes.RunValues, error) {
	var out apitypes.RunValues
	return &out, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(job)+"/run-values", nil, &out)
}

// SetRunValues sets params and tags of a job; setting a key again
// replaces its value, so a call sent twice does no harm.
func (c *Client) SetRunValues(ctx context.Context, job string, v apitypes.RunValues) error {
	return c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(job)+"/run-values", v, nil)
}
