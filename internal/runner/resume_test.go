package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// An attempt stopped for a preemption reports Preempted whatever the
// command's stop looked like, unless the command had completed by itself.
func TestPreemptedReport(t *testing.T) {
	code := 143
	zero := 0
	tests := []struct {
		name   string
		res    apitypes.Report
		outErr error
		want   apitypes.Report
	}{
		{"stopped", apitypes.Report{Status: apitypes.StatusCanceled, ExitCode: &code}, nil,
			apitypes.Report{Status: apitypes.StatusPreempted, Reason: "the node was preempted; the job was stopped and its outputs kept", ExitCode: &code}},
		{"stopped while the environment was built", apitypes.Report{Status: apitypes.StatusFailed, Reason: "environment build failed"}, nil,
			apitypes.Report{Status: apitypes.StatusPreempted, Reason: "the node was preempted; the job was stopped and its outputs kept"}},
		{"outputs not uploaded", apitypes.Report{Status: apitypes.StatusCanceled, ExitCode: &code}, errors.New("outputs: disk gone"),
			apitypes.Report{Status: apitypes.StatusPreempted, Reason: "the node was preempted; the job was stopped, but its outputs could not all be uploaded", ExitCode: &code, Error: "outputs: disk gone"}},
		{"completed first", apitypes.Report{Status: apitypes.StatusCompleted, ExitCode: &zero}, nil,
			apitypes.Report{Status: apitypes.StatusCompleted, ExitCode: &zero}},
	}
	for _, tt := range tests {
		if d := cmp.Diff(tt.want, preemptedReport(tt.res, tt.outErr)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, d)
		}
	}
}
