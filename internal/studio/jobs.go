package studio

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ferry-ml/ferry/internal/spec"
)

// jobPageSize is how many jobs a page of the list shows unless ?limit=
// (1 to maxJobPageSize) says otherwise.
const (
	jobPageSize    = 50
	maxJobPageSize = 500
)

// jobStatuses are the statuses the list's filter offers.
var jobStatuses = []string{"Queued", "Preparing", "Running", "Finalizing", "CancelRequested", "Completed", "Failed", "Canceled"}

type jobListView struct {
	Jobs                        []*apitypes.Job
	Status, Compute, Experiment string
	Statuses                    []string
	Computes                    []string
	Before                      string       // the page's keyset: it shows jobs before this one
	Next                        template.URL // the next page, "" on the last
	Limit                       string       // the page size asked for, "" for the default
}

// jobList is the job list: filters by status, compute and experiment,
// newest first, a page at a time by keyset (?before=the last job's name),
// so the thousandth page costs what the first does.
func (s *Studio) jobList(w http.ResponseWriter, r *http.Request, ss *session) error {
	q := r.URL.Query()
	v := jobListView{Status: q.Get("status"), Compute: q.Get("compute"), Experiment: q.Get("experiment"), Before: q.Get("before"), Statuses: jobStatuses}
	size := jobPageSize
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxJobPageSize {
			http.Error(w, fmt.Sprintf("limit: %q is not a page size from 1 to %d", l, maxJobPageSize), http.StatusBadRequest)
			return nil
		}
		size, v.Limit = n, l
	}
	api := url.Values{"limit": {strconv.Itoa(size + 1)}}
	for k, val := range map[string]string{"status": v.Status, "compute": v.Compute, "experiment": v.Experiment, "before": v.Before} {
		if val != "" {
			api.Set(k, val)
		}
	}
	jobs, err := ss.api.ListJobs(r.Context(), api)
	if err != nil {
		return err
	}
	if len(jobs) > size {
		jobs = jobs[:size]
		next := url.Values{"before": {jobs[len(jobs)-1].Name}}
		for k, val := range map[string]string{"status": v.Status, "compute": v.Compute, "experiment": v.Experiment, "limit": v.Limit} {
			if val != "" {
				next.Set(k, val)
			}
		}
		// Built here from url.Values, so it is a well-formed relative URL;
		// as a plain string, the template would escape its query.
		v.Next = template.URL("/studio/jobs?" + next.Encode())
	}
	v.Jobs = jobs
	cs, err := ss.api.ListComputes(r.Context())
	if err != nil {
		return err
	}
	for _, c := range cs {
		v.Computes = append(v.Computes, c.Name)
	}
	s.render(w, r, ss, "jobs", "Jobs", v)
	return nil
}

// maxPageLog is how much of a job's log its page holds when it is served;
// the live log goes on from there, and the whole log is a link away.
const maxPageLog = 1 << 20

type outputFile struct {
	Output, Path, Digest string
	Size                 int64
}

type jobView struct {
	*apitypes.Job
	Terminal   bool
	Log        string
	LogOffset  int64
	LogCut     bool // the page holds only the first maxPageLog bytes
	Charts     []chart
	YAML       string
	Inputs     []inputRow
	Outputs    []outputFile
	OutputsErr string
	Message    string
	Duration   string
	CanCancel  bool
	Rank       int   // whose log the page shows
	Ranks      []int // every node rank of a multi-node job
}

// rankOf reads ?rank= of a job of instances nodes: 0 when absent.
func rankOf(r *http.Request, instances int) (int, error) {
	v := r.URL.Query().Get("rank")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n >= max(instances, 1) {
		return 0, fmt.Errorf("rank: %q is not a node rank of this job (0 to %d)", v, max(instances, 1)-1)
	}
	return n, nil
}

func instancesOf(j *apitypes.Job) int {
	if j.Spec != nil && j.Spec.Resources != nil && j.Spec.Resources.InstanceCount > 1 {
		return j.Spec.Resources.InstanceCount
	}
	return 1
}

type inputRow struct{ Name, Type, Path, Snapshot string }

var errPageLogFull = errors.New("the page's share of the log is full")

// capWriter keeps the first n bytes written to it, then refuses more.
type capWriter struct {
	buf bytes.Buffer
	n   int
}

func (c *capWriter) Write(p []byte) (int, error) {
	room := c.n - c.buf.Len()
	if len(p) > room {
		c.buf.Write(p[:room])
		return room, errPageLogFull
	}
	return c.buf.Write(p)
}

func (s *Studio) jobDetail(w http.ResponseWriter, r *http.Request, ss *session) error {
	ctx, name := r.Context(), r.PathValue("name")
	j, err := ss.api.GetJob(ctx, name)
	if err != nil {
		return err
	}
	v := jobView{Job: j, Terminal: apitypes.IsTerminal(j.Status), Message: r.URL.Query().Get("msg")}
	n := instancesOf(j)
	if v.Rank, err = rankOf(r, n); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil
	}
	ss.api.Rank = v.Rank
	if n > 1 {
		for i := range n {
			v.Ranks = append(v.Ranks, i)
		}
	}
	v.CanCancel = !v.Terminal && j.Status != apitypes.StatusCancelRequested
	if j.Started != nil {
		end := time.Now()
		if j.Ended != nil {
			end = *j.Ended
		}
		v.Duration = end.Sub(*j.Started).Round(time.Second).String()
	}
	// The log up to now, at most maxPageLog of it; the page's script
	// follows it from where this ends.
	cw := &capWriter{n: maxPageLog}
	logCtx, cancel := context.WithCancel(ctx)
	off, err := ss.api.StreamLogs(logCtx, name, 0, false, cw)
	cancel()
	if err != nil && !errors.Is(err, errPageLogFull) {
		return err
	}
	v.Log, v.LogOffset, v.LogCut = cw.buf.String(), off, errors.Is(err, errPageLogFull)
	ms, err := ss.api.Metrics(ctx, name, "")
	if err != nil {
		return err
	}
	v.Charts = charts(ms)
	if j.Spec != nil {
		var b strings.Builder
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(shownSpec(j.Spec)); err == nil {
			v.YAML = b.String()
		}
		for n, in := range j.Spec.Inputs {
			row := inputRow{Name: n, Type: in.Type, Path: in.Path, Snapshot: j.InputSnapshots[n]}
			if in.Value != nil {
				row.Path = *in.Value
			}
			v.Inputs = append(v.Inputs, row)
		}
		sort.Slice(v.Inputs, func(a, b int) bool { return v.Inputs[a].Name < v.Inputs[b].Name })
	}
	if o := j.Outputs; o != nil {
		v.Outputs, err = s.outputFiles(ctx, ss, o)
		if err != nil {
			v.OutputsErr = err.Error()
		}
	}
	s.render(w, r, ss, "job", "Job "+name, v)
	return nil
}

// maxOutputFiles bounds the files a job page lists.
const maxOutputFiles = 500

func (s *Studio) outputFiles(ctx context.Context, ss *session, o *apitypes.Outputs) ([]outputFile, error) {
	var out []outputFile
	add := func(output, id string) error {
		if id == "" {
			return nil
		}
		m, err := ss.api.GetSnapshot(ctx, id)
		if err != nil {
			return err
		}
		for _, f := range m.Files {
			if len(out) >= maxOutputFiles {
				return nil
			}
			out = append(out, outputFile{Output: output, Path: f.Path, Digest: f.Digest, Size: f.Size})
		}
		return nil
	}
	if err := add("outputs", o.Artifacts); err != nil {
		return out, err
	}
	names := make([]string, 0, len(o.Named))
	for n := range o.Named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := add(n, o.Named[n]); err != nil {
			return out, err
		}
	}
	return out, nil
}

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// download sends a stored file (an output's) as an attachment named by
// ?name=, read through the API with the session's token.
func (s *Studio) download(w http.ResponseWriter, r *http.Request, ss *session) error {
	d := r.PathValue("digest")
	if !digestRE.MatchString(d) {
		http.Error(w, "not a content digest: "+d, http.StatusBadRequest)
		return nil
	}
	body, err := ss.api.GetBlob(r.Context(), d)
	if err != nil {
		return err
	}
	defer body.Close()
	name := path.Base(r.URL.Query().Get("name"))
	if name == "." || name == "/" || strings.ContainsAny(name, "\"\r\n") {
		name = d
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	_, err = io.Copy(w, body)
	if err != nil {
		s.log.Warn("studio download cut", "digest", d, "err", err)
	}
	return nil
}

// jobLogText is the whole log as text, for reading or saving.
func (s *Studio) jobLogText(w http.ResponseWriter, r *http.Request, ss *session) error {
	name := r.PathValue("name")
	j, err := ss.api.GetJob(r.Context(), name)
	if err != nil {
		return err
	}
	if ss.api.Rank, err = rankOf(r, instancesOf(j)); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, err = ss.api.StreamLogs(r.Context(), name, 0, false, w)
	if err != nil {
		s.log.Warn("studio log download cut", "job", name, "err", err)
	}
	return nil
}

// sseWriter turns log bytes into server-sent events, one a line: each
// event's id is the log offset after its line, so a browser that
// reconnects (Last-Event-ID) resumes at the next line.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	offset  int64 // of the first byte of partial
	partial []byte
}

func (s *sseWriter) Write(p []byte) (int, error) {
	s.partial = append(s.partial, p...)
	sent := false
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		if err := s.event("", s.partial[:i], s.offset+int64(i)+1); err != nil {
			return 0, err
		}
		s.offset += int64(i) + 1
		s.partial = s.partial[i+1:]
		sent = true
	}
	if sent {
		if err := s.rc.Flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// event writes one event; line may not hold a newline.
func (s *sseWriter) event(kind string, line []byte, id int64) error {
	var b bytes.Buffer
	if kind != "" {
		b.WriteString("event: " + kind + "\n")
	}
	if id >= 0 {
		b.WriteString("id: " + strconv.FormatInt(id, 10) + "\n")
	}
	text := strings.ToValidUTF8(strings.TrimSuffix(string(line), "\r"), "\uFFFD")
	b.WriteString("data: " + strings.ReplaceAll(text, "\r", "") + "\n\n")
	_, err := s.w.Write(b.Bytes())
	return err
}

// jobLogEvents follows a job's log as server-sent events from ?offset=
// (or the Last-Event-ID of a reconnecting browser): a "line" per log
// line as the API's follow delivers it (woken by the job's changes, not
// by a polling loop), then an "end" event with the job's final status.
func (s *Studio) jobLogEvents(w http.ResponseWriter, r *http.Request, ss *session) error {
	name := r.PathValue("name")
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = r.URL.Query().Get("offset")
	}
	var offset int64
	if from != "" {
		n, err := strconv.ParseInt(from, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "offset: "+strconv.Quote(from)+" is not a byte offset of the log", http.StatusBadRequest)
			return nil
		}
		offset = n
	}
	j, err := ss.api.GetJob(r.Context(), name)
	if err != nil {
		return err
	}
	if ss.api.Rank, err = rankOf(r, instancesOf(j)); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), offset: offset}
	if err := sw.rc.Flush(); err != nil {
		return nil
	}
	_, err = ss.api.StreamLogs(r.Context(), name, offset, true, sw)
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Warn("studio live log ended", "job", name, "err", err)
		}
		return nil // the stream has begun; the browser reconnects from its last id
	}
	if len(sw.partial) > 0 { // a last line without a newline
		_ = sw.event("", sw.partial, sw.offset+int64(len(sw.partial)))
	}
	status := ""
	if j, err := ss.api.GetJob(r.Context(), name); err == nil {
		status = j.Status
	}
	_ = sw.event("end", []byte(status), -1)
	_ = sw.rc.Flush()
	return nil
}

func (s *Studio) jobCancel(w http.ResponseWriter, r *http.Request, ss *session) error {
	name := r.PathValue("name")
	j, err := ss.api.CancelJob(r.Context(), name)
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/studio/jobs/"+url.PathEscape(name)+"?msg="+url.QueryEscape("cancel asked: the job is "+j.Status), http.StatusSeeOther)
	return nil
}

// jobResubmit submits a job again as a new one: the same spec (without
// its name, so the new job gets its own), code, inputs and environment
// files, through POST /v1/jobs as `ferry job create` would.
func (s *Studio) jobResubmit(w http.ResponseWriter, r *http.Request, ss *session) error {
	ctx := r.Context()
	j, err := ss.api.GetJob(ctx, r.PathValue("name"))
	if err != nil {
		return err
	}
	if j.Spec == nil {
		http.Error(w, "job "+j.Name+" has no readable spec to submit again", http.StatusConflict)
		return nil
	}
	sp := *j.Spec
	sp.Name = ""
	data, err := json.Marshal(&sp)
	if err != nil {
		return err
	}
	req := apitypes.JobRequest{Spec: data, CodeSnapshot: j.CodeSnapshot, InputSnapshots: j.InputSnapshots}
	if sp.Environment != nil && sp.Environment.Ref == "" && j.Environment != nil {
		req.EnvironmentSnapshot = j.Environment.Context
	}
	nj, err := ss.api.SubmitJob(ctx, req)
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/studio/jobs/"+url.PathEscape(nj.Name)+"?msg="+url.QueryEscape("submitted again from "+j.Name), http.StatusSeeOther)
	return nil
}

// hiddenVariables are environment variables Ferry sets to a job's own
// secret: a batch job's BATCH_DRIVER_KEY, which its workers present to its
// driver's queue. The page's YAML shows that they are set, not their value.
var hiddenVariables = []string{"BATCH_DRIVER_KEY"}

// shownSpec is the job's spec as its page shows it: hiddenVariables'
// values replaced. Resubmitting reads the spec from the API, not the page.
func shownSpec(sp *spec.Job) *spec.Job {
	var hidden map[string]string
	for _, n := range hiddenVariables {
		if _, ok := sp.EnvironmentVariables[n]; ok {
			if hidden == nil {
				hidden = maps.Clone(sp.EnvironmentVariables)
			}
			hidden[n] = "(hidden: a key of the job's own)"
		}
	}
	if hidden == nil {
		return sp
	}
	c := *sp
	c.EnvironmentVariables = hidden
	return &c
}
