package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/google/go-cmp/cmp"
)

// On a target that queues itself (Slurm) a job's first look may find it
// Preparing, handed to the engine's queue, and then Queued again with
// the engine's reason: the stream must still say why it waits. The API
// is served by a fake that answers GET /v1/jobs/NAME with each state in
// turn (the job's path through a real server is racy to catch).
func TestWatchQueueSeesTheReasonAfterTheHandOff(t *testing.T) {
	states := []apitypes.Job{
		{Name: "j", Status: apitypes.StatusPreparing, StatusReason: "handing the attempt to compute hpc's queue"},
		{Name: "j", Status: apitypes.StatusQueued, StatusReason: "queued: waiting in compute hpc's queue: Resources"},
		{Name: "j", Status: apitypes.StatusRunning},
	}
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/jobs/j" {
			http.NotFound(w, r)
			return
		}
		j := states[min(calls, len(states)-1)]
		calls++
		_ = json.NewEncoder(w).Encode(j)
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	a := newApp(&out, &errb, envOf(nil))
	a.watchQueue(t.Context(), client.New(srv.URL, "t"), "j")
	want := []string{"job j: queued: waiting in compute hpc's queue: Resources", "job j: Running"}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(errb.String()), "\n")); diff != "" {
		t.Errorf("watchQueue's lines (-want +got):\n%s", diff)
	}
}
