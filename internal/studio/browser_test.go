package studio_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// browser is a headless Chromium driven by chromedp, ended with the test.
type browser struct {
	ctx   context.Context
	shots string // where screenshots go
	t     *testing.T
}

// newBrowser starts Debian's chromium headless with a profile of its
// own; when the test ends it is closed and the test fails if any process
// of that profile is left.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := testutil.RequireChromium(t)
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var left []string
			for _, p := range testutil.Procs() {
				if strings.Contains(p.CmdLine(), profile) {
					left = append(left, p.CmdLine())
				}
			}
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("chromium processes of the test's profile are still running after it was closed: %v", left)
				return
			}
		}
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	shots := t.ArtifactDir()
	t.Logf("screenshots in %s", shots)
	return &browser{ctx: ctx, shots: shots, t: t}
}

// run runs actions with a deadline, failing the test with what.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	get(b, what, chromedp.Steps(actions...))
}

// loads makes one action of steps that send a form or follow a link: it
// runs them and waits until the page they lead to has loaded, so what the
// test waits for or reads next is looked for on that page. Without it a
// WaitVisible can match the element on the page being left (a job's page
// after a cancel and the page of the job it submits again both show
// #message), and a Poll fails when the page goes away under it.
func loads(steps ...chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, _ *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.RunResponse(ctx, steps...); err != nil {
			return chromedp.Void{}, fmt.Errorf("waiting for the page it leads to: %w", err)
		}
		return chromedp.Void{}, nil
	}
}

// get runs one action that gives a value, with a deadline, failing the
// test with what and the page it was on.
func get[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		url, _ := chromedp.Run(b.ctx, chromedp.Location())
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		b.t.Fatalf("%s: %v\n(page %s:\n%s)", what, err, url, body)
	}
	return v
}

// screenshot saves the whole page as NAME.png among the test's artifacts.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := get(b, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn signs in through the sign-in form with the server's owner token.
func (b *browser) signIn(s *testServer) {
	b.t.Helper()
	b.run("open the sign-in page", chromedp.Navigate(s.url+"/studio/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.screenshot("signin")
	b.run("sign in",
		chromedp.SendKeys(chromedp.ID("token"), s.token),
		loads(chromedp.Submit(chromedp.ID("token"))),
		chromedp.WaitVisible(chromedp.ID("computes")))
}

// textOf is the text of the element that the CSS selector sel finds.
func (b *browser) textOf(sel string) string {
	b.t.Helper()
	return get(b, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	return get(b, "evaluate "+expr, chromedp.Evaluate[T](expr))
}

// Sign in, create a cluster from the form and see it in the list; a bad
// value shows its error beside its field.
func TestStudioComputeInBrowser(t *testing.T) {
	s := startServer(t)
	b := newBrowser(t)
	b.signIn(s)
	b.screenshot("compute-empty")

	b.run("open the create-cluster form", chromedp.Navigate(s.url+"/studio/compute/new"), chromedp.WaitVisible(chromedp.ID("name")))
	if opts := b.textOf("#size"); !strings.Contains(opts, "Standard_DS3_v2 — 4 cores") || !strings.Contains(opts, "cores left") {
		t.Errorf("the size list does not show cores and the quota left: %q", opts)
	}
	b.screenshot("compute-new")

	// A maximum below the minimum: the API's error, beside max_instances.
	b.run("send a bad form",
		chromedp.SetValue(chromedp.ID("name"), "gpu-pool"),
		chromedp.SetValue(chromedp.ID("min_instances"), "3"),
		chromedp.SetValue(chromedp.ID("max_instances"), "1"),
		loads(chromedp.Submit(chromedp.ID("name"))),
		chromedp.WaitVisible(chromedp.ID("max_instances-error")))
	if msg := b.textOf("#max_instances-error"); !strings.Contains(msg, "must be ≥ min_instances") {
		t.Errorf("max_instances' error says %q, want the API's 'must be ≥ min_instances'", msg)
	}
	beside := eval[bool](b, `document.getElementById("max_instances").parentElement.contains(document.getElementById("max_instances-error"))`)
	described := eval[bool](b, `document.getElementById("max_instances").getAttribute("aria-describedby").split(" ").includes("max_instances-error")`)
	invalid := eval[bool](b, `document.getElementById("max_instances").getAttribute("aria-invalid") === "true"`)
	if !beside || !described || !invalid {
		t.Errorf("the error is beside its field %v, named by its aria-describedby %v, field marked invalid %v; want all", beside, described, invalid)
	}
	kept := get(b, "read what was kept", chromedp.Value(chromedp.ID("name")))
	if kept != "gpu-pool" {
		t.Errorf("the form lost what was typed: name is %q", kept)
	}
	b.screenshot("compute-new-error")
	if _, err := s.client().GetCompute(context.Background(), "gpu-pool"); err == nil {
		t.Fatal("a form the API refused made the compute")
	}

	// A good form: the cluster's page, then the list shows it.
	b.run("send a good form",
		chromedp.SetValue(chromedp.ID("min_instances"), "0"),
		chromedp.SetValue(chromedp.ID("max_instances"), "2"),
		chromedp.SetValue(chromedp.ID("size"), "Standard_DS2_v2"),
		loads(chromedp.Submit(chromedp.ID("name"))),
		chromedp.WaitVisible(chromedp.ID("compute-state")))
	if st := b.textOf("#compute-state"); st != "Succeeded" {
		t.Errorf("the new cluster's state is %q, want Succeeded", st)
	}
	b.screenshot("compute-detail")
	b.run("open the compute list", chromedp.Navigate(s.url+"/studio/compute"), chromedp.WaitVisible(chromedp.CSS(`tr[data-compute="gpu-pool"]`)))
	row := b.textOf(`tr[data-compute="gpu-pool"]`)
	for _, want := range []string{"amlcompute", "Standard_DS2_v2", "0 / 0 / 2", "dedicated", "scale down after 120 s"} {
		if !strings.Contains(row, want) {
			t.Errorf("the list's row for gpu-pool %q lacks %q", row, want)
		}
	}
	b.screenshot("compute")
	c, err := s.client().GetCompute(context.Background(), "gpu-pool")
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != "Standard_DS2_v2" || *c.MaxNodes != 2 || *c.MinNodes != 0 {
		t.Errorf("the form made %s with size %s, min %d, max %d; want Standard_DS2_v2, 0, 2", c.Name, c.Size, *c.MinNodes, *c.MaxNodes)
	}

	// On a phone's width the page reflows: nothing wider than the screen
	// but the tables' own scrolling boxes.
	b.run("narrow the window", chromedp.EmulateViewport(390, 844))
	b.run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("computes")))
	if wide := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth`); wide {
		t.Error("the compute list is wider than a 390 px screen")
	}
	b.screenshot("compute-phone")
	b.run("widen the window", chromedp.EmulateViewport(1280, 900))

	// Resize from the cluster's page: a bad bound is refused beside its
	// field, a good one changes the cluster.
	b.run("open gpu-pool", loads(chromedp.Click(chromedp.CSS(`tr[data-compute="gpu-pool"] a`))), chromedp.WaitVisible(chromedp.ID("resize-form")))
	b.run("send a bad resize",
		chromedp.SetValue(chromedp.ID("min_instances"), "2"),
		chromedp.SetValue(chromedp.ID("max_instances"), "1"),
		loads(chromedp.Submit(chromedp.ID("max_instances"))),
		chromedp.WaitVisible(chromedp.CSS(`#resize-problem, #max_instances-error, #min_instances-error`)))
	msg := eval[string](b, `[...document.querySelectorAll("#resize-problem, #max_instances-error, #min_instances-error")].map(e => e.textContent).join(" ")`)
	if !strings.Contains(msg, "min") {
		t.Errorf("the bad resize's error says %q", msg)
	}
	b.run("send a good resize",
		chromedp.SetValue(chromedp.ID("min_instances"), "0"),
		chromedp.SetValue(chromedp.ID("max_instances"), "3"),
		loads(chromedp.Submit(chromedp.ID("max_instances"))),
		chromedp.WaitVisible(chromedp.ID("message")))
	if c, err = s.client().GetCompute(context.Background(), "gpu-pool"); err != nil || *c.MaxNodes != 3 {
		t.Errorf("after the resize form the cluster is %+v (%v), want max 3", c, err)
	}

	// Delete, confirmed by typing the name.
	b.run("ask to delete", loads(chromedp.Click(chromedp.ID("delete"))), chromedp.WaitVisible(chromedp.ID("confirm")))
	b.run("confirm with a wrong name", chromedp.SetValue(chromedp.ID("confirm"), "gpu"), loads(chromedp.Click(chromedp.ID("confirm-delete"))), chromedp.WaitVisible(chromedp.ID("confirm-error")))
	if _, err := s.client().GetCompute(context.Background(), "gpu-pool"); err != nil {
		t.Fatalf("a delete confirmed with the wrong name deleted it: %v", err)
	}
	b.run("confirm", chromedp.SetValue(chromedp.ID("confirm"), "gpu-pool"), loads(chromedp.Click(chromedp.ID("confirm-delete"))), chromedp.WaitVisible(chromedp.ID("message")))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := s.client().GetCompute(context.Background(), "gpu-pool"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gpu-pool is still there 30 s after its delete was confirmed")
		}
	}
}

// trainPy logs a loss curve with its run token, then waits for the test
// to let it print one more line, then runs until it is canceled.
const trainPy = `
import json, os, sys, time, urllib.request
def post(body):
    req = urllib.request.Request(os.environ["FERRY_API_URL"] + "/v1/jobs/" + os.environ["FERRY_JOB_ID"] + "/metrics",
        data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["FERRY_RUN_TOKEN"], "Content-Type": "application/json"})
    urllib.request.urlopen(req)
for step in range(8):
    post({"name": "loss", "value": 2.0 / (step + 1), "step": step})
    print("epoch", step, "loss", 2.0 / (step + 1), flush=True)
print("metrics logged", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print("the line after the go-ahead", flush=True)
time.sleep(600)
`

// Submit a job with the CLI, watch its log lines arrive in the open page
// (server-sent events, no reload), see its metric chart, cancel it from
// the page.
func TestStudioJobInBrowser(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	goAhead := filepath.Join(s.work, "go-ahead")
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(trainPy), 0o644); err != nil {
		t.Fatal(err)
	}
	job := "code: .\ncommand: python3 train.py " + goAhead + "\ncompute: local\nexperiment_name: studio-test\n"
	if err := os.WriteFile(filepath.Join(dir, "job.yml"), []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"), "--name", "studio-job-1")

	// The chart is drawn when the page is served: wait for the metrics.
	c := s.client()
	j0, err := c.GetJob(context.Background(), "studio-job-1")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ms, err := c.Metrics(context.Background(), "studio-job-1", "loss")
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 8 {
			break
		}
		if time.Now().After(deadline) {
			j, _ := c.GetJob(context.Background(), "studio-job-1")
			t.Fatalf("the job logged %d of 8 metric values in 60 s (job %+v)", len(ms), j)
		}
	}

	b.signIn(s)
	b.run("open the job list", chromedp.Navigate(s.url+"/studio/jobs?experiment=studio-test"), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="studio-job-1"]`)))
	b.screenshot("jobs")
	b.run("open the job page",
		loads(chromedp.Click(chromedp.CSS(`tr[data-job="studio-job-1"] a`))),
		chromedp.WaitVisible(chromedp.ID("log")),
		chromedp.Poll[chromedp.Void](`document.getElementById("log").textContent.includes("metrics logged")`, chromedp.WithPollingTimeout(30*time.Second)))

	points := eval[int](b, `document.querySelector('figure.chart[data-metric="loss"] svg polyline').getAttribute("points").trim().split(" ").length`)
	if points != 8 {
		t.Errorf("the loss chart has %d points, want 8", points)
	}

	// The go-ahead makes the job print a line; the open page shows it
	// without being loaded again (the marker set on it survives).
	eval[bool](b, `window.studioTestMarker = "same page"; true`)
	if err := os.WriteFile(goAhead, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.run("wait for the live line",
		chromedp.Poll[chromedp.Void](`document.getElementById("log").textContent.includes("the line after the go-ahead")`, chromedp.WithPollingTimeout(30*time.Second)))
	marker := eval[string](b, `window.studioTestMarker || ""`)
	if marker != "same page" {
		t.Error("the page was loaded again: the log line should have come over the open event stream")
	}
	if st := b.textOf("#live-state"); !strings.Contains(st, "live") {
		t.Errorf("the live log's state says %q, want it following live", st)
	}
	b.screenshot("job-running")

	// Cancel from the page.
	b.run("cancel", loads(chromedp.Click(chromedp.ID("cancel"))), chromedp.WaitVisible(chromedp.ID("message")))
	if msg := b.textOf("#message"); !strings.Contains(msg, "cancel asked") {
		t.Errorf("after cancel the page says %q", msg)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		j, err := c.GetJob(context.Background(), "studio-job-1")
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == "Canceled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job is %s 60 s after cancel from the page", j.Status)
		}
	}
	b.run("reload the job page", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("job-status")))
	if st := b.textOf("#job-status"); st != "Canceled" {
		t.Errorf("the job page says %q after the cancel, want Canceled", st)
	}
	if tl := b.textOf("#timeline"); !strings.Contains(tl, "Running") || !strings.Contains(tl, "Canceled") {
		t.Errorf("the status timeline %q lacks Running or Canceled", tl)
	}
	b.screenshot("job")

	// Submit it again: a new job with the same code runs.
	b.run("submit again", loads(chromedp.Click(chromedp.ID("resubmit"))), chromedp.WaitVisible(chromedp.ID("message")))
	if msg := b.textOf("#message"); !strings.Contains(msg, "submitted again from studio-job-1") {
		t.Errorf("after submit again the page says %q", msg)
	}
	again := strings.TrimSpace(b.textOf("h1"))
	if again == "studio-job-1" || again == "" {
		t.Fatalf("submit again shows job %q, want a new job", again)
	}
	b.run("watch the new job's log",
		chromedp.Poll[chromedp.Void](`document.getElementById("log").textContent.includes("the line after the go-ahead")`, chromedp.WithPollingTimeout(60*time.Second)))
	nj, err := c.GetJob(context.Background(), again)
	if err != nil {
		t.Fatal(err)
	}
	// A single-node job has only rank 0's log.
	if st := get(b, "ask for rank 3", chromedp.Evaluate[int](`fetch("/studio/jobs/studio-job-1?rank=3").then(r => r.status)`, chromedp.EvalAwaitPromise)); st != 400 {
		t.Errorf("the page of a single-node job's rank 3 answered %d, want 400", st)
	}
	if nj.ExperimentName != "studio-test" || nj.CodeSnapshot == "" || nj.Spec == nil || nj.Spec.Command != j0.Spec.Command {
		t.Errorf("the job submitted again is %+v, want studio-test's spec and code", nj)
	}
}

// scoreScript answers with a greeting and how many rows it was sent.
const scoreScript = `import json, os

def init():
    print("score.py: init done", flush=True)

def run(raw_data):
    return {"greeting": "hello from " + os.environ.get("DEPLOYMENT", "?"), "n": len(json.loads(raw_data)["data"])}
`

// Change an endpoint's traffic split from the form (a bad split shows
// the API's error beside the form) and invoke it from the test box; the
// endpoint's keys never reach the page.
func TestStudioEndpointInBrowser(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	for name, body := range map[string]string{
		"endpoint.yml": "name: iris-ep\n",
		"blue.yml":     "name: blue\ncode_configuration:\n  code: src\n  scoring_script: score.py\nenvironment_variables:\n  DEPLOYMENT: blue\n",
		"green.yml":    "name: green\ncode_configuration:\n  code: src\n  scoring_script: score.py\nenvironment_variables:\n  DEPLOYMENT: green\n",
		"src/score.py": scoreScript,
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.ferry(t, "online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml"))
	s.ferry(t, "online-deployment", "create", "-f", filepath.Join(dir, "blue.yml"), "-e", "iris-ep", "--local", "--all-traffic")
	s.ferry(t, "online-deployment", "create", "-f", filepath.Join(dir, "green.yml"), "-e", "iris-ep", "--local")
	t.Cleanup(func() { _ = s.client().DeleteOnlineEndpoint(context.Background(), "iris-ep") })

	b := newBrowser(t)
	b.signIn(s)
	b.run("open the endpoints", chromedp.Navigate(s.url+"/studio/endpoints"), chromedp.WaitVisible(chromedp.CSS(`tr[data-endpoint="iris-ep"] a`)))
	b.screenshot("endpoints")
	b.run("open iris-ep", loads(chromedp.Click(chromedp.CSS(`tr[data-endpoint="iris-ep"] a`))), chromedp.WaitVisible(chromedp.ID("traffic-form")))
	if now := b.textOf("#traffic-now"); now != "blue 100 %" {
		t.Errorf("the page says the traffic is %q, want blue 100 %%", now)
	}

	// 60 + 50 is not 100: the API's refusal, beside the form.
	b.run("send a bad split",
		chromedp.SetValue(chromedp.ID("traffic-blue"), "60"),
		chromedp.SetValue(chromedp.ID("traffic-green"), "50"),
		loads(chromedp.Submit(chromedp.ID("traffic-blue"))),
		chromedp.WaitVisible(chromedp.ID("traffic-error")))
	if msg := b.textOf("#traffic-error"); !strings.Contains(msg, "100") {
		t.Errorf("the bad split's error says %q, want it to say the split must add up to 100", msg)
	}
	b.screenshot("endpoint-traffic-error")

	b.run("send a good split",
		chromedp.SetValue(chromedp.ID("traffic-blue"), "70"),
		chromedp.SetValue(chromedp.ID("traffic-green"), "30"),
		loads(chromedp.Submit(chromedp.ID("traffic-blue"))),
		chromedp.WaitVisible(chromedp.ID("message")))
	if now := b.textOf("#traffic-now"); now != "blue 70 %, green 30 %" {
		t.Errorf("after the form the page says %q, want blue 70 %%, green 30 %%", now)
	}
	e, err := s.client().GetOnlineEndpoint(context.Background(), "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	if e.Traffic["blue"] != 70 || e.Traffic["green"] != 30 {
		t.Errorf("the API says the traffic is %v after the form, want blue 70, green 30", e.Traffic)
	}

	// The test box, to green.
	b.run("invoke green",
		chromedp.SetValue(chromedp.ID("test-body"), `{"data": [1, 2, 3]}`),
		chromedp.SetValue(chromedp.ID("test-deployment"), "green"),
		loads(chromedp.Submit(chromedp.ID("test-body"))),
		chromedp.WaitVisible(chromedp.ID("test-answer")))
	if ans := b.textOf("#test-answer"); !strings.Contains(ans, "hello from green") || !strings.Contains(ans, `"n": 3`) && !strings.Contains(ans, `"n":3`) {
		t.Errorf("the test box's answer is %q, want green's greeting and n 3", ans)
	}
	b.screenshot("endpoint")
	keys, err := s.client().GetEndpointCredentials(context.Background(), "iris-ep")
	if err != nil {
		t.Fatal(err)
	}
	html := get(b, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	for _, k := range []string{keys.PrimaryKey, keys.SecondaryKey, s.token} {
		if k != "" && strings.Contains(html, k) {
			t.Error("the endpoint page holds a secret (an endpoint key or the session token)")
		}
	}
}

// Attach a machine (a real sshd on loopback) through the form: without a
// host key the page shows the fingerprint the machine offers, to confirm;
// confirming attaches it with that key pinned. The private key never
// comes back in a page. The key is pasted first and chosen as a file to
// confirm.
func TestStudioAttachInBrowser(t *testing.T) {
	sshd := testutil.StartSSHD(t)
	s := startServer(t)
	c := s.client()
	t.Cleanup(func() { // detach: the agent stops and what Ferry put there goes
		ctx := context.Background()
		if err := c.DeleteCompute(ctx, "ssh-box"); err != nil {
			return
		}
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if _, err := c.GetCompute(ctx, "ssh-box"); err != nil {
				return
			}
		}
		t.Error("ssh-box was not detached within 60 s")
	})
	b := newBrowser(t)
	b.signIn(s)
	b.run("open the attach form", chromedp.Navigate(s.url+"/studio/compute"), loads(chromedp.Click(chromedp.CSS(`a[href="/studio/compute/attach"]`))), chromedp.WaitVisible(chromedp.ID("address")))
	key := strings.TrimSpace(string(sshd.ClientKey))
	b.run("send the form without a host key",
		chromedp.SetValue(chromedp.ID("name"), "ssh-box"),
		chromedp.SetValue(chromedp.ID("address"), sshd.Address),
		chromedp.SetValue(chromedp.ID("ssh_port"), strconv.Itoa(sshd.Port)),
		chromedp.SetValue(chromedp.ID("admin_username"), sshd.User),
		chromedp.SetValue(chromedp.ID("ssh_private_key"), key),
		loads(chromedp.Click(chromedp.ID("attach"))),
		chromedp.WaitVisible(chromedp.ID("offered-fingerprint")))
	if got := b.textOf("#offered-fingerprint"); got != sshd.Fingerprint {
		t.Errorf("the page offers the fingerprint %q to confirm, want the machine's %q", got, sshd.Fingerprint)
	}
	html := get(b, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if strings.Contains(html, "PRIVATE KEY") || strings.Contains(html, key[40:80]) {
		t.Error("the confirmation page holds the private key that was sent")
	}
	if _, err := c.GetCompute(context.Background(), "ssh-box"); err == nil {
		t.Fatal("the attach without a confirmed host key made the compute")
	}
	b.screenshot("attach-confirm")

	// The confirmation asks for the key again: this time as its file,
	// as a user picks ~/.ssh/id_ed25519.
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(keyFile, sshd.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	b.run("confirm and attach with the key file",
		chromedp.SetUploadFiles(chromedp.ID("ssh_private_key_file"), []string{keyFile}),
		loads(chromedp.Click(chromedp.ID("confirm-attach"))),
		chromedp.WaitVisible(chromedp.ID("compute-state")))
	b.screenshot("attach-done")
	got, err := c.GetCompute(context.Background(), "ssh-box")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec == nil || got.Spec.HostKey != sshd.Fingerprint {
		t.Errorf("ssh-box pins host key %v, want the confirmed %q", got.Spec, sshd.Fingerprint)
	}
}

// Create a compute instance from its form (a bad idle time is refused
// beside its field, a schedule is kept) and stop it from its page.
func TestStudioInstanceInBrowser(t *testing.T) {
	s := startServer(t)
	c := s.client()
	t.Cleanup(func() {
		ctx := context.Background()
		if err := c.DeleteCompute(ctx, "dev-box"); err != nil {
			return
		}
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if _, err := c.GetCompute(ctx, "dev-box"); err != nil {
				return
			}
		}
		t.Error("dev-box was not deleted within 60 s")
	})
	b := newBrowser(t)
	b.signIn(s)
	b.run("open the instance form", chromedp.Navigate(s.url+"/studio/compute/new-instance"), chromedp.WaitVisible(chromedp.ID("name")))
	b.run("send a bad idle time",
		chromedp.SetValue(chromedp.ID("name"), "dev-box"),
		chromedp.SetValue(chromedp.ID("idle_time_before_shutdown_minutes"), "5"),
		chromedp.SetValue(chromedp.ID("stop_cron"), "0 18 * * *"),
		loads(chromedp.Submit(chromedp.ID("name"))),
		chromedp.WaitVisible(chromedp.ID("idle_time_before_shutdown_minutes-error")))
	if msg := b.textOf("#idle_time_before_shutdown_minutes-error"); !strings.Contains(msg, "15 to 4320") {
		t.Errorf("the idle time's error says %q", msg)
	}
	if kept := get(b, "read the kept schedule", chromedp.Value(chromedp.ID("stop_cron"))); kept != "0 18 * * *" {
		t.Errorf("the form lost the stop schedule: %q", kept)
	}
	b.run("send a good form",
		chromedp.SetValue(chromedp.ID("idle_time_before_shutdown_minutes"), "60"),
		loads(chromedp.Submit(chromedp.ID("name"))),
		chromedp.WaitVisible(chromedp.ID("compute-state")))
	got, err := c.GetCompute(context.Background(), "dev-box")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec == nil || got.Spec.IdleTimeBeforeShutdownMins == nil || *got.Spec.IdleTimeBeforeShutdownMins != 60 || got.Spec.Schedules == nil {
		t.Errorf("the form made %+v, want idle 60 and a stop schedule", got.Spec)
	}
	b.screenshot("instance")
	b.run("stop it", loads(chromedp.Click(chromedp.CSS(`button[value="stop"]`))), chromedp.WaitVisible(chromedp.ID("message")))
	if msg := b.textOf("#message"); !strings.Contains(msg, "stop asked") {
		t.Errorf("after Stop the page says %q", msg)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got, err := c.GetCompute(context.Background(), "dev-box")
		if err != nil {
			t.Fatal(err)
		}
		if got.State == "Stopped" || got.State == "Stopping" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev-box is %s 60 s after Stop from its page", got.State)
		}
	}
}
