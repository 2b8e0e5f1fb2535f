package workspace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/store"
)

// RunValues are a job's MLflow params and tags (mlflow.log_param,
// mlflow.set_tag), one value per key, the last one set.
type RunValues struct {
	Params map[string]string `json:"params"`
	Tags   map[string]string `json:"tags"`
}

// Bounds of what a job may set as params and tags, MLflow's own: a key of
// up to 250 characters, a value of up to 6000, 100 params and tags a call.
const (
	MaxRunKey          = 250
	MaxRunValue        = 6000
	MaxRunValuesPerSet = 100
)

// CheckRunValues says what is wrong with params and tags a job sets,
// naming the field; nil if nothing is. The runner checks with it too.
func CheckRunValues(v RunValues) error {
	if n := len(v.Params) + len(v.Tags); n > MaxRunValuesPerSet {
		return fmt.Errorf("params and tags: at most %d per call (got %d)", MaxRunValuesPerSet, n)
	}
	check := func(field string, m map[string]string) error {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if strings.TrimSpace(k) == "" || len(k) > MaxRunKey {
				return fmt.Errorf("%s: a key needs 1 to %d characters (got %q)", field, MaxRunKey, k)
			}
			if len(m[k]) > MaxRunValue {
				return fmt.Errorf("%s.%s: a value may have at most %d characters (got %d)", field, k, MaxRunValue, len(m[k]))
			}
		}
		return nil
	}
	return errors.Join(check("params", v.Params), check("tags", v.Tags))
}

// SetRunValues records params and tags of a job while it runs.
func (s *Service) SetRunValues(ctx context.Context, who auth.Principal, name string, v RunValues) error {
	if !who.MayWriteJob(name) {
		return Forbidden("this token may not write params or tags of job %s", name)
	}
	if err := CheckRunValues(v); err != nil {
		return Invalid("%v", err)
	}
	rec, err := s.st.GetJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return NotFound("job %q does not exist", name)
	}
	if err != nil {
		return err
	}
	if IsTerminal(rec.Status) {
		return Conflict("job %s is %s; params and tags can only be set while it runs", name, rec.Status)
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
		return NotFound("job %q does not exist", name)
	}
	return err
}

// GetRunValues returns a job's params and tags.
func (s *Service) GetRunValues(ctx context.Context, name string) (*RunValues, error) {
	vs, err := s.st.ListRunValues(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, NotFound("job %q does not exist", name)
	}
	if err != nil {
		return nil, err
	}
	out := &RunValues{Params: map[string]string{}, Tags: map[string]string{}}
	for _, v := range vs {
		if v.Kind == "tag" {
			out.Tags[v.Key] = v.Value
		} else {
			out.Params[v.Key] = v.Value
		}
	}
	return out, nil
}
