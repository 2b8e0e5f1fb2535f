package studio_test

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// follow runs actions that make the page navigate (a click on a link, a
// form sent) and waits until the next page has loaded, so that what is
// read after it is the new page's and not the old one's; it returns the
// new page's HTTP status.
func (b *browser) follow(what string, actions ...chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, actions...)
	if err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("%s: %v (on %s)", what, err, loc)
	}
	return resp.Status
}

// Open a batch endpoint's page from the endpoints list, send its invoke
// form a local path (refused beside the field), then a data asset: the
// browser lands on the new job's page, and the job scores the asset.
func TestStudioBatchEndpointInBrowser(t *testing.T) {
	s := startServer(t)
	batchApp(t, s)
	b := newBrowser(t)
	b.signIn(s)

	if st := b.follow("open the endpoints", chromedp.Navigate(s.url+"/studio/endpoints")); st != http.StatusOK {
		t.Fatalf("the endpoints page: %d", st)
	}
	b.run("see number-scorer", chromedp.WaitVisible(chromedp.CSS(`tr[data-batch-endpoint="number-scorer"] a`)))
	if st := b.follow("open number-scorer", chromedp.Click(chromedp.CSS(`tr[data-batch-endpoint="number-scorer"] a`))); st != http.StatusOK {
		t.Fatalf("the batch endpoint page: %d", st)
	}
	if loc := get(b, "location", chromedp.Location()); !strings.HasSuffix(loc, "/studio/batch-endpoints/number-scorer") {
		t.Fatalf("the link went to %s", loc)
	}
	if d := b.textOf("#default-deployment"); d != "doubler" {
		t.Errorf("the page's default deployment is %q, want doubler", d)
	}
	b.screenshot("batch-endpoint")

	// A local path: the studio cannot upload it; the error is beside the
	// field, on the same page.
	st := b.follow("invoke with a local path",
		chromedp.SetValue(chromedp.ID("input"), "/tmp/numbers"),
		chromedp.Click(chromedp.ID("invoke")))
	if st != http.StatusUnprocessableEntity {
		t.Errorf("a local path answered %d, want 422", st)
	}
	if msg := b.textOf("#input-error"); !strings.Contains(msg, "local path") {
		t.Errorf("the input's error says %q, want it to say a local path cannot be sent", msg)
	}
	if inv := eval[string](b, `document.getElementById("input").getAttribute("aria-invalid") || ""`); inv != "true" {
		t.Errorf("the input field's aria-invalid is %q, want true", inv)
	}
	b.screenshot("batch-endpoint-input-error")

	// A data asset: the job's page.
	b.follow("invoke with a data asset",
		chromedp.SetValue(chromedp.ID("input"), "azureml:numbers@latest"),
		chromedp.SetValue(chromedp.ID("job-name"), "browser-scored"),
		chromedp.Click(chromedp.ID("invoke")))
	loc := get(b, "location", chromedp.Location())
	if u, err := url.Parse(loc); err != nil || u.Path != "/studio/jobs/browser-scored" {
		t.Fatalf("after invoking the browser is on %s, want the job's page /studio/jobs/browser-scored", loc)
	}
	if h := b.textOf("h1"); h != "browser-scored" {
		t.Errorf("the job page's heading is %q", h)
	}
	j := waitJob(t, s, "browser-scored")
	if j.Status != apitypes.StatusCompleted || j.Metrics["mini_batches_done"] != 2 || j.Metrics["mini_batches_failed"] != 1 {
		t.Errorf("the invoked job ended %s with metrics %v, want Completed, 2 mini-batches done and 1 failed", j.Status, j.Metrics)
	}
	b.follow("reload the job page", chromedp.Reload())
	if st := b.textOf("#job-status"); st != apitypes.StatusCompleted {
		t.Errorf("the job page says %q, want Completed", st)
	}
	b.screenshot("batch-job")
	// The job's own key for its driver's queue is a secret: the page's
	// YAML says it is set, not what it is.
	full, err := s.client().GetJob(context.Background(), "browser-scored")
	if err != nil {
		t.Fatal(err)
	}
	key := full.Spec.EnvironmentVariables["BATCH_DRIVER_KEY"]
	jobHTML := eval[string](b, `document.documentElement.outerHTML`)
	if key == "" || strings.Contains(jobHTML, key) || !strings.Contains(jobHTML, "BATCH_DRIVER_KEY") {
		t.Errorf("the job page shows BATCH_DRIVER_KEY's value (or the API has none: %q)", key)
	}

	b.follow("back to number-scorer", chromedp.Navigate(s.url+"/studio/batch-endpoints/number-scorer"))
	if p := b.textOf(`tr[data-job="browser-scored"] td.progress`); p != "2 done, 1 failed, 0 left" {
		t.Errorf("the endpoint's page shows the job's progress as %q, want 2 done, 1 failed, 0 left", p)
	}
	html := eval[string](b, `document.documentElement.outerHTML`)
	if strings.Contains(html, s.token) {
		t.Error("the batch endpoint page holds the session's token")
	}
}
