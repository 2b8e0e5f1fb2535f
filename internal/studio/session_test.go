package studio_test

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/client"
)

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// A request without the session cookie, or a form without this session's
// CSRF token, is refused and changes nothing; sign-in sets an HttpOnly,
// SameSite=Strict cookie only for a token the API takes; no page shows
// the token.
func TestStudioRefusesWithoutSessionOrCSRF(t *testing.T) {
	s := startServer(t)
	hc := noRedirects(t)
	ctx := context.Background()
	createForm := url.Values{"name": {"cpu-cluster"}, "size": {"Standard_DS3_v2"}, "min_instances": {"0"}, "max_instances": {"2"},
		"idle_time_before_scale_down": {"120"}, "tier": {"dedicated"}}

	// No cookie: pages send the browser to sign in; forms are refused.
	resp, err := hc.Get(s.url + "/studio/jobs")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/studio/signin") {
		t.Errorf("GET /studio/jobs without a cookie: %s to %q, want 303 to /studio/signin", resp.Status, resp.Header.Get("Location"))
	}
	resp, err = hc.PostForm(s.url+"/studio/compute", createForm)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "sign in first") {
		t.Errorf("POST /studio/compute without a cookie: %s %q, want 403 saying to sign in", resp.Status, body)
	}

	// A wrong token: no cookie, and the page says why.
	resp, err = hc.PostForm(s.url+"/studio/signin", url.Values{"token": {"fry_not-a-token"}})
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not valid for this workspace") || len(resp.Cookies()) != 0 {
		t.Errorf("sign-in with a wrong token: %s, cookies %v; want 401, no cookie and the reason", resp.Status, resp.Cookies())
	}

	// The owner's token: a session cookie, HttpOnly and SameSite=Strict.
	resp, err = hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}, "next": {"/studio/jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/studio/jobs" {
		t.Fatalf("sign-in: %s to %q, want 303 to /studio/jobs", resp.Status, resp.Header.Get("Location"))
	}
	cs := resp.Cookies()
	if len(cs) != 1 || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Path != "/studio/" {
		t.Fatalf("sign-in cookies %+v, want one HttpOnly, SameSite=Strict cookie for /studio/", cs)
	}

	resp, err = hc.Get(s.url + "/studio/compute/new")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	if strings.Contains(page, s.token) {
		t.Error("the create-cluster page shows the session's token")
	}
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the create-cluster page has no CSRF field:\n%s", page)
	}
	csrf := m[1]

	post := func(what string, form url.Values, origin string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("POST", s.url+"/studio/compute", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		readAll(t, resp)
		return resp
	}
	with := func(csrf string) url.Values {
		f := url.Values{}
		for k, v := range createForm {
			f[k] = v
		}
		if csrf != "" {
			f.Set("csrf", csrf)
		}
		return f
	}
	for _, tc := range []struct {
		what   string
		form   url.Values
		origin string
	}{
		{"no CSRF token", with(""), ""},
		{"a wrong CSRF token", with("AAAA" + csrf[4:]), ""},
		{"another session's CSRF token", with("x" + csrf), ""},
		{"the right CSRF token from another site", with(csrf), "https://evil.example"},
	} {
		if resp := post(tc.what, tc.form, tc.origin); resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST /studio/compute with %s: %s, want 403", tc.what, resp.Status)
		}
	}
	if _, err := s.client().GetCompute(ctx, "cpu-cluster"); client.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("after refused forms, GetCompute(cpu-cluster) = %v, want not found: a refused form created it", err)
	}

	// With the session's own token, the same form creates the cluster.
	resp = post("the right CSRF token", with(csrf), s.url)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/studio/compute/cpu-cluster" {
		t.Fatalf("POST /studio/compute with the session's CSRF token: %s to %q, want 303 to its page", resp.Status, resp.Header.Get("Location"))
	}
	c, err := s.client().GetCompute(ctx, "cpu-cluster")
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != "Standard_DS3_v2" || c.MaxNodes == nil || *c.MaxNodes != 2 {
		t.Errorf("the form made %+v, want size Standard_DS3_v2 and max 2", c)
	}

	// Signing out ends the cookie.
	resp, err = hc.PostForm(s.url+"/studio/signout", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	resp, err = hc.Get(s.url + "/studio/compute")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET /studio/compute after sign-out: %s, want 303 to sign in", resp.Status)
	}
}

// Every list page renders for a signed-in user with what the API has; a
// page about something that does not exist answers 404 with the API's
// words.
func TestStudioPagesRender(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	files := map[string]string{
		"env.yml":      "name: py-base\nversion: '3'\nimage: ferry-base:bookworm\n",
		"model.yml":    "name: iris-model\nversion: '2'\npath: model.txt\n",
		"model.txt":    "weights\n",
		"endpoint.yml": "name: web-ep\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.ferry(t, "environment", "create", "-f", filepath.Join(dir, "env.yml"))
	if err := os.WriteFile(filepath.Join(dir, "job.yml"), []byte("command: mkdir -p outputs/sub && printf 'forty two' > 'outputs/sub/the answer.txt'\ncompute: local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"), "--name", "with-outputs", "--stream")
	s.ferry(t, "model", "create", "-f", filepath.Join(dir, "model.yml"))
	s.ferry(t, "online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml"))
	t.Cleanup(func() { _ = s.client().DeleteOnlineEndpoint(context.Background(), "web-ep") })

	hc := noRedirects(t)
	resp, err := hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	for _, tc := range []struct {
		path   string
		status int
		want   []string
	}{
		{"/studio/compute", 200, []string{"<h1>Compute</h1>", `data-compute="local"`}},
		{"/studio/compute/local", 200, []string{"<h1>local</h1>", "Events"}},
		{"/studio/compute/new", 200, []string{"Create a cluster", "Standard_DS3_v2"}},
		{"/studio/compute/attach", 200, []string{"Attach a machine over SSH", `type="password"`}},
		{"/studio/compute/attach-slurm", 200, []string{"Attach a Slurm cluster", `name="partition"`, `name="work_dir"`, `value="ssh"`}},
		{"/studio/compute/attach-kubernetes", 200, []string{"Attach a Kubernetes cluster", `name="namespace"`, `name="kubeconfig_file"`, `name="api_url"`}},
		{"/studio/jobs", 200, []string{"<h1>Jobs</h1>", `data-job="with-outputs"`}},
		{"/studio/environments", 200, []string{"py-base", "ferry-base:bookworm"}},
		{"/studio/models", 200, []string{"iris-model", "<td>2</td>"}},
		{"/studio/endpoints", 200, []string{"web-ep", "/endpoints/web-ep/score"}},
		{"/studio/endpoints/web-ep", 200, []string{"No deployments yet"}},
		{"/studio/quotas", 200, []string{"standardDSv2Family"}},
		{"/studio/jobs/with-outputs", 200, []string{"Completed", "sub/the answer.txt"}},
		{"/studio/jobs/no-such-job", 404, []string{"no-such-job"}},
		{"/studio/compute/no-such-compute", 404, []string{"no-such-compute"}},
	} {
		resp, err := hc.Get(s.url + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: %s %q, want %d and a page", tc.path, resp.Status, resp.Header.Get("Content-Type"), tc.status)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: the page lacks %q", tc.path, w)
			}
		}
		if strings.Contains(body, s.token) {
			t.Errorf("GET %s: the page shows the session's token", tc.path)
		}
		if tc.path == "/studio/jobs/with-outputs" {
			m := regexp.MustCompile(`href="(/studio/blobs/[^"]+)" download`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("the job page has no download link:\n%s", body)
			}
			resp, err := hc.Get(s.url + strings.ReplaceAll(m[1], "&amp;", "&"))
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, resp)
			if resp.StatusCode != 200 || got != "forty two" || !strings.Contains(resp.Header.Get("Content-Disposition"), `filename="the answer.txt"`) {
				t.Errorf("the output's download: %s %q, %q; want 200, forty two, named the answer.txt", resp.Status, got, resp.Header.Get("Content-Disposition"))
			}
			continue
		}

		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
	}
}

var jobRowRE = regexp.MustCompile(`<tr data-job="([^"]+)">`)
var nextRE = regexp.MustCompile(`id="next-page" rel="next" href="([^"]+)"`)

// The job list pages by keyset: following "Older jobs" walks every job
// of the filter once, newest first, and the last page has no next link.
func TestStudioJobListPages(t *testing.T) {
	s := startServer(t)
	c := s.client()
	var want []string
	for i := range 5 {
		spec := fmt.Sprintf(`{"name": "page-job-%d", "command": "true", "compute": "local", "experiment_name": "paging"}`, i)
		if _, err := c.SubmitJob(context.Background(), apitypes.JobRequest{Spec: json.RawMessage(spec)}); err != nil {
			t.Fatal(err)
		}
		want = append([]string{fmt.Sprintf("page-job-%d", i)}, want...) // newest first
	}
	other := `{"name": "other-job", "command": "true", "compute": "local", "experiment_name": "elsewhere"}`
	if _, err := c.SubmitJob(context.Background(), apitypes.JobRequest{Spec: json.RawMessage(other)}); err != nil {
		t.Fatal(err)
	}
	hc := noRedirects(t)
	resp, err := hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)

	var got []string
	pages := 0
	for next := "/studio/jobs?experiment=paging&limit=2"; next != ""; pages++ {
		if pages > 5 {
			t.Fatalf("more than 5 pages of 2 for 5 jobs: %v", got)
		}
		resp, err := hc.Get(s.url + next)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", next, resp.Status)
		}
		for _, m := range jobRowRE.FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
		next = ""
		if m := nextRE.FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if d := cmp.Diff(want, got); d != "" || pages != 3 {
		t.Errorf("paging by 2 over %d pages (want 3) gave (-want +got):\n%s", pages, d)
	}
	resp, err = hc.Get(s.url + "/studio/jobs?limit=0")
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("limit=0: %s, want 400", resp.Status)
	}
}

// The session cookie was the owner token itself, and the CSRF token an
// HMAC of a fixed label under it, the same for every session of the token
// and for ever (issue 29). A session now has its own random id in the
// cookie and its own random CSRF token; the store keeps only hashes, and
// the session outlives a restart; sign-out deletes it on the server, so a
// copy of its cookie is worthless after.
func TestStudioSessionsAreTheirOwn(t *testing.T) {
	s := startServer(t)
	signIn := func() (*http.Client, string, string) {
		t.Helper()
		hc := noRedirects(t)
		resp, err := hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		cs := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 {
			t.Fatalf("sign-in: %s, cookies %v", resp.Status, cs)
		}
		return hc, cs[0].Value, csrfOf(t, hc, s.url)
	}
	a, cookieA, csrfA := signIn()
	b, cookieB, csrfB := signIn()
	if cookieA == cookieB || strings.Contains(cookieA, s.token) || strings.Contains(cookieB, s.token) || strings.Contains(s.token, cookieA) {
		t.Errorf("the two sessions' cookies %q and %q: want two of their own, neither the token", cookieA, cookieB)
	}
	if csrfA == csrfB || csrfA == cookieA || csrfB == cookieB {
		t.Errorf("the sessions' CSRF tokens %q and %q: want one of its own for each, not its cookie", csrfA, csrfB)
	}
	// The store keeps hashes: neither a cookie nor the token is in it.
	for _, name := range []string{"ferry.db", "ferry.db-wal"} {
		data, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			continue
		}
		for what, secret := range map[string]string{"session A's cookie": cookieA, "session B's cookie": cookieB, "the token": s.token} {
			if strings.Contains(string(data), secret) {
				t.Errorf("%s holds %s", name, what)
			}
		}
	}

	// One session's CSRF token is no good in another's form.
	resp, err := a.PostForm(s.url+"/studio/compute", url.Values{"csrf": {csrfB}, "name": {"c1"}})
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a form of session A with session B's CSRF token: %s, want 403", resp.Status)
	}

	// Sign-out of A ends A on the server: its cookie, sent again, is
	// refused; B goes on.
	resp, err = a.PostForm(s.url+"/studio/signout", url.Values{"csrf": {csrfA}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	withCookie := func(cookie string) int {
		t.Helper()
		req, err := http.NewRequest("GET", s.url+"/studio/compute", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: "ferry_studio", Value: cookie})
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp.StatusCode
	}
	if code := withCookie(cookieA); code != http.StatusSeeOther {
		t.Errorf("a copy of session A's cookie after its sign-out: %d, want 303 to sign in", code)
	}
	if code := withCookie(cookieB); code != http.StatusOK {
		t.Errorf("session B after A signed out: %d, want 200", code)
	}
	if code := withCookie(s.token); code != http.StatusSeeOther {
		t.Errorf("the token as the cookie, as it was before: %d, want 303 to sign in", code)
	}

	// B outlives a restart, with its CSRF token.
	s.restart(t)
	if code := withCookie(cookieB); code != http.StatusOK {
		t.Errorf("session B after a restart: %d, want 200", code)
	}
	if got := csrfOf(t, b, s.url); got != csrfB {
		t.Errorf("session B's CSRF token after a restart: %q, want %q", got, csrfB)
	}
}

// csrfOf is the CSRF token that the create-cluster page has for hc's
// session.
func csrfOf(t *testing.T, hc *http.Client, base string) string {
	t.Helper()
	resp, err := hc.Get(base + "/studio/compute/new")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	m := csrfRE.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET /studio/compute/new: %s, and no CSRF field", resp.Status)
	}
	return m[1]
}
