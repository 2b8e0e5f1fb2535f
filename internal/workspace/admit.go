package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/instance"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// Which pool computes are valid, and which jobs a compute takes: checked
// when a compute is made and when a job is submitted, so that what no node
// of a compute could ever run is refused with the field named instead of
// waiting forever.

// poolSize is the size of a pool compute, from the catalog.
func (s *Service) poolSize(pt *compute.Pool, c *spec.Compute) (sizes.Size, error) {
	return poolSize(s.cfg.Sizes, pt, c)
}

// poolSize is the size of pool compute c of type pt, from catalog cat.
func poolSize(cat *sizes.Catalog, pt *compute.Pool, c *spec.Compute) (sizes.Size, error) {
	if pt.Attached {
		return attachedSize, nil
	}
	sz, ok := cat.Lookup(c.Size)
	if !ok {
		return sizes.Size{}, apperr.Invalid("size: %q is not in the size catalog; see `ferry size list`", c.Size)
	}
	return sz, nil
}

// validatePool checks a pool compute against the catalog and quotas.
func (s *Service) validatePool(ctx context.Context, c *spec.Compute) error {
	pt := s.poolType(c.Type)
	if pt == nil {
		return apperr.Invalid("type: %s is not a pool compute type on this server", c.Type)
	}
	sz, err := s.poolSize(pt, c)
	if err != nil {
		return err
	}
	if sz.Restricted {
		enabled, err := s.st.ListEnabledSizes(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(enabled, func(e string) bool { return strings.EqualFold(e, sz.Name) }) {
			return apperr.Invalid("size: %s is restricted: an owner must enable it first with `ferry quota enable-size %s`", sz.Name, sz.Name)
		}
	}
	if s.cfg.CheckProvider != nil {
		if err := s.cfg.CheckProvider(c); err != nil {
			return &apperr.Error{Code: apperr.CodeInvalid, Msg: "compute " + c.Name + ": " + err.Error(), Err: err}
		}
	}
	if s.cfg.Providers != nil {
		if _, err := s.cfg.Providers(c); err != nil {
			return apperr.Invalid("provider: %v", err)
		}
	}
	if pt.Instance {
		if _, err := instance.ParseConfig(c); err != nil {
			return &apperr.Error{Code: apperr.CodeInvalid, Msg: "compute " + c.Name + ": " + err.Error(), Err: err}
		}
	}
	return nil
}

// admitPool refuses, naming the field, a job pool compute c of type pt
// cannot run: what a node of its size cannot hold here, the rest as its
// type says.
func (s *Service) admitPool(pt *compute.Pool, c *spec.Compute, j *spec.Job, env *environment.Spec) error {
	sz, err := s.poolSize(pt, c)
	if err != nil {
		return err
	}
	// An attached machine's size is not known before its agent joins
	// (admitAttachedGPUs checks what it reported then).
	if !pt.Attached {
		what := "made of " + sz.Name + " nodes"
		if pt.Instance {
			what = "a " + sz.Name
		}
		if err := refuseGPUs(j, pt, c, what, sz.GPUs); err != nil {
			return err
		}
		if d := j.Distribution; d != nil && d.ProcessCountPerInstance > max(sz.VCPUs, sz.GPUs) {
			return apperr.Invalid("distribution.process_count_per_instance: %d processes per node, but a %s node of compute %s has %d vCPUs and %d GPUs; use at most one process per GPU or vCPU",
				d.ProcessCountPerInstance, sz.Name, c.Name, sz.VCPUs, sz.GPUs)
		}
	}
	if pt.Admit == nil {
		return nil
	}
	if err := pt.Admit(c, sz, j, env); err != nil {
		return &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	return nil
}

// refuseGPUs refuses a job that asks for more GPUs per node than a node of
// compute c can ever have: have GPUs, as its size (named what) says. A
// cluster of a GPU size with no nodes now still takes the job.
func refuseGPUs(j *spec.Job, pt *compute.Pool, c *spec.Compute, what string, have int) error {
	n, field := j.Resources.GPUs()
	if n <= have {
		return nil
	}
	return apperr.Invalid("%s: the job asks for %s per node, but %s %s is %s, which has %s; submit it to a compute with GPUs (a cluster or instance of a GPU size: see `ferry size list`), or leave %s out",
		field, count(n, "GPU"), pt.Noun, c.Name, what, gpuCount(have), field)
}

// gpuCount is "no GPU", "1 GPU", "2 GPUs".
func gpuCount(n int) string {
	if n == 0 {
		return "no GPU"
	}
	return count(n, "GPU")
}

// admit checks that compute may run j with env.
func (s *Service) admit(ctx context.Context, computeName string, j *spec.Job, env *environment.Spec) error {
	rec, err := s.st.GetCompute(ctx, computeName)
	if errors.Is(err, store.ErrNotFound) {
		return s.unknownCompute(ctx, computeName)
	}
	if err != nil {
		return err
	}
	if pt := s.poolType(rec.Type); pt != nil {
		if rec.State == StateDeleting {
			return apperr.Conflict("compute: %s is being deleted", computeName)
		}
		var c spec.Compute
		if err := json.Unmarshal(rec.Spec, &c); err != nil {
			return fmt.Errorf("compute %s: stored spec: %w", rec.Name, err)
		}
		err := s.admitPool(pt, &c, j, env)
		if err == nil && pt.Attached {
			err = s.admitAttachedGPUs(ctx, pt, &c, j)
		}
		if err != nil {
			return apperr.Invalid("compute %s (type %s) cannot run this job: %s", computeName, rec.Type, strings.TrimPrefix(err.Error(), "invalid: "))
		}
		if pt.Instance && !instanceWantsNode(rec.State) {
			return apperr.Invalid("compute: compute instance %s is %s; start it with `ferry compute start %s`", computeName, rec.State, computeName)
		}
		return nil
	}
	t, err := s.target(ctx, computeName)
	if err != nil {
		return err
	}
	if err := t.Admit(j, env); err != nil {
		return apperr.Invalid("compute %s (type %s) cannot run this job: %v", computeName, t.Type(), err)
	}
	return nil
}
