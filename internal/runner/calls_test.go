package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// apiRecorder is a workspace API that hands out one assignment and
// records the calls a runner makes to it. It stands in for the server
// only at the HTTP boundary, so that a server of another version (or one
// that refuses the assignment) can be played.
type apiRecorder struct {
	assignment *apitypes.Assignment // nil: the assignment is refused (409)
	mu         sync.Mutex
	reports    []apitypes.Report // in the order received
	setOutputs []apitypes.Outputs
}

func (a *apiRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	what := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch what {
	case "assignment":
		if a.assignment == nil {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": 409, "title": "Conflict", "detail": "attempt 1 of job j is not current"})
			return
		}
		_ = json.NewEncoder(w).Encode(a.assignment)
	case "status":
		var rep apitypes.Report
		_ = json.Unmarshal(body, &rep)
		a.reports = append(a.reports, rep)
		_, _ = w.Write([]byte(`{}`))
	case "outputs":
		var out apitypes.Outputs
		_ = json.Unmarshal(body, &out)
		a.setOutputs = append(a.setOutputs, out)
		_, _ = w.Write([]byte(`{}`))
	case "heartbeat":
		_, _ = w.Write([]byte(`{"cancel": false}`))
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": 404, "title": "Not Found", "detail": r.URL.Path})
	}
}

func runAgainst(t *testing.T, api *apiRecorder, dir string) error {
	t.Helper()
	return runHanded(t, api, dir, nil)
}

// runHanded runs an attempt against api, handed the assignment a when it
// is not nil.
func runHanded(t *testing.T, api *apiRecorder, dir string, a *apitypes.Assignment) error {
	t.Helper()
	return runHolding(t, api, dir, a, 0)
}

// runHolding is runHanded with the runner's HoldRunning.
func runHolding(t *testing.T, api *apiRecorder, dir string, a *apitypes.Assignment, hold time.Duration) error {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Run(ctx, Config{Client: client.New(srv.URL, "secret"), Job: "j", Attempt: 1, Dir: dir,
		CacheDir: filepath.Join(t.TempDir(), "cache"), EnvCacheDir: filepath.Join(t.TempDir(), "env"), APIURL: srv.URL, RunToken: "secret",
		Assignment: a, HoldRunning: hold})
}

func statuses(reps []apitypes.Report) []string {
	var out []string
	for _, r := range reps {
		s := r.Status
		if r.Running != "" {
			s += "+" + apitypes.StatusRunning
		}
		if r.Finalizing != "" {
			s += "+" + apitypes.StatusFinalizing
		}
		if r.Outputs != nil {
			s += "+outputs"
		}
		out = append(out, s)
	}
	return out
}

// A server that does not offer FinalOutputs (an older one) gets the
// Finalizing report and the outputs call of their own, and a final report
// without them, which it would not know.
func TestRunnerMakesTheSeparateCallsForAnOlderServer(t *testing.T) {
	api := &apiRecorder{assignment: &apitypes.Assignment{Job: "j", Attempt: 1, Spec: &spec.Job{Command: "true"}}}
	if err := runAgainst(t, api, filepath.Join(t.TempDir(), "attempt")); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{apitypes.StatusRunning, apitypes.StatusFinalizing, apitypes.StatusCompleted}, statuses(api.reports)); d != "" {
		t.Errorf("reports to an older server (-want +got):\n%s", d)
	}
	if len(api.setOutputs) != 1 {
		t.Errorf("outputs calls to an older server: %d, want 1", len(api.setOutputs))
	}
}

// A server that offers FinalOutputs gets the outputs and, for a job with
// nothing to upload, the Finalizing step with the final report. (A job
// with outputs to upload reports Finalizing before the upload, and its
// outputs reach the job: e2e's TestHelloJobStreamsShowsAndDownloads.)
func TestRunnerCarriesOutputsInTheFinalReport(t *testing.T) {
	api := &apiRecorder{assignment: &apitypes.Assignment{Job: "j", Attempt: 1, Spec: &spec.Job{Command: "true"}, FinalOutputs: true}}
	if err := runAgainst(t, api, filepath.Join(t.TempDir(), "attempt")); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{apitypes.StatusRunning, apitypes.StatusCompleted + "+Finalizing+outputs"}, statuses(api.reports)); d != "" {
		t.Errorf("reports (-want +got):\n%s", d)
	}
	if len(api.setOutputs) != 0 {
		t.Errorf("outputs calls: %d, want none (the final report carries them)", len(api.setOutputs))
	}
}

// The assignment is fetched beside the attempt's set-up; when both fail,
// the failed fetch is still what the final report says, as when it came
// first.
func TestRefusedAssignmentIsReportedBeforeASetUpFailure(t *testing.T) {
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(blocked, "attempt") // cannot be made: its parent is a file
	api := &apiRecorder{}
	if err := runAgainst(t, api, dir); err != nil {
		t.Fatal(err)
	}
	if len(api.reports) != 1 || api.reports[0].Status != apitypes.StatusFailed || api.reports[0].Reason != "runner could not get its assignment" {
		t.Errorf("reports with a refused assignment and a set-up failure: %+v", api.reports)
	}
	// With the set-up done (and the job's metrics endpoint started beside
	// the fetch), a refused assignment still ends the runner at once.
	api = &apiRecorder{}
	if err := runAgainst(t, api, filepath.Join(t.TempDir(), "attempt")); err != nil {
		t.Fatal(err)
	}
	if len(api.reports) != 1 || api.reports[0].Reason != "runner could not get its assignment" {
		t.Errorf("reports with a refused assignment alone: %+v", api.reports)
	}
	api = &apiRecorder{assignment: &apitypes.Assignment{Job: "j", Attempt: 1, Spec: &spec.Job{Command: "true"}, FinalOutputs: true}}
	if err := runAgainst(t, api, dir); err != nil {
		t.Fatal(err)
	}
	if len(api.reports) != 1 || api.reports[0].Reason != "preparing the working directory failed" {
		t.Errorf("reports with a set-up failure alone: %+v", api.reports)
	}
}

// A runner handed its assignment with the launch does not fetch it: here
// the server would refuse the fetch, and the job still runs.
func TestHandedAssignmentIsNotFetched(t *testing.T) {
	api := &apiRecorder{}
	a := &apitypes.Assignment{Job: "j", Attempt: 1, Spec: &spec.Job{Command: "true"}, FinalOutputs: true}
	if err := runHanded(t, api, filepath.Join(t.TempDir(), "attempt"), a); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{apitypes.StatusRunning, apitypes.StatusCompleted + "+Finalizing+outputs"}, statuses(api.reports)); d != "" {
		t.Errorf("reports of a runner handed its assignment (-want +got):\n%s", d)
	}
}

// A server that offers FinalRunning gets the Running step with the final
// report when the command ends before the runner's hold is over; a command
// that outlives the hold is reported Running apart; and a job with outputs
// to upload has its held Running report sent before Finalizing.
func TestRunnerCarriesRunningInTheFinalReport(t *testing.T) {
	for _, c := range []struct {
		name, command string
		hold          time.Duration
		want          []string
	}{
		{"ended within the hold", "true", time.Minute,
			[]string{apitypes.StatusCompleted + "+Running+Finalizing+outputs"}},
		{"outlived the hold", "sleep 1", time.Millisecond,
			[]string{apitypes.StatusRunning, apitypes.StatusCompleted + "+Finalizing+outputs"}},
		{"no hold", "true", -1,
			[]string{apitypes.StatusRunning, apitypes.StatusCompleted + "+Finalizing+outputs"}},
		// The recorder takes no blobs, so the upload fails; what counts
		// is that Running comes first.
		{"outputs to upload", "echo x > outputs/f", time.Minute,
			[]string{apitypes.StatusRunning, apitypes.StatusFinalizing, apitypes.StatusFailed + "+outputs"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := &apiRecorder{}
			a := &apitypes.Assignment{Job: "j", Attempt: 1, Spec: &spec.Job{Command: c.command}, FinalOutputs: true, FinalRunning: true}
			if err := runHolding(t, api, filepath.Join(t.TempDir(), "attempt"), a, c.hold); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, statuses(api.reports)); d != "" {
				t.Errorf("reports (-want +got):\n%s", d)
			}
			last := api.reports[len(api.reports)-1]
			if last.Running != "" && (last.Running != "command started" || last.RunningForUS < 0) {
				t.Errorf("the carried Running step: %q, %d µs", last.Running, last.RunningForUS)
			}
		})
	}
}
