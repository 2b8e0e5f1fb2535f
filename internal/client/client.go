// Package client is the Go client of Ferry's REST API v1. The CLI and the
// runner use nothing else to talk to a workspace.
package client

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Client calls one workspace with one token. Safe for concurrent use.
type Client struct {
	base  string
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
}

// New returns a client of the workspace at baseURL.
func New(baseURL, token string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), token: strings.TrimSpace(token), http: &http.Client{}}
}

// BaseURL is the workspace URL the client calls.
func (c *Client) BaseURL() string { return c.base }

// APIError is a problem document returned by the server.
type APIError struct {
	api.Problem
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
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
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
		return nil, fmt.Errorf("cannot reach the Ferry workspace at %s: %w", c.base, err)
	}
	if h := c.Heard; h != nil && (resp.StatusCode < 502 || resp.StatusCode > 504) {
		h()
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		ae := &APIError{}
		if json.Unmarshal(data, &ae.Problem) != nil || ae.Detail == "" {
			ae.Problem = api.Problem{Status: resp.StatusCode, Title: resp.Status, Detail: fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))}
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

// CreateCompute creates a compute target.
func (c *Client) CreateCompute(ctx context.Context, s *spec.Compute) (*workspace.Compute, error) {
	var out workspace.Compute
	return &out, c.do(ctx, "POST", "/v1/computes", s, &out)
}

// ListComputes lists compute targets.
func (c *Client) ListComputes(ctx context.Context) ([]*workspace.Compute, error) {
	var out []*workspace.Compute
	return out, c.do(ctx, "GET", "/v1/computes", nil, &out)
}

// GetCompute shows one compute target.
func (c *Client) GetCompute(ctx context.Context, name string) (*workspace.Compute, error) {
	var out workspace.Compute
	return &out, c.do(ctx, "GET", "/v1/computes/"+url.PathEscape(name), nil, &out)
}

// DeleteCompute deletes a compute target.
func (c *Client) DeleteCompute(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/computes/"+url.PathEscape(name), nil, nil)
}

// ---- jobs ----

// SubmitJob creates a job.
func (c *Client) SubmitJob(ctx context.Context, req api.JobRequest) (*workspace.Job, error) {
	var out workspace.Job
	return &out, c.do(ctx, "POST", "/v1/jobs", req, &out)
}

// ListNodes lists a cluster's nodes.
func (c *Client) ListNodes(ctx context.Context, compute string) ([]*workspace.Node, error) {
	var out []*workspace.Node
	return out, c.do(ctx, "GET", "/v1/computes/"+url.PathEscape(compute)+"/nodes", nil, &out)
}

// ComputeEvents returns every event of a compute, oldest first.
func (c *Client) ComputeEvents(ctx context.Context, compute string) ([]workspace.ComputeEvent, error) {
	var out []workspace.ComputeEvent
	return out, c.do(ctx, "GET", "/v1/computes/"+url.PathEscape(compute)+"/events", nil, &out)
}

// PreemptNode preempts a node of a low-priority cluster.
func (c *Client) PreemptNode(ctx context.Context, compute, node string) (*workspace.Node, error) {
	var out workspace.Node
	return &out, c.do(ctx, "POST", "/v1/computes/"+url.PathEscape(compute)+"/nodes/"+url.PathEscape(node)+"/preempt", nil, &out)
}

// ResizeCompute changes a cluster's bounds.
func (c *Client) ResizeCompute(ctx context.Context, compute string, req api.ResizeRequest) (*workspace.Compute, error) {
	var out workspace.Compute
	return &out, c.do(ctx, "POST", "/v1/computes/"+url.PathEscape(compute)+"/resize", req, &out)
}

// InstanceAction starts, stops or restarts a compute instance.
func (c *Client) InstanceAction(ctx context.Context, compute, action string) (*workspace.Compute, error) {
	var out workspace.Compute
	return &out, c.do(ctx, "POST", "/v1/computes/"+url.PathEscape(compute)+"/"+action, nil, &out)
}

// ListQuotas lists core quotas and use per family.
func (c *Client) ListQuotas(ctx context.Context) ([]workspace.Quota, error) {
	var out []workspace.Quota
	return out, c.do(ctx, "GET", "/v1/quotas", nil, &out)
}

// SetQuota sets a family's core quota.
func (c *Client) SetQuota(ctx context.Context, family string, cores int) ([]workspace.Quota, error) {
	var out []workspace.Quota
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

// CreateEnvironment registers an environment version.
func (c *Client) CreateEnvironment(ctx context.Context, req api.EnvironmentRequest) (*workspace.Environment, error) {
	var out workspace.Environment
	return &out, c.do(ctx, "POST", "/v1/environments", req, &out)
}

// ListEnvironments lists registered environments; name "" lists all.
func (c *Client) ListEnvironments(ctx context.Context, name string) ([]*workspace.Environment, error) {
	var out []*workspace.Environment
	return out, c.do(ctx, "GET", "/v1/environments?name="+url.QueryEscape(name), nil, &out)
}

// GetEnvironment shows one environment version ("latest" for the last).
func (c *Client) GetEnvironment(ctx context.Context, name, version string) (*workspace.Environment, error) {
	var out workspace.Environment
	return &out, c.do(ctx, "GET", "/v1/environments/"+url.PathEscape(name)+"/versions/"+url.PathEscape(version), nil, &out)
}

// GetJob shows a job with its history.
func (c *Client) GetJob(ctx context.Context, name string) (*workspace.Job, error) {
	var out workspace.Job
	return &out, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(name), nil, &out)
}

// ListJobs lists jobs, newest first. q may hold status, compute and limit.
func (c *Client) ListJobs(ctx context.Context, q url.Values) ([]*workspace.Job, error) {
	var out []*workspace.Job
	return out, c.do(ctx, "GET", "/v1/jobs?"+q.Encode(), nil, &out)
}

// CancelJob cancels a job.
func (c *Client) CancelJob(ctx context.Context, name string) (*workspace.Job, error) {
	var out workspace.Job
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
func (c *Client) Metrics(ctx context.Context, job, name string) ([]workspace.Metric, error) {
	var out []workspace.Metric
	return out, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(job)+"/metrics?name="+url.QueryEscape(name), nil, &out)
}

// AddNumberedMetrics logs metric values numbered from first in the
// sequence of the run token's attempt and the client's Rank; values the
// server already has under their numbers are skipped (see
// api.MetricsRequest).
func (c *Client) AddNumberedMetrics(ctx context.Context, job string, first int64, ms []workspace.Metric) error {
	return c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(job)+"/metrics"+c.rankQuery("?"), api.MetricsRequest{Metrics: ms, Seq: first}, nil)
}

// AddMetrics logs metric values.
func (c *Client) AddMetrics(ctx context.Context, job string, ms []workspace.Metric) error {
	return c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(job)+"/metrics", api.MetricsRequest{Metrics: ms}, nil)
}

// Outputs returns the snapshot ids of a job's outputs.
func (c *Client) Outputs(ctx context.Context, job string) (*workspace.Outputs, error) {
	var out workspace.Outputs
	return &out, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(job)+"/outputs", nil, &out)
}

// ---- runner calls ----

func attemptPath(job string, attempt int, what string) string {
	return "/v1/jobs/" + url.PathEscape(job) + "/attempts/" + strconv.Itoa(attempt) + "/" + what
}

// Assignment fetches what an attempt runs.
func (c *Client) Assignment(ctx context.Context, job string, attempt int) (*workspace.Assignment, error) {
	var out workspace.Assignment
	return &out, c.do(ctx, "GET", attemptPath(job, attempt, "assignment"), nil, &out)
}

// Heartbeat renews an attempt's lease.
func (c *Client) Heartbeat(ctx context.Context, job string, attempt int) (*workspace.HeartbeatReply, error) {
	var out workspace.HeartbeatReply
	return &out, c.do(ctx, "POST", attemptPath(job, attempt, "heartbeat"), struct{}{}, &out)
}

// ReportStatus reports an attempt's progress or end, as the client's Rank.
func (c *Client) ReportStatus(ctx context.Context, job string, attempt int, r workspace.Report) error {
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
	var out api.LogSize
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
	var out api.LogSize
	return out.Size, json.NewDecoder(resp.Body).Decode(&out)
}

// SetOutputs records an attempt's output snapshots.
func (c *Client) SetOutputs(ctx context.Context, job string, attempt int, o workspace.Outputs) error {
	return c.do(ctx, "PUT", attemptPath(job, attempt, "outputs")+c.rankQuery("?"), o, nil)
}

// ---- blobs and snapshots ----

// Missing returns which digests the server lacks.
func (c *Client) Missing(ctx context.Context, digests []string) ([]string, error) {
	var out api.DigestList
	err := c.do(ctx, "POST", "/v1/blobs/missing", api.DigestList{Digests: digests}, &out)
	return out.Digests, err
}

// PutBlob uploads the file at path as the blob digest.
func (c *Client) PutBlob(ctx context.Context, digest, path string, progress func(int64)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var body io.Reader = f
	if progress != nil {
		body = &progressReader{r: f, fn: progress}
	}
	resp, err := c.request(ctx, "PUT", "/v1/blobs/"+digest, body, "application/octet-stream")
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	return resp.Body.Close()
}

type progressReader struct {
	r  io.Reader
	fn func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.fn(int64(n))
	return n, err
}

// GetBlob downloads a blob.
func (c *Client) GetBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, "GET", "/v1/blobs/"+digest, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// CreateSnapshot stores a manifest and returns its id.
func (c *Client) CreateSnapshot(ctx context.Context, m *snapshot.Manifest) (string, error) {
	var out api.SnapshotID
	return out.ID, c.do(ctx, "POST", "/v1/snapshots", m, &out)
}

// GetSnapshot fetches a manifest.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*snapshot.Manifest, error) {
	var out snapshot.Manifest
	return &out, c.do(ctx, "GET", "/v1/snapshots/"+url.PathEscape(id), nil, &out)
}

// UploadStats says what an Upload sent.
type UploadStats struct {
	Files    int   // files in the snapshot
	Uploaded int   // distinct blobs the server lacked and got
	Bytes    int64 // bytes sent
}

// Batching of small blobs: a blob of at most smallBlob bytes goes into a
// tar stream with others, up to batchBytes or batchBlobs a request, so that
// a tree of many tiny files costs a few requests and disk syncs instead of
// one of each per file.
const (
	smallBlob     = 1 << 20
	batchBytes    = 32 << 20
	batchBlobs    = 20_000
	missingChunk  = 100_000 // digests per Missing call: its JSON stays well under the server's body limit
	uploadWorkers = 4       // requests in flight at once
)

// Upload sends the files of m the server lacks (files maps a digest to a
// local path) and stores the manifest; it returns the snapshot id and what
// it sent. Small files travel many to a request. progress, if not nil,
// hears of every byte sent; it may be called from several goroutines.
func (c *Client) Upload(ctx context.Context, m *snapshot.Manifest, files map[string]string, progress func(int64)) (string, UploadStats, error) {
	return c.UploadData(ctx, m, files, nil, progress)
}

// UploadData is Upload where data holds the content of some of the files
// by digest (snapshot.OutputBuild.Data): those are sent from memory, not
// read again. files must still name a local file for every digest.
func (c *Client) UploadData(ctx context.Context, m *snapshot.Manifest, files map[string]string, data map[string][]byte, progress func(int64)) (string, UploadStats, error) {
	stats := UploadStats{Files: len(m.Files)}
	digests := m.Digests()
	var missing []string
	for len(digests) > 0 {
		chunk := digests[:min(len(digests), missingChunk)]
		digests = digests[len(chunk):]
		miss, err := c.Missing(ctx, chunk)
		if err != nil {
			return "", stats, err
		}
		missing = append(missing, miss...)
	}
	sizes := make(map[string]int64, len(m.Files))
	for _, f := range m.Files {
		sizes[f.Digest] = f.Size
	}
	var jobs []uploadJob
	var batch uploadJob
	var batchSize int64
	for _, d := range missing {
		path, ok := files[d]
		if !ok {
			return "", stats, fmt.Errorf("no local file for blob %s", d)
		}
		b := blobFile{digest: d, path: path, size: sizes[d], data: data[d]}
		if b.size > smallBlob {
			jobs = append(jobs, uploadJob{b})
			continue
		}
		if len(batch) > 0 && (len(batch) >= batchBlobs || batchSize+b.size > batchBytes) {
			jobs = append(jobs, batch)
			batch, batchSize = nil, 0
		}
		batch = append(batch, b)
		batchSize += b.size
	}
	if len(batch) > 0 {
		jobs = append(jobs, batch)
	}
	if err := c.runUploads(ctx, jobs, progress); err != nil {
		return "", stats, err
	}
	stats.Uploaded = len(missing)
	for _, d := range missing {
		stats.Bytes += sizes[d]
	}
	id, err := c.CreateSnapshot(ctx, m)
	return id, stats, err
}

// UploadStream sends a whole snapshot in one request, a snapshot stream
// of every file's path, mode, size and content (snapshot.StreamWriter),
// which the server hashes and stores with the manifest it builds; it
// returns the snapshot id. It asks nothing first, so it sends every file
// even if the server holds it: it is for content that is new, like a
// job's outputs, where it saves the round trips of Missing and
// CreateSnapshot and the digests on the wire. files and data are as for
// UploadData (content in data is sent from memory). A server without the
// stream gets UploadData.
func (c *Client) UploadStream(ctx context.Context, m *snapshot.Manifest, files map[string]string, data map[string][]byte, progress func(int64)) (string, UploadStats, error) {
	stats := UploadStats{Files: len(m.Files)}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeSnapshotStream(pw, m, files, data, progress)) }()
	resp, err := c.request(ctx, "POST", "/v1/snapshots/stream", pr, snapshot.StreamContentType)
	pr.CloseWithError(errors.New("request ended"))
	if s := StatusOf(err); s == http.StatusNotFound || s == http.StatusMethodNotAllowed {
		return c.UploadData(ctx, m, files, data, progress)
	}
	if err != nil {
		return "", stats, fmt.Errorf("upload %d files: %w", len(m.Files), err)
	}
	defer resp.Body.Close()
	var out workspace.StreamedSnapshot
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", stats, fmt.Errorf("upload %d files: the reply: %w", len(m.Files), err)
	}
	stats.Uploaded, stats.Bytes = out.Files, out.Bytes
	return out.ID, stats, nil
}

// UploadOutputs sends the files of an output plan as one snapshot stream
// (snapshot.OutputPlan.WriteStream), reading each file as the request
// carries the ones before it, and returns the snapshot id the server
// stored and what was sent and left out (the plan's skipped entries and
// those found while reading). The client hashes nothing: the server
// does. A server without the stream gets the plan hashed and uploaded the
// batched way (UploadData).
func (c *Client) UploadOutputs(ctx context.Context, p *snapshot.OutputPlan, progress func(int64)) (string, snapshot.OutputSent, error) {
	pr, pw := io.Pipe()
	sentc := make(chan snapshot.OutputSent, 1)
	var werr error
	go func() {
		sent, err := p.WriteStream(pw, progress)
		werr = err
		sentc <- sent
		pw.CloseWithError(err)
	}()
	resp, err := c.request(ctx, "POST", "/v1/snapshots/stream", pr, snapshot.StreamContentType)
	pr.CloseWithError(errors.New("request ended"))
	sent := <-sentc
	if s := StatusOf(err); s == http.StatusNotFound || s == http.StatusMethodNotAllowed {
		ob, err := p.Build()
		if err != nil {
			return "", snapshot.OutputSent{}, err
		}
		id, stats, err := c.UploadData(ctx, ob.Manifest, ob.Files, ob.Data, progress)
		return id, snapshot.OutputSent{Files: stats.Files, Bytes: ob.Manifest.TotalSize(), Skipped: ob.Skipped, SkippedMore: ob.SkippedMore}, err
	}
	if err != nil {
		if werr != nil && !errors.Is(err, werr) {
			// Say what went wrong here, not only how the request ended.
			err = fmt.Errorf("%w (the request: %w)", werr, err)
		}
		return "", sent, fmt.Errorf("upload %d files: %w", p.Len(), err)
	}
	defer resp.Body.Close()
	var out workspace.StreamedSnapshot
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", sent, fmt.Errorf("upload %d files: the reply: %w", p.Len(), err)
	}
	if out.Files != sent.Files || out.Bytes != sent.Bytes {
		return "", sent, fmt.Errorf("upload %d files: the server stored %d files of %d bytes, but %d of %d were sent", p.Len(), out.Files, out.Bytes, sent.Files, sent.Bytes)
	}
	return out.ID, sent, nil
}

// writeSnapshotStream writes m's files as a snapshot stream.
func writeSnapshotStream(w io.Writer, m *snapshot.Manifest, files map[string]string, data map[string][]byte, progress func(int64)) error {
	sw := snapshot.NewStreamWriter(w)
	for _, f := range m.Files {
		if d, ok := data[f.Digest]; ok {
			if err := sw.WriteData(f, d); err != nil {
				return err
			}
		} else if err := writeStreamFile(sw, f, files[f.Digest]); err != nil {
			return err
		}
		if progress != nil {
			progress(f.Size)
		}
	}
	return sw.Close()
}

func writeStreamFile(sw *snapshot.StreamWriter, f snapshot.File, path string) error {
	if path == "" {
		return fmt.Errorf("no local file for %s (blob %s)", f.Path, f.Digest)
	}
	r, err := os.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return sw.WriteFrom(f, r)
}

// blobFile is a local file to upload as a blob, and its content when it
// is in memory already.
type blobFile struct {
	digest, path string
	size         int64
	data         []byte
}

// uploadJob is one request's worth of blobs: one large blob, or a batch of
// small ones.
type uploadJob []blobFile

// runUploads sends the jobs, uploadWorkers at a time, and returns the first
// error.
func (c *Client) runUploads(ctx context.Context, jobs []uploadJob, progress func(int64)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan uploadJob)
	errs := make(chan error, uploadWorkers)
	for range uploadWorkers {
		go func() {
			var err error
			for j := range next {
				if err != nil {
					continue
				}
				if len(j) == 1 && j[0].size > smallBlob {
					err = c.PutBlob(ctx, j[0].digest, j[0].path, progress)
				} else {
					err = c.putBlobs(ctx, j, progress)
				}
				if err != nil {
					cancel()
				}
			}
			errs <- err
		}()
	}
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
		}
	}
	close(next)
	var first error
	for range uploadWorkers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// putBlobs uploads local files as blobs in one request: a tar stream of
// files each named by its digest. A server without batch uploads gets them
// one by one.
func (c *Client) putBlobs(ctx context.Context, blobs []blobFile, progress func(int64)) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeBlobTar(pw, blobs, progress)) }()
	resp, err := c.request(ctx, "POST", "/v1/blobs/batch", pr, "application/x-tar")
	pr.CloseWithError(errors.New("request ended"))
	if s := StatusOf(err); s == http.StatusNotFound || s == http.StatusMethodNotAllowed {
		for _, b := range blobs {
			if err := c.PutBlob(ctx, b.digest, b.path, progress); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("upload %d files: %w", len(blobs), err)
	}
	return resp.Body.Close()
}

// writeBlobTar writes the files as a tar stream of entries named by their
// digests; progress (if not nil) hears of the file bytes written.
func writeBlobTar(w io.Writer, blobs []blobFile, progress func(int64)) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, 64<<10)
	for _, b := range blobs {
		if err := writeBlobEntry(tw, b, buf); err != nil {
			return err
		}
		if progress != nil {
			progress(b.size)
		}
	}
	return tw.Close()
}

func writeBlobEntry(tw *tar.Writer, b blobFile, buf []byte) error {
	if b.data != nil {
		if err := tw.WriteHeader(&tar.Header{Name: b.digest, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b.data))}); err != nil {
			return err
		}
		_, err := tw.Write(b.data)
		return err
	}
	f, err := os.Open(b.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: b.digest, Typeflag: tar.TypeReg, Mode: 0o644, Size: st.Size()}); err != nil {
		return err
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(f, st.Size()), buf)
	if err == nil && n < st.Size() {
		err = fmt.Errorf("%s: shrank while it was read", b.path)
	}
	return err
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
