package assets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// registry is what the registries of versioned assets that can be
// archived (models, data assets) share: finding a version, the latest
// one, the next number, and the message that says what is registered
// when a name or version is not. R is the store's record of a version.
type registry[R any] struct {
	what    string // in messages: "model", "data asset"
	plural  string // "models", "data assets"
	command string // the CLI's noun: ferry COMMAND create|restore
	list    func(ctx context.Context, name string) ([]R, error)
	get     func(ctx context.Context, name, version string) (R, error)
	key     func(R) (name, version string, archived bool)
}

func (a *Assets) models() registry[store.Model] {
	return registry[store.Model]{what: "model", plural: "models", command: "model",
		list: a.st.ListModels, get: a.st.GetModel,
		key: func(m store.Model) (string, string, bool) { return m.Name, m.Version, m.Archived }}
}

func (a *Assets) dataAssets() registry[store.DataAsset] {
	return registry[store.DataAsset]{what: "data asset", plural: "data assets", command: "data",
		list: a.st.ListData, get: a.st.GetData,
		key: func(d store.DataAsset) (string, string, bool) { return d.Name, d.Version, d.Archived }}
}

// latest is the version registered last that is not archived.
func (r registry[R]) latest(versions []R) (R, bool) {
	for i := len(versions) - 1; i >= 0; i-- {
		if _, _, archived := r.key(versions[i]); !archived {
			return versions[i], true
		}
	}
	var zero R
	return zero, false
}

// next is one more than the highest whole-number version, archived ones
// included: a number once given is never given again.
func (r registry[R]) next(versions []R) string {
	return nextNumber(versions, func(v R) string { _, version, _ := r.key(v); return version })
}

// nextNumber is one more than the highest of versions that is a whole
// number.
func nextNumber[R any](versions []R, version func(R) string) string {
	n := 0
	for _, v := range versions {
		if i, err := strconv.Atoi(version(v)); err == nil && i > n {
			n = i
		}
	}
	return strconv.Itoa(n + 1)
}

// lookup finds one version, archived or not; version "" or "latest" is
// the newest one not archived.
func (r registry[R]) lookup(ctx context.Context, name, version string) (R, error) {
	var zero R
	if version == "" || version == "latest" {
		versions, err := r.list(ctx, name)
		if err != nil {
			return zero, err
		}
		if latest, ok := r.latest(versions); ok {
			return latest, nil
		}
		if len(versions) > 0 {
			return zero, apperr.NotFound("%s %s has no latest version: all of its versions are archived; restore one with `ferry %s restore %s --version V`", r.what, name, r.command, name)
		}
		return zero, r.unknown(ctx, name, "")
	}
	rec, err := r.get(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return zero, r.unknown(ctx, name, version)
	}
	return rec, err
}

// unknown says that name (at version) is not registered and what is: the
// versions of that name, or the names close to it.
func (r registry[R]) unknown(ctx context.Context, name, version string) error {
	all, err := r.list(ctx, "")
	if err != nil {
		return err
	}
	var names, versions []string
	for _, rec := range all {
		n, v, _ := r.key(rec)
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
		if n == name {
			versions = append(versions, v)
		}
	}
	switch {
	case len(versions) > 0:
		return apperr.NotFound("%s %s has no version %s; it has %s", r.what, name, version, strings.Join(versions, ", "))
	case len(names) == 0:
		return apperr.NotFound("%s %s is not registered, and the workspace has no %s; register it with `ferry %s create -f FILE`", r.what, name, r.plural, r.command)
	}
	msg := fmt.Sprintf("%s %s is not registered", r.what, name)
	if close := spec.Suggest(name, names); close != "" {
		msg += fmt.Sprintf("; did you mean %s?", close)
	}
	return apperr.NotFound("%s (registered: %s)", msg, strings.Join(names, ", "))
}

// visible are the versions a list shows: archived ones only when asked.
func (r registry[R]) visible(recs []R, includeArchived bool) []R {
	if includeArchived {
		return recs
	}
	return slices.DeleteFunc(recs, func(rec R) bool { _, _, archived := r.key(rec); return archived })
}
