package assets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/envcatalog"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

func environmentView(rec store.Environment) (*apitypes.Environment, error) {
	var es environment.Spec
	if err := json.Unmarshal(rec.Spec, &es); err != nil {
		return nil, fmt.Errorf("environment %s:%s: stored spec: %w", rec.Name, rec.Version, err)
	}
	return &apitypes.Environment{Name: rec.Name, Version: rec.Version, Description: rec.Description,
		Hash: rec.Hash, Created: rec.Created, Spec: &es}, nil
}

// CreateEnvironment registers a version of an environment. snap is the
// snapshot of the files it refers to. Versions are immutable: registering
// the same name and version again with the same content returns the
// existing one, with other content it is refused. With no version, the
// next whole number is taken, unless the latest version has the same
// content, which is then returned.
func (a *Assets) CreateEnvironment(ctx context.Context, who auth.Principal, f *spec.EnvironmentFile, snap string) (*apitypes.Environment, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot register environments")
	}
	if f == nil {
		return nil, apperr.Invalid("the environment is missing")
	}
	if err := f.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if snap != "" {
		if err := a.core.RequireSnapshot(snap, "context"); err != nil {
			return nil, err
		}
	}
	es, err := environment.Resolve(f.Environment(), snap)
	if err != nil {
		return nil, apperr.Invalid("%v", err)
	}
	es.Name, es.Version = "", ""
	hash := es.Hash()

	versions, err := a.st.ListEnvironments(ctx, f.Name)
	if err != nil {
		return nil, err
	}
	version := f.Version
	if version == "" {
		if n := len(versions); n > 0 && versions[n-1].Hash == hash {
			return environmentView(versions[n-1])
		}
		version = nextNumber(versions, func(e store.Environment) string { return e.Version })
	}
	for _, v := range versions {
		if v.Version != version {
			continue
		}
		if v.Hash == hash {
			return environmentView(v)
		}
		return nil, apperr.Conflict("environment %s:%s is registered with other content, and versions do not change; give a new version, or leave version out to get %s", f.Name, version, nextNumber(versions, func(e store.Environment) string { return e.Version }))
	}
	es.Name, es.Version = f.Name, version
	raw, err := json.Marshal(es)
	if err != nil {
		return nil, err
	}
	rec := store.Environment{Name: f.Name, Version: version, Description: f.Description, Spec: raw, Hash: hash, Created: a.now()}
	if err := a.st.CreateEnvironment(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, apperr.Conflict("environment %s:%s was registered at the same time by someone else; run the command again", f.Name, version)
		}
		return nil, err
	}
	return environmentView(rec)
}

// GetEnvironment returns one version of an environment; version "" or
// "latest" is the one registered last.
func (a *Assets) GetEnvironment(ctx context.Context, name, version string) (*apitypes.Environment, error) {
	rec, err := a.lookupEnvironment(ctx, name, version)
	if err != nil {
		return nil, err
	}
	return environmentView(rec)
}

// ListEnvironments returns every version of every environment, or of one.
func (a *Assets) ListEnvironments(ctx context.Context, name string) ([]*apitypes.Environment, error) {
	recs, err := a.st.ListEnvironments(ctx, name)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.Environment{}
	for _, r := range recs {
		v, err := environmentView(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (a *Assets) lookupEnvironment(ctx context.Context, name, version string) (store.Environment, error) {
	if version == "" || version == "latest" {
		versions, err := a.st.ListEnvironments(ctx, name)
		if err != nil {
			return store.Environment{}, err
		}
		if len(versions) == 0 {
			return store.Environment{}, a.unknownEnvironment(ctx, name, "")
		}
		return versions[len(versions)-1], nil
	}
	rec, err := a.st.GetEnvironment(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return store.Environment{}, a.unknownEnvironment(ctx, name, version)
	}
	return rec, err
}

// unknownEnvironment says that name (at version) is not registered and
// what is: the versions of that name, or the names close to it.
func (a *Assets) unknownEnvironment(ctx context.Context, name, version string) error {
	all, err := a.st.ListEnvironments(ctx, "")
	if err != nil {
		return err
	}
	var names, versions []string
	for _, e := range all {
		if !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
		if e.Name == name {
			versions = append(versions, e.Version)
		}
	}
	switch {
	case len(versions) > 0:
		return apperr.NotFound("environment %s has no version %s; it has %s", name, version, strings.Join(versions, ", "))
	case len(names) == 0:
		return apperr.NotFound("environment %s is not registered, and the workspace has no environments; register it with `ferry environment create -f FILE`", name)
	}
	msg := fmt.Sprintf("environment %s is not registered", name)
	if close := spec.Suggest(name, names); close != "" {
		msg += fmt.Sprintf("; did you mean %s?", close)
	}
	return apperr.NotFound("%s (registered: %s)", msg, strings.Join(names, ", "))
}

// ResolveEnvironment turns a job's environment into what its runner
// builds: a reference looked up (resolveEnvironmentRef), an inline one
// checked against the snapshot of its files.
func (a *Assets) ResolveEnvironment(ctx context.Context, e *spec.Environment, snap string) (*environment.Spec, error) {
	if e != nil && e.Ref != "" {
		if snap != "" {
			return nil, apperr.Invalid("environment_snapshot: the job refers to registered environment %s, which carries its own files", e.Ref)
		}
		if strings.HasPrefix(e.Ref, spec.EnvironmentFilePrefix) {
			return nil, apperr.Invalid("environment: %s is a file on the client's machine; `ferry job create` and `ferry online-deployment create` read it and send the environment inline", e.Ref)
		}
		ref, err := spec.ParseEnvironmentRef(e.Ref)
		if err != nil {
			return nil, apperr.Invalid("environment: %v", err)
		}
		return a.resolveEnvironmentRef(ctx, ref)
	}
	if snap != "" {
		if err := a.core.RequireSnapshot(snap, "environment_snapshot"); err != nil {
			return nil, err
		}
	}
	es, err := environment.Resolve(e, snap)
	if err != nil {
		return nil, apperr.Invalid("environment: %v; `ferry job create` uploads them", err)
	}
	return es, nil
}

// resolveEnvironmentRef looks a reference up: an environment registered
// under its name wins, so a site can replace a curated environment by
// registering one of the same name; a name nobody registered is looked up
// in the catalog of curated environments, whose image is resolved here
// whether or not it can be pulled (a node that cannot pull it fails the
// job at Preparing with the engine's words).
func (a *Assets) resolveEnvironmentRef(ctx context.Context, ref spec.EnvironmentRef) (*environment.Spec, error) {
	version := ref.Version
	if ref.Latest {
		version = "latest"
	}
	name, err := a.registeredName(ctx, ref)
	if err != nil {
		return nil, err
	}
	registered := name != ""
	if !registered {
		catalogName := ref.Name
		if ref.Registry != "" && !strings.HasPrefix(strings.ToLower(catalogName), "azureml-") {
			// The registry's names are the workspace's without its prefix.
			catalogName = "AzureML-" + catalogName
		}
		r, err := a.environments.Resolve(catalogName, version)
		if err == nil {
			return &environment.Spec{Kind: environment.KindImage, Image: r.Image, Name: r.Name, Version: r.Version}, nil
		}
		if !errors.Is(err, envcatalog.ErrUnknown) {
			return nil, apperr.Invalid("environment: %v", err)
		}
		if ref.Registry != "" {
			return nil, apperr.Invalid("environment: %s is not in the catalog of Azure's built-in environments (see `ferry environment list --catalog`); add it to the server's --environment-catalog file, or register an environment named %s", ref, ref.Name)
		}
		name = ref.Name
	}
	rec, err := a.lookupEnvironment(ctx, name, version)
	if err != nil {
		var we *apperr.Error
		if errors.As(err, &we) && we.Code == apperr.CodeNotFound {
			msg := we.Msg
			if !registered {
				msg += "; nor is it in the catalog of built-in environments (`ferry environment list --catalog`)"
			}
			return nil, apperr.Invalid("environment: %s", msg)
		}
		return nil, err
	}
	var es environment.Spec
	if err := json.Unmarshal(rec.Spec, &es); err != nil {
		return nil, fmt.Errorf("environment %s:%s: stored spec: %w", rec.Name, rec.Version, err)
	}
	return &es, nil
}

// registeredName is the name under which ref's environment is registered,
// "" when it is not. A registry reference names a curated environment
// without Azure's workspace prefix (sklearn-1.5 for AzureML-sklearn-1.5),
// so an environment registered under either name stands for it.
func (a *Assets) registeredName(ctx context.Context, ref spec.EnvironmentRef) (string, error) {
	names := []string{ref.Name}
	if ref.Registry != "" {
		names = append(names, "AzureML-"+ref.Name)
	}
	for _, n := range names {
		versions, err := a.st.ListEnvironments(ctx, n)
		if err != nil {
			return "", err
		}
		if len(versions) > 0 {
			return n, nil
		}
	}
	return "", nil
}

// CatalogEnvironments returns the catalog of curated environments, ordered
// by name.
func (a *Assets) CatalogEnvironments() []envcatalog.Entry { return a.environments.List() }
