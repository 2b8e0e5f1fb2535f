package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/store"
)

// SetOutputs records the snapshots of an attempt's outputs.
func (s *Service) SetOutputs(ctx context.Context, who auth.Principal, name string, attempt int, out apitypes.Outputs) error {
	rec, err := s.fence(ctx, who, name, attempt)
	if err != nil {
		return err
	}
	raw, err := s.checkOutputs(ctx, who, rec, out)
	if err != nil {
		return err
	}
	err = s.storeOutputs(ctx, name, raw)
	s.heard(name)
	return err
}

// checkOutputs checks a runner's outputs for the job rec and returns them
// as they are stored.
func (s *Service) checkOutputs(ctx context.Context, who auth.Principal, rec store.Job, out apitypes.Outputs) (json.RawMessage, error) {
	if out.Empty() {
		// Nothing to check (most small jobs' outputs): the spec is not
		// read for its declared outputs (bench/dispatch).
		return json.Marshal(out)
	}
	if out.Artifacts != "" {
		if err := s.requireSnapshot(out.Artifacts, "artifacts"); err != nil {
			return nil, err
		}
	}
	var j struct {
		Outputs map[string]json.RawMessage `json:"outputs"`
	}
	if err := json.Unmarshal(rec.Spec, &j); err != nil {
		return nil, err
	}
	for k, id := range out.Named {
		if _, ok := j.Outputs[k]; !ok {
			return nil, apperr.Invalid("named.%s: the job declares no output by that name", k)
		}
		if err := s.requireSnapshot(id, "named."+k); err != nil {
			return nil, err
		}
	}
	if err := checkSkipped(out, j.Outputs); err != nil {
		return nil, err
	}
	if err := s.checkOutputQuota(ctx, who, out); err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// storeOutputs records checked outputs of a job that has not ended.
func (s *Service) storeOutputs(ctx context.Context, name string, raw json.RawMessage) error {
	_, err := s.st.UpdateJob(ctx, name, func(j *store.Job) (*store.Event, error) {
		if apitypes.IsTerminal(j.Status) {
			return nil, apperr.Conflict("job %s is already %s; outputs must be uploaded before the final status", name, j.Status)
		}
		j.Outputs = raw
		return nil, nil
	})
	return err
}

// checkFinalOutputs puts into end the outputs and the Finalizing step that
// the final report r carries. Outputs the server refuses are not recorded
// and a completed attempt fails, as when a runner's own outputs call is
// refused; a rank other than 0 has both ignored, as the outputs call and
// its progress reports are.
func (s *Service) checkFinalOutputs(ctx context.Context, who auth.Principal, rec store.Job, r apitypes.Report, end *attemptEnd) error {
	if r.Rank > 0 {
		return nil
	}
	end.finalizing = r.Finalizing
	end.running, end.runningFor = r.Running, runningFor(r)
	if r.Outputs == nil {
		return nil
	}
	raw, err := s.checkOutputs(ctx, who, rec, *r.Outputs)
	switch apperr.CodeOf(err) {
	case apperr.CodeInvalid, apperr.CodeNotFound, apperr.CodeConflict, apperr.CodeForbidden, apperr.CodeTooLarge:
		s.log.Warn("outputs of a final report refused", "job", rec.Name, "attempt", rec.Attempt, "err", err)
		if end.status == apitypes.StatusCompleted {
			end.status, end.reason, end.msg = apitypes.StatusFailed, "uploading outputs failed", "outputs refused: "+err.Error()
		}
		return nil
	}
	if err != nil {
		return err
	}
	end.outputs = raw
	return nil
}

// recordApart records the Finalizing step and outputs in end on their
// own, as the runner's own calls would have, and leaves them out of end:
// for a report that may not end the attempt (one rank of several, a
// preemption).
func (s *Service) recordApart(ctx context.Context, who auth.Principal, name string, attempt, rank int, end *attemptEnd) error {
	if end.running != "" {
		if err := s.ReportStatus(ctx, who, name, attempt, apitypes.Report{Rank: rank, Status: apitypes.StatusRunning, Reason: end.running}); err != nil {
			return err
		}
		end.running = ""
	}
	if end.finalizing != "" {
		if err := s.ReportStatus(ctx, who, name, attempt, apitypes.Report{Rank: rank, Status: apitypes.StatusFinalizing, Reason: end.finalizing}); err != nil {
			return err
		}
		end.finalizing = ""
	}
	if end.outputs != nil {
		if err := s.storeOutputs(ctx, name, end.outputs); err != nil {
			return err
		}
		end.outputs = nil
	}
	return nil
}

// checkSkipped bounds a runner's list of skipped outputs: it is shown to
// users as it is.
func checkSkipped(out apitypes.Outputs, declared map[string]json.RawMessage) error {
	if len(out.Skipped) > apitypes.MaxSkippedOutputs {
		return apperr.Invalid("skipped: at most %d entries (got %d); count the rest in skipped_more", apitypes.MaxSkippedOutputs, len(out.Skipped))
	}
	if out.SkippedMore < 0 {
		return apperr.Invalid("skipped_more: %d is negative", out.SkippedMore)
	}
	for i, sk := range out.Skipped {
		if _, ok := declared[sk.Output]; !ok && sk.Output != "outputs" {
			return apperr.Invalid("skipped[%d].output: %q is neither outputs nor an output the job declares", i, sk.Output)
		}
		if len(sk.Path) > 4*snapshot.MaxPathLen || len(sk.Reason) > 1024 || !utf8.ValidString(sk.Path) || !utf8.ValidString(sk.Reason) {
			return apperr.Invalid("skipped[%d]: path and reason must be UTF-8 of at most %d and 1024 bytes", i, 4*snapshot.MaxPathLen)
		}
	}
	return nil
}

// checkOutputQuota refuses outputs that hold more than the per-job output
// quota: the runner skips what is over it before uploading, so only a
// runner that ignores its assignment gets here. It also refuses, to a run
// token, snapshots its job did not make or receive: recorded as outputs
// they would become readable to it (blobscope.go).
func (s *Service) checkOutputQuota(ctx context.Context, who auth.Principal, out apitypes.Outputs) error {
	limit := s.outputLimits().JobBytes
	var total int64
	for _, id := range append(slices.Collect(maps.Values(out.Named)), out.Artifacts) {
		if id == "" {
			continue
		}
		m, err := s.GetSnapshot(ctx, who, id)
		if apperr.CodeOf(err) == apperr.CodeNotFound {
			return apperr.Invalid("outputs: snapshot %s is not stored; upload the outputs first", id)
		}
		if err != nil {
			return err
		}
		total += m.TotalSize()
	}
	if limit <= 0 {
		return nil
	}
	if total > limit {
		return &apperr.Error{Code: apperr.CodeTooLarge, Msg: fmt.Sprintf("outputs: they hold %d bytes, over the job's output quota of %d (ferry server --output-quota)", total, limit)}
	}
	return nil
}
