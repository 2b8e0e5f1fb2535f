package studio

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

func TestChartsDrawEachMetricByStep(t *testing.T) {
	ms := []apitypes.Metric{
		{Name: "loss", Value: 1, Step: 2},
		{Name: "loss", Value: 3, Step: 0},
		{Name: "acc", Value: 0.5, Step: 0},
		{Name: "loss", Value: math.NaN(), Step: 1},
		{Name: "loss", Value: 2, Step: 1},
	}
	cs := charts(ms)
	if len(cs) != 2 || cs[0].Name != "acc" || cs[1].Name != "loss" {
		t.Fatalf("charts = %+v, want acc then loss", cs)
	}
	loss := cs[1]
	// Steps 0, 1, 2 across the width; 3 at the top, 1 at the bottom.
	if want := "10.0,10.0 300.0,100.0 590.0,190.0"; loss.Points != want {
		t.Errorf("loss points %q, want %q", loss.Points, want)
	}
	if loss.Count != 3 || loss.Skipped != 1 || loss.Last != 1 || loss.MinY != "1" || loss.MaxY != "3" || loss.MinX != "0" || loss.MaxX != "2" {
		t.Errorf("loss chart %+v", loss)
	}
	// One value: a dot in the middle, no division by zero.
	if acc := cs[0]; acc.Points != "300.0,100.0" || len(acc.Dots) != 1 {
		t.Errorf("acc chart %+v", acc)
	}
}

func TestChartOfOnlyNaNIsEmpty(t *testing.T) {
	c := drawChart("x", []apitypes.Metric{{Name: "x", Value: math.Inf(1)}})
	if c.Count != 0 || c.Points != "" || c.Skipped != 1 {
		t.Errorf("chart %+v, want no points and one skipped", c)
	}
}

// sseEvents parses a server-sent event stream into (id, data) pairs.
func sseEvents(t *testing.T, stream string) (ids []int64, lines []string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(stream))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "id: "):
			n, err := strconv.ParseInt(l[4:], 10, 64)
			if err != nil {
				t.Fatalf("bad id line %q", l)
			}
			ids = append(ids, n)
		case strings.HasPrefix(l, "data: "):
			lines = append(lines, l[6:])
		case l == "":
		default:
			t.Fatalf("unexpected line %q in the stream", l)
		}
	}
	return ids, lines
}

func TestSSEWriterSendsLinesWithResumeOffsets(t *testing.T) {
	rec := httptest.NewRecorder()
	w := &sseWriter{w: rec, rc: http.NewResponseController(rec), offset: 100}
	for _, chunk := range []string{"first li", "ne\nsecond\r\n", "", "third\nfour"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	ids, lines := sseEvents(t, rec.Body.String())
	if d := cmp.Diff([]string{"first line", "second", "third"}, lines); d != "" {
		t.Errorf("lines (-want +got):\n%s", d)
	}
	// Each id is the offset after its line: a browser that reconnects
	// with it gets the next line, not this one again.
	if d := cmp.Diff([]int64{111, 119, 125}, ids); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
	if string(w.partial) != "four" || w.offset != 125 {
		t.Errorf("kept %q at %d, want the partial line four at 125", w.partial, w.offset)
	}
}

// FuzzSSEWriter: whatever bytes a job prints, the stream is well formed
// (no line of the log can end an event or forge a field) and its events
// give the log's lines back, with ids at their ends.
func FuzzSSEWriter(f *testing.F) {
	f.Add([]byte("a\nb\n"), 1)
	f.Add([]byte("\r\n\r\n\n"), 2)
	f.Add([]byte("data: x\nid: 7\nevent: end\n"), 3)
	f.Add([]byte{0xff, 0xfe, '\n', 'x', '\r', 'y', '\n'}, 1)
	f.Fuzz(func(t *testing.T, log []byte, chunk int) {
		if chunk < 1 {
			chunk = 1
		}
		rec := httptest.NewRecorder()
		w := &sseWriter{w: rec, rc: http.NewResponseController(rec)}
		for rest := log; len(rest) > 0; {
			n := min(chunk, len(rest))
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		ids, lines := sseEvents(t, rec.Body.String())
		want := strings.Split(string(log), "\n")
		want = want[:len(want)-1] // the part after the last newline is held back
		if len(lines) != len(want) || len(ids) != len(want) {
			t.Fatalf("%d lines and %d ids for %d lines of log", len(lines), len(ids), len(want))
		}
		var off int64
		for i, l := range want {
			off += int64(len(l)) + 1
			if ids[i] != off {
				t.Errorf("line %d: id %d, want %d", i, ids[i], off)
			}
			clean := strings.ReplaceAll(strings.ToValidUTF8(strings.TrimSuffix(l, "\r"), "\uFFFD"), "\r", "")
			if lines[i] != clean {
				t.Errorf("line %d: %q, want %q", i, lines[i], clean)
			}
		}
	})
}

// The in-process transport streams: a handler's flushed bytes reach the
// client before the handler returns, and its status and header arrive.
func TestHandlerTransportStreams(t *testing.T) {
	next := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/v1/x" || r.URL.Query().Get("a") != "b" {
			http.Error(w, "bad request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Test", "yes")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "one\n")
		http.NewResponseController(w).Flush()
		<-next
		io.WriteString(w, "two\n")
	})
	hc := &http.Client{Transport: handlerTransport{h: h}}
	req, _ := http.NewRequest("GET", "http://studio.internal/v1/x?a=b", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-Test") != "yes" {
		t.Fatalf("got %s %v", resp.Status, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	if l, err := br.ReadString('\n'); err != nil || l != "one\n" {
		t.Fatalf("first line %q, %v: the flushed line did not come before the handler ended", l, err)
	}
	close(next)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "two\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

// A handler that panics fails the call instead of the server; a canceled
// request ends a handler that waits for it.
func TestHandlerTransportPanicAndCancel(t *testing.T) {
	hc := &http.Client{Transport: handlerTransport{h: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })}}
	if _, err := hc.Get("http://studio.internal/"); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("a panicking handler gave %v, want an error saying so", err)
	}
	ended := make(chan struct{})
	hc = &http.Client{Transport: handlerTransport{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		<-r.Context().Done()
		close(ended)
	})}}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://studio.internal/", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not see its request canceled")
	}
}

func TestCSRFCheckTakesOnlyTheSessionsOwn(t *testing.T) {
	a, b := randomID(), randomID()
	if a == b || len(a) < 40 {
		t.Fatalf("random ids %q and %q: want two different ones of 32 bytes", a, b)
	}
	if !checkCSRF(a, a) || checkCSRF(a, b) || checkCSRF(a, "") || checkCSRF("", "") || checkCSRF(a, a[1:]) {
		t.Error("checkCSRF takes only the session's own CSRF token")
	}
}

func TestSafeNextStaysInTheStudio(t *testing.T) {
	for in, want := range map[string]string{
		"/studio/jobs?status=Failed": "/studio/jobs?status=Failed",
		"https://evil.example/":      "/studio/compute",
		"//evil.example/studio/":     "/studio/compute",
		"/studio/\\evil":             "/studio/compute",
		"":                           "/studio/compute",
		"/v1/jobs":                   "/studio/compute",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPlaceErrorsPutsFieldErrorsBesideFields(t *testing.T) {
	f := clusterForm{Errors: map[string]string{}}
	err := &client.APIError{}
	err.Detail = "invalid compute"
	err.Errors = append(err.Errors, fieldErr("max_instances", "must be ≥ min_instances (got 1 < 3)"), fieldErr("location", "is not used"))
	placeErrors(&f, err)
	if f.Errors["max_instances"] != "must be ≥ min_instances (got 1 < 3)" || !strings.Contains(f.Problem, "location: is not used") {
		t.Errorf("form %+v", f)
	}
	f = clusterForm{Errors: map[string]string{}}
	err = &client.APIError{}
	err.Detail = "size Standard_X: not in the size catalog"
	placeErrors(&f, err)
	if f.Errors["size"] == "" || f.Problem != "" {
		t.Errorf("a workspace error naming size: form %+v", f)
	}
	if !strings.Contains(f.Errors["size"], "Standard_X") {
		t.Errorf("size error %q", f.Errors["size"])
	}
}

func fieldErr(field, msg string) *spec.FieldError {
	return &spec.FieldError{Field: field, Message: msg}
}

func TestParsePairs(t *testing.T) {
	got, err := parsePairs(" spot = scavenger,premium=high\nlow=1, ")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"spot": "scavenger", "premium": "high", "low": "1"}, got); diff != "" {
		t.Errorf("parsePairs (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"spot", "=x", "spot=", "a=1, a=2"} {
		if _, err := parsePairs(bad); err == nil {
			t.Errorf("parsePairs(%q) took it, want an error", bad)
		}
	}
}

// FuzzParsePairs: whatever a form sends, parsePairs either refuses it or
// gives trimmed, non-empty names and values without separators.
func FuzzParsePairs(f *testing.F) {
	for _, s := range []string{"spot=scavenger, premium=high", "low=1000\nmedium=0", "a==b", ",,", "x=1,x=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parsePairs(s)
		if err != nil {
			return
		}
		for k, v := range m {
			if k == "" || v == "" || k != strings.TrimSpace(k) || v != strings.TrimSpace(v) || strings.ContainsAny(k+v, ",\n\r") || strings.Contains(k, "=") {
				t.Errorf("parsePairs(%q) gave %q=%q", s, k, v)
			}
		}
	})
}

func TestPlaceFieldErrorsSlurm(t *testing.T) {
	errs := map[string]string{}
	err := &client.APIError{}
	err.Detail = "invalid compute"
	err.Errors = append(err.Errors, fieldErr("job_tier_qos.gold", `"gold" is not a job tier`), fieldErr("ssh_settings.ssh_private_key_file", "refused the key"), fieldErr("location", "is not used"))
	problem := placeFieldErrors(errs, slurmFields, err)
	want := map[string]string{"job_tier_qos": `"gold" is not a job tier`, "secret": "refused the key"}
	if diff := cmp.Diff(want, errs); diff != "" || !strings.Contains(problem, "location: is not used") {
		t.Errorf("errors (-want +got):\n%s\nproblem %q", diff, problem)
	}
	errs = map[string]string{}
	err = &client.APIError{}
	err.Detail = `partition: the cluster has no partition "gpus"; sinfo lists debug, small`
	if problem := placeFieldErrors(errs, slurmFields, err); problem != "" || !strings.Contains(errs["partition"], `"gpus"`) {
		t.Errorf("a Check error naming partition: errors %v, problem %q", errs, problem)
	}
}

// The API names a Kubernetes compute's errors down to an instance type's
// quantity; they land beside the instance types field, and the attach
// check's refusal of the credentials beside the kubeconfig.
func TestPlaceFieldErrorsKube(t *testing.T) {
	errs := map[string]string{}
	err := &client.APIError{}
	err.Detail = "invalid compute"
	err.Errors = append(err.Errors, fieldErr("instance_types.cpu-small.resources.requests.cpu", `"lots" is not a quantity`),
		fieldErr("kubeconfig_content", "is not a kubeconfig"), fieldErr("pod_template.status", "unknown field"))
	problem := placeFieldErrors(errs, kubeFields, err)
	want := map[string]string{"instance_types": `"lots" is not a quantity`, "kubeconfig": "is not a kubeconfig"}
	if diff := cmp.Diff(want, errs); diff != "" || !strings.Contains(problem, "pod_template.status: unknown field") {
		t.Errorf("errors (-want +got):\n%s\nproblem %q", diff, problem)
	}
	errs = map[string]string{}
	err = &client.APIError{}
	err.Detail = "kubeconfig: the credentials may not create services in namespace jobs; grant them"
	if problem := placeFieldErrors(errs, kubeFields, err); problem != "" || !strings.Contains(errs["kubeconfig"], "create services") {
		t.Errorf("the attach check naming kubeconfig: errors %v, problem %q", errs, problem)
	}
}
