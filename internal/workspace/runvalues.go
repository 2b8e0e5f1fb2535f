package workspace

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/store"
)

// SetRunValues records params and tags of a job while it runs.
func (s *Service) SetRunValues(ctx context.Context, who auth.Principal, name string, v apitypes.RunValues) error {
	if !who.MayWriteJob(name) {
		return apperr.Forbidden("this token may not write params or tags of job %s", name)
	}
	if err := apitypes.CheckRunValues(v); err != nil {
		return apperr.Invalid("%v", err)
	}
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return apperr.NotFound("job %q does not exist", name)
	}
	if err != nil {
		return err
	}
	if apitypes.IsTerminal(rec.Status) {
		return apperr.Conflict("job %s is %s; params and tags can only be set while it runs", name, rec.Status)
	}
	var vs []store.RunValue
	for _, k := range slices.Sorted(maps.Keys(v.Params)) {
		vs = append(vs, store.RunValue{Kind: "param", Key: k, Value: v.Params[k]})
	}
	for _, k := range slices.Sorted(maps.Keys(v.Tags)) {
		vs = append(vs, store.RunValue{Kind: "tag", Key: k, Value: v.Tags[k]})
	}
	err = s.st.SetRunValues(ctx, name, vs)
	if errors.Is(err, store.ErrNotFound) {
		return apperr.NotFound("job %q does not exist", name)
	}
	return err
}

// GetRunValues returns a job's params and tags.
func (s *Service) GetRunValues(ctx context.Context, name string) (*apitypes.RunValues, error) {
	vs, err := s.st.ListRunValues(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("job %q does not exist", name)
	}
	if err != nil {
		return nil, err
	}
	out := &apitypes.RunValues{Params: map[string]string{}, Tags: map[string]string{}}
	for _, v := range vs {
		if v.Kind == "tag" {
			out.Tags[v.Key] = v.Value
		} else {
			out.Params[v.Key] = v.Value
		}
	}
	return out, nil
}
