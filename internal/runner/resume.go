package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"fmt"
)

// Preemption, from the runner's side: when the server says the node is
// being preempted, the runner stops the job as it would for a cancel
// (SIGTERM, SIGKILL after the grace), uploads ./outputs and the named
// outputs, and reports StatusPreempted; the server queues the job again.
// The next attempt's runner puts those outputs back in ./outputs before the
// command starts, so a job that checkpoints there resumes where it was.

// restoreOutputs writes the ./outputs snapshot of an earlier attempt into
// dir, the fresh ./outputs of this attempt.
func (r *runner) restoreOutputs(ctx context.Context, a *apitypes.Assignment, dir string) error {
	if a.ResumeOutputs == "" {
		return nil
	}
	if err := r.extract(ctx, a.ResumeOutputs, dir); err != nil {
		return fmt.Errorf("outputs of the previous attempt: %w", err)
	}
	r.log.Info("outputs of the previous attempt restored", "snapshot", a.ResumeOutputs)
	return nil
}

// preemptedReport is the final report of an attempt that was stopped
// because its node was preempted. A command that ended by itself first
// keeps its own report: a job that completed is done.
func preemptedReport(res apitypes.Report, outErr error) apitypes.Report {
	if res.Status == apitypes.StatusCompleted {
		return res
	}
	rep := apitypes.Report{Status: apitypes.StatusPreempted, Reason: "the node was preempted; the job was stopped and its outputs kept", ExitCode: res.ExitCode}
	if outErr != nil {
		rep.Reason = "the node was preempted; the job was stopped, but its outputs could not all be uploaded"
		rep.Error = outErr.Error()
	}
	return rep
}
