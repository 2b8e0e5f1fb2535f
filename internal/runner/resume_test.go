package runner

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/workspace"
)

// An attempt stopped for a preemption reports Preempted whatever the
// command's stop looked like, unless the command had completed by itself.
func TestPreemptedReport(t *testing.T) {
	code := 143
	zero := 0
	tests := []struct {
		name   string
		res    workspace.Report
		outErr error
		want   workspace.Report
	}{
		{"stopped", workspace.Report{Status: workspace.StatusCanceled, ExitCode: &code}, nil,
			workspace.Report{Status: workspace.StatusPreempted, Reason: "the node was preempted; the job was stopped and its outputs kept", ExitCode: &code}},
		{"stopped while the environment was built", workspace.Report{Status: workspace.StatusFailed, Reason: "environment build failed"}, nil,
			workspace.Report{Status: workspace.StatusPreempted, Reason: "the node was preempted; the job was stopped and its outputs kept"}},
		{"outputs not uploaded", workspace.Report{Status: workspace.StatusCanceled, ExitCode: &code}, errors.New("outputs: disk gone"),
			workspace.Report{Status: workspace.StatusPreempted, Reason: "the node was preempted; the job was stopped, but its outputs could not all be uploaded", ExitCode: &code, Error: "outputs: disk gone"}},
		{"completed first", workspace.Report{Status: workspace.StatusCompleted, ExitCode: &zero}, nil,
			workspace.Report{Status: workspace.StatusCompleted, ExitCode: &zero}},
	}
	for _, tt := range tests {
		if d := cmp.Diff(tt.want, preemptedReport(tt.res, tt.outErr)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, d)
		}
	}
}
