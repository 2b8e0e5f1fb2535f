package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"testing"
	"text/tabwriter"

	"github.com/google/go-cmp/cmp"
)

// compute list shows each compute's size and its nodes as now/min/max, as
// the API's view carries them; the local target has neither.
func TestComputeListShowsSizeAndNodes(t *testing.T) {
	n := func(v int) *int { return &v }
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	listComputes(w, []*apitypes.Compute{
		{Name: "cpu", Type: "amlcompute", State: "Succeeded", Size: "Standard_DS3_v2", CurrentNodes: 1, MinNodes: n(0), MaxNodes: n(4), Capacity: 4, Active: 1},
		{Name: "dev-box", Type: "computeinstance", State: "Running", Size: "Standard_DS1_v2", CurrentNodes: 1, MinNodes: n(1), MaxNodes: n(1), Capacity: 1},
		{Name: "local", Type: "local", State: "Succeeded", Capacity: 2, Queued: 3},
	})
	w.Flush()
	want := `NAME     TYPE             STATE      SIZE             NODES  CAPACITY  ACTIVE  QUEUED
cpu      amlcompute       Succeeded  Standard_DS3_v2  1/0/4  4         1       0
dev-box  computeinstance  Running    Standard_DS1_v2  1/1/1  1         0       0
local    local            Succeeded  -                -      2         0       3
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("compute list (-want +got):\n%s", diff)
	}
}
