package workspace

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
)

// A job's run token sets its params and tags while it runs, a key set
// again keeps the last value, job show has them, and what is refused
// names the field.
func TestRunValues(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 2})
	submit(t, s, "a")
	submit(t, s, "b")
	dispatch(t, s)
	run := runPrincipal("a", 1)
	for _, v := range []apitypes.RunValues{
		{Params: map[string]string{"lr": "0.1", "epochs": "3"}, Tags: map[string]string{"model": "linear"}},
		{Params: map[string]string{"lr": "0.01"}},
	} {
		if err := s.SetRunValues(ctx, run, "a", v); err != nil {
			t.Fatal(err)
		}
	}
	j := status(t, s, "a")
	if d := cmp.Diff(map[string]string{"lr": "0.01", "epochs": "3"}, j.Params); d != "" {
		t.Errorf("params (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"model": "linear"}, j.RunTags); d != "" {
		t.Errorf("tags (-want +got):\n%s", d)
	}
	if err := s.SetRunValues(ctx, run, "b", apitypes.RunValues{Params: map[string]string{"x": "1"}}); apperr.CodeOf(err) != apperr.CodeForbidden {
		t.Errorf("params of another job: %v", err)
	}
	if err := s.SetRunValues(ctx, run, "a", apitypes.RunValues{Tags: map[string]string{"": "1"}}); apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "tags:") {
		t.Errorf("an empty key: %v", err)
	}
	if err := s.SetRunValues(ctx, run, "a", apitypes.RunValues{Params: map[string]string{"k": strings.Repeat("v", apitypes.MaxRunValue+1)}}); apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "params.k") {
		t.Errorf("a value over the limit: %v", err)
	}
	if err := s.SetRunValues(ctx, owner, "nope", apitypes.RunValues{Params: map[string]string{"x": "1"}}); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("a job that does not exist: %v", err)
	}
	submit(t, s, "c") // queued: canceled at once
	if _, err := s.CancelJob(ctx, owner, "c"); err != nil {
		t.Fatal(err)
	}
	if j := status(t, s, "c"); !apitypes.IsTerminal(j.Status) {
		t.Fatalf("a canceled queued job is %s", j.Status)
	}
	if err := s.SetRunValues(ctx, owner, "c", apitypes.RunValues{Params: map[string]string{"x": "1"}}); apperr.CodeOf(err) != apperr.CodeConflict {
		t.Errorf("params of an ended job: %v", err)
	}
}
