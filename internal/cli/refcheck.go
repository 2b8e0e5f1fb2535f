package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

// jobReferences lists what a job names that the workspace must have: its
// environment (a registered or built-in one), its registered data inputs
// and its compute. Pipelines add their steps' components.
func jobReferences(j *spec.Job) []apitypes.Reference {
	var refs []apitypes.Reference
	env, envField := j.Environment, "environment"
	if j.Type == "sweep" && j.Trial != nil { // a sweep's environment is its trial's
		env, envField = j.Trial.Environment, "trial.environment"
	}
	if e := env; e != nil && e.Ref != "" && !strings.HasPrefix(e.Ref, spec.EnvironmentFilePrefix) {
		refs = append(refs, apitypes.Reference{Field: envField, Kind: "environment", Ref: e.Ref})
	}
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		if in := j.Inputs[name]; !in.IsLiteral() && spec.IsDataRef(in.Path) {
			kind := "data"
			if spec.IsModelType(in.Type) {
				kind = "model" // mlflow_model, custom_model, triton_model: a registered model
			}
			refs = append(refs, apitypes.Reference{Field: "inputs." + name + ".path", Kind: kind, Ref: in.Path})
		}
	}
	if j.ComputeName() != "" {
		refs = append(refs, apitypes.Reference{Field: "compute", Kind: "compute", Ref: j.Compute})
	}
	return refs
}

// checkLocalPaths makes sure the local paths a job names exist, before
// the workspace is asked anything: a typo in a path costs no round trip.
// A sweep's trial code is relative to trialSrc, where its field is
// prefix+"code".
func checkLocalPaths(src, trialSrc specFile, prefix string, j *spec.Job) error {
	fields := []pathField{}
	if j.Code != "" {
		fields = append(fields, pathField{file: src, field: "code", value: j.Code})
	}
	if j.Type == "sweep" && j.Trial != nil && j.Trial.Code != "" {
		fields = append(fields, pathField{file: trialSrc, field: prefix + "code", value: j.Trial.Code})
	}
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[name]
		if in.IsLiteral() || spec.IsDataRef(in.Path) || isRemote(in.Path) {
			continue
		}
		fields = append(fields, pathField{file: src, field: "inputs." + name + ".path", value: in.Path})
	}
	for _, f := range fields {
		if _, err := os.Stat(f.path()); errors.Is(err, os.ErrNotExist) {
			return f.notFound()
		}
	}
	return nil
}

// checkReferences asks the workspace, in one call, whether it has what
// refs name, before anything is uploaded: a job that names an environment
// nobody registered is refused at once, naming the field and what to do,
// instead of after its code and inputs were sent. The submission checks
// again, which is what counts; a server too old to answer is not asked.
func checkReferences(ctx context.Context, c *client.Client, src specFile, refs []apitypes.Reference) error {
	if len(refs) == 0 {
		return nil
	}
	problems, err := c.CheckReferences(ctx, refs)
	if client.StatusOf(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range problems {
		errs = append(errs, pathField{file: src, field: p.Field, value: p.Ref}.errorf("%s", p.Message))
	}
	return errors.Join(errs...)
}
