package studio_test

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// batchScoreScript doubles the number in each file and raises on one
// that holds none.
const batchScoreScript = `import os

def init():
    pass

def run(mini_batch):
    rows = []
    for path in mini_batch:
        text = open(path).read().strip()
        if not text.isdigit():
            raise ValueError(os.path.basename(path) + " does not hold a number")
        rows.append([os.path.basename(path), int(text) * 2])
    return rows
`

// batchApp makes the batch endpoint number-scorer with the deployment
// doubler (on compute local, mini-batches of 2 files, error_threshold 5)
// and the data asset numbers:1 of 6 files, one of them bad.
func batchApp(t *testing.T, s *testServer) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"endpoint.yml": "name: number-scorer\ndescription: doubles numbers\n",
		"deployment.yml": "name: doubler\nendpoint_name: number-scorer\ncompute: local\n" +
			"code_configuration:\n  code: code\n  scoring_script: score.py\n" +
			"settings:\n  mini_batch_size: 2\n  max_concurrency_per_instance: 2\n  error_threshold: 5\n  output_action: append_row\n" +
			"  retry_settings:\n    max_retries: 0\n",
		"code/score.py": batchScoreScript,
		"numbers.yml":   "name: numbers\nversion: \"1\"\ntype: uri_folder\npath: ./n\n",
		"n/a.txt":       "1", "n/b.txt": "2", "n/c.txt": "3", "n/d.txt": "oops", "n/e.txt": "5", "n/f.txt": "6",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.ferry(t, "batch-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml"))
	s.ferry(t, "batch-deployment", "create", "-f", filepath.Join(dir, "deployment.yml"))
	s.ferry(t, "data", "create", "-f", filepath.Join(dir, "numbers.yml"))
	t.Cleanup(func() { _ = s.client().DeleteBatchEndpoint(context.Background(), "number-scorer") })
}

// waitJob waits until the job ends and returns it.
func waitJob(t *testing.T, s *testServer, name string) *apitypes.Job {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		j, err := s.client().GetJob(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if apitypes.IsTerminal(j.Status) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is still %s after 3 minutes", name, j.Status)
		}
	}
}

// A batch endpoint is in the endpoints list; its page has its deployments'
// settings, its default and its jobs with their progress. The invoke form
// is refused without the session's CSRF token, shows a bad input's error
// beside the field (the studio's own check of a local path, the API's of a
// data asset that is not there) and, with a data asset, starts the job
// through the API and goes to its page.
func TestStudioBatchEndpointPages(t *testing.T) {
	s := startServer(t)
	batchApp(t, s)
	s.ferry(t, "batch-endpoint", "invoke", "number-scorer", "--input", "azureml:numbers:1", "--job-name", "cli-scored", "--stream")

	hc := noRedirects(t)
	resp, err := hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	get := func(path string) string {
		t.Helper()
		resp, err := hc.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
		}
		if strings.Contains(body, s.token) {
			t.Errorf("GET %s: the page shows the session's token", path)
		}
		return body
	}

	list := get("/studio/endpoints")
	for _, w := range []string{`data-batch-endpoint="number-scorer"`, `href="/studio/batch-endpoints/number-scorer"`, "<td>doubler</td>"} {
		if !strings.Contains(list, w) {
			t.Errorf("the endpoints page lacks %q", w)
		}
	}
	page := get("/studio/batch-endpoints/number-scorer")
	for _, w := range []string{
		`<dd id="default-deployment">doubler</dd>`,
		`<tr data-deployment="doubler">`,
		`<a href="/studio/compute/local">local</a>`,
		"<td>1</td>\n  <td>2</td>\n  <td>2</td>\n  <td>5</td>\n  <td>append_row (predictions.csv)</td>",
		`<a href="/studio/jobs/cli-scored">cli-scored</a>`,
		// d.txt is bad: its mini-batch (c, d) fails, the other two are done.
		`<td class="progress">2 done, 1 failed, 0 left</td>`,
		`name="csrf"`,
		`href="/studio/jobs?experiment=batch-number-scorer"`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("the batch endpoint page lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("the page:\n%s", page)
	}
	csrf := csrfRE.FindStringSubmatch(page)[1]

	invoke := func(form url.Values) (*http.Response, string) {
		t.Helper()
		resp, err := hc.PostForm(s.url+"/studio/batch-endpoints/number-scorer/invoke", form)
		if err != nil {
			t.Fatal(err)
		}
		return resp, readAll(t, resp)
	}
	jobsNow := func() int {
		t.Helper()
		jobs, err := s.client().ListBatchJobs(context.Background(), "number-scorer")
		if err != nil {
			t.Fatal(err)
		}
		return len(jobs)
	}

	// Without the session's CSRF token: refused, and no job.
	good := url.Values{"input": {"azureml:numbers:1"}, "type": {"uri_folder"}, "job_name": {"from-form"}}
	for _, bad := range []string{"", "AAAA" + csrf[4:]} {
		f := url.Values{}
		for k, v := range good {
			f[k] = v
		}
		if bad != "" {
			f.Set("csrf", bad)
		}
		if resp, body := invoke(f); resp.StatusCode != http.StatusForbidden {
			t.Errorf("invoke with CSRF token %q: %s %q, want 403", bad, resp.Status, body)
		}
	}
	if n := jobsNow(); n != 1 {
		t.Fatalf("after refused forms the endpoint has %d jobs, want 1", n)
	}

	// Bad inputs: the error beside the field, the value kept, no job.
	for _, tc := range []struct{ input, want string }{
		{"", "input: is required"},
		{"/tmp/numbers", "is a local path"},
		{"azureml:numbers", "numbers"},
		{"azureml:no-such-data:1", "no-such-data"},
		{"azureml://datastores/no-such-store/paths/n", "no-such-store"},
	} {
		resp, body := invoke(url.Values{"csrf": {csrf}, "input": {tc.input}, "type": {"uri_folder"}})
		errText := between(body, `<p id="input-error" class="error" role="alert">`, "</p>")
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(errText, tc.want) ||
			!strings.Contains(body, `aria-invalid="true"`) || !strings.Contains(body, `value="`+tc.input+`"`) {
			t.Errorf("invoke with input %q: %s, input error %q; want 422 and an error beside the field saying %q", tc.input, resp.Status, errText, tc.want)
		}
	}
	if resp, body := invoke(url.Values{"csrf": {csrf}, "input": {"azureml:numbers:1"}, "type": {"uri_folder"}, "deployment": {"nope"}}); resp.StatusCode != http.StatusUnprocessableEntity ||
		!strings.Contains(between(body, `<p class="error" role="alert" id="form-error">`, "</p>"), "nope") {
		t.Errorf("invoke of deployment nope: %s; want 422 and the API's refusal naming it", resp.Status)
	}
	if resp, body := invoke(url.Values{"csrf": {csrf}, "input": {"azureml:numbers:1"}, "type": {"mltable"}}); resp.StatusCode != http.StatusUnprocessableEntity ||
		!strings.Contains(between(body, `<p class="error" role="alert" id="form-error">`, "</p>"), "mltable") {
		t.Errorf("invoke with type mltable: %s; want 422 and an error naming the type", resp.Status)
	}
	if n := jobsNow(); n != 1 {
		t.Fatalf("after bad inputs the endpoint has %d jobs, want 1", n)
	}

	// A good one: the job, and its page.
	f := url.Values{"csrf": {csrf}}
	for k, v := range good {
		f[k] = v
	}
	resp, body := invoke(f)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/studio/jobs/from-form" {
		t.Fatalf("invoke with azureml:numbers:1: %s to %q, want 303 to /studio/jobs/from-form\n%s", resp.Status, resp.Header.Get("Location"), body)
	}
	if j := waitJob(t, s, "from-form"); j.Status != apitypes.StatusCompleted || j.Metrics["mini_batches_done"] != 2 {
		t.Errorf("the form's job ended %s with metrics %v, want Completed with 2 mini-batches done", j.Status, j.Metrics)
	}

	// A datastore URI: a local_folder datastore every node reads.
	shared := filepath.Join(s.work, "shared")
	for name, body := range map[string]string{"n/x.txt": "10", "n/y.txt": "20", "n/z.txt": "30"} {
		p := filepath.Join(shared, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dsFile := filepath.Join(t.TempDir(), "shared.yml")
	if err := os.WriteFile(dsFile, []byte("name: shared\ntype: local_folder\npath: "+shared+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.ferry(t, "datastore", "create", "-f", dsFile)
	resp, body = invoke(url.Values{"csrf": {csrf}, "input": {"azureml://datastores/shared/paths/n"}, "type": {"uri_folder"}, "job_name": {"from-datastore"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/studio/jobs/from-datastore" {
		t.Fatalf("invoke with a datastore URI: %s to %q, want 303 to /studio/jobs/from-datastore\n%s", resp.Status, resp.Header.Get("Location"), body)
	}
	if j := waitJob(t, s, "from-datastore"); j.Status != apitypes.StatusCompleted || j.Metrics["mini_batches_done"] != 2 || j.Metrics["mini_batches_failed"] != 0 {
		t.Errorf("the datastore job ended %s with metrics %v, want Completed with 2 mini-batches done, none failed", j.Status, j.Metrics)
	}

	if page := get("/studio/batch-endpoints/number-scorer"); !strings.Contains(page, `<a href="/studio/jobs/from-form">from-form</a>`) {
		t.Error("the batch endpoint page does not list the job its form started")
	}
	get("/studio/jobs/from-form")

	resp, err = hc.Get(s.url + "/studio/batch-endpoints/no-such-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no-such-endpoint") {
		t.Errorf("GET a batch endpoint that is not there: %s, want 404 naming it", resp.Status)
	}
}

// between is the text of s between the first from and the to after it.
func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	text, _, _ := strings.Cut(rest, to)
	return text
}
