package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
)

// `ferry job show` names the attempt's engine handle (a Slurm job id) when
// it has one, so a user can find the job in the engine's own tools.
func TestJobShowPrintsTheEngineHandle(t *testing.T) {
	show := func(j *apitypes.Job) string {
		var b bytes.Buffer
		w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		showJob(w, j)
		w.Flush()
		return b.String()
	}
	out := show(&apitypes.Job{Name: "a", Status: "Queued", Attempt: 1, Handle: "4242"})
	if !strings.Contains(out, "engine handle:  4242\n") {
		t.Errorf("job show of an attempt with a handle:\n%s\nwant a line naming engine handle 4242", out)
	}
	if out := show(&apitypes.Job{Name: "b", Status: "Queued"}); strings.Contains(out, "engine handle") {
		t.Errorf("job show of a job without a handle names one:\n%s", out)
	}
}
