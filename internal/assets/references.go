package assets

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// referenceCheckers check one reference of each kind: nil when the
// workspace can resolve it, else an error whose message says what to do.
// Pipelines add "component" here.
func (a *Assets) referenceCheckers() map[string]func(ctx context.Context, ref string) error {
	return map[string]func(context.Context, string) error{
		"environment": a.checkEnvironmentRef,
		"data":        a.checkDataRef,
		"model":       a.checkModelRef,
		"compute":     a.checkComputeRef,
	}
}

// ReferenceKinds are the kinds of reference CheckReferences knows.
func (a *Assets) ReferenceKinds() []string {
	var kinds []string
	for k := range a.referenceCheckers() {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// CheckReferences looks up every reference and returns the problems, in
// the order of refs; none when all resolve. The CLI asks before it
// uploads anything, so that a job naming a missing environment is refused
// without sending its code first; the submission checks them again.
func (a *Assets) CheckReferences(ctx context.Context, refs []apitypes.Reference) ([]apitypes.ReferenceProblem, error) {
	if len(refs) > 1000 {
		return nil, apperr.Invalid("references: at most 1000 at a time, got %d", len(refs))
	}
	checkers := a.referenceCheckers()
	out := []apitypes.ReferenceProblem{}
	for _, r := range refs {
		check, ok := checkers[r.Kind]
		if !ok {
			return nil, apperr.Invalid("references: kind %q is not one this server checks (%s)", r.Kind, strings.Join(a.ReferenceKinds(), ", "))
		}
		err := check(ctx, r.Ref)
		if err == nil {
			continue
		}
		var e *apperr.Error
		if !errors.As(err, &e) || (e.Code != apperr.CodeInvalid && e.Code != apperr.CodeNotFound) {
			return nil, err
		}
		msg := e.Msg
		for _, prefix := range []string{"environment: ", r.Field + ": "} {
			msg = strings.TrimPrefix(msg, prefix)
		}
		out = append(out, apitypes.ReferenceProblem{Field: r.Field, Ref: r.Ref, Message: msg})
	}
	return out, nil
}

func (a *Assets) checkEnvironmentRef(ctx context.Context, ref string) error {
	if strings.HasPrefix(ref, spec.EnvironmentFilePrefix) {
		return nil // the client's own file, sent inline
	}
	r, err := spec.ParseEnvironmentRef(ref)
	if err != nil {
		return apperr.Invalid("%v", err)
	}
	_, err = a.resolveEnvironmentRef(ctx, r)
	return err
}

func (a *Assets) checkDataRef(ctx context.Context, ref string) error {
	if !spec.IsDataRef(ref) {
		return nil // a local path or a URL: not the registry's
	}
	name, version, err := spec.ParseDataRef(ref)
	if err != nil {
		return apperr.Invalid("%v", err)
	}
	_, err = a.GetData(ctx, name, version)
	return err
}

func (a *Assets) checkModelRef(ctx context.Context, ref string) error {
	_, err := a.ResolveModel(ctx, ref)
	return err
}

func (a *Assets) checkComputeRef(ctx context.Context, ref string) error {
	name := strings.TrimPrefix(ref, "azureml:")
	if name == "" {
		return nil
	}
	_, err := a.st.GetCompute(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return a.core.UnknownCompute(ctx, name)
	}
	return err
}
