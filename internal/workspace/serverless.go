package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// serverless returns the implicit cluster of a job with no compute but an
// instance_type, as Azure's serverless compute runs it: one cluster per
// size (and tier), min 0, made on first use and grown to the job's
// instance_count when it asks for more than the cluster's max.
func (s *Service) serverless(ctx context.Context, j *spec.Job) (string, error) {
	sz, ok := s.cfg.Sizes.Lookup(j.Resources.InstanceType)
	if !ok {
		var names []string
		for _, x := range s.cfg.Sizes.List() {
			names = append(names, x.Name)
		}
		msg := fmt.Sprintf("resources.instance_type: %q is not in the size catalog", j.Resources.InstanceType)
		if close := spec.Suggest(j.Resources.InstanceType, names); close != "" {
			msg += fmt.Sprintf("; did you mean %s?", close)
		}
		return "", apperr.Invalid("%s (see `ferry size list`)", msg)
	}
	if s.cfg.Providers == nil {
		return "", apperr.Invalid("resources.instance_type: this server has no node provider, so it cannot run serverless jobs; name a compute")
	}
	typ := s.serverlessType()
	if typ == "" {
		return "", apperr.Invalid("resources.instance_type: this server has no compute type for serverless jobs; name a compute")
	}
	tier := "dedicated"
	name := "serverless-" + strings.ToLower(strings.ReplaceAll(sz.Name, "_", "-"))
	if q := j.QueueSettings; q != nil && q.JobTier == "spot" {
		tier, name = "low_priority", name+"-spot"
	}
	n := max(instancesOf(j), s.cfg.ServerlessMax)
	idle := int(s.cfg.ServerlessIdle / time.Second)
	c := &spec.Compute{Name: name, Type: typ, Size: sz.Name, Tier: tier, MinInstances: intp(0), MaxInstances: intp(n),
		IdleTimeBeforeScaleDown: &idle, Description: "implicit cluster of serverless jobs on " + sz.Name}
	rec, err := s.st.GetCompute(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if err := s.validatePool(ctx, c); err != nil {
			return "", err
		}
		raw, err := json.Marshal(c)
		if err != nil {
			return "", err
		}
		now := s.now()
		err = s.st.CreateCompute(ctx, store.Compute{Name: name, Type: c.Type, Spec: raw, State: "Succeeded", Created: now, Modified: now})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return "", err
		}
		s.event(ctx, name, "created", "implicit cluster for serverless jobs on "+sz.Name)
	case err != nil:
		return "", err
	default:
		var have spec.Compute
		if err := json.Unmarshal(rec.Spec, &have); err == nil && have.MaxInstances != nil && *have.MaxInstances < instancesOf(j) {
			if _, err := s.nodes.ResizeCompute(ctx, name, nil, intp(instancesOf(j)), nil); err != nil {
				return "", err
			}
		}
	}
	return name, nil
}

// serverlessType is the pool type serverless jobs' implicit clusters are
// of (compute.Pool.Serverless), or "" when this server has none.
func (s *Service) serverlessType() string {
	for _, name := range slices.Sorted(maps.Keys(s.cfg.PoolTypes)) {
		if s.cfg.PoolTypes[name].Serverless {
			return name
		}
	}
	return ""
}
