package assets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// modelSpec is what the store keeps of a model file beside its columns.
type modelSpec struct {
	Tags       map[string]string `json:"tags,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	PathName   string            `json:"path_name,omitempty"`
}

func modelView(rec store.Model) (*apitypes.Model, error) {
	var ms modelSpec
	if len(rec.Spec) > 0 {
		if err := json.Unmarshal(rec.Spec, &ms); err != nil {
			return nil, fmt.Errorf("model %s:%s: stored spec: %w", rec.Name, rec.Version, err)
		}
	}
	return &apitypes.Model{ID: "azureml:" + rec.Name + ":" + rec.Version, Name: rec.Name, Version: rec.Version,
		Type: rec.Type, Description: rec.Description, Tags: ms.Tags, Properties: ms.Properties,
		Snapshot: rec.Snapshot, PathName: ms.PathName, Hash: rec.Hash, Archived: rec.Archived, Created: rec.Created}, nil
}

// modelHash is a version's identity: its files, its type and its
// properties, which Azure also holds fixed. Description and tags are
// about the model, not part of it, so a change to them alone is not new
// content.
func modelHash(f *spec.ModelFile, snap string) string {
	h := sha256.New()
	fmt.Fprintf(h, "type %q\nsnapshot %q\n", f.Type, snap)
	for _, k := range slices.Sorted(maps.Keys(f.Properties)) {
		fmt.Fprintf(h, "property %q %q\n", k, f.Properties[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CreateModel registers a version of a model whose files are the
// uploaded snapshot snap. Versions are immutable: registering the same
// name and version again with the same content returns the existing one,
// with other content it is refused. With no version, the next whole
// number is taken, unless the latest version has the same content, which
// is then returned: creating an unchanged model twice is one version.
func (a *Assets) CreateModel(ctx context.Context, who auth.Principal, f *spec.ModelFile, snap string) (*apitypes.Model, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot register models")
	}
	if f == nil {
		return nil, apperr.Invalid("the model is missing")
	}
	if f.Type == "" {
		f.Type = spec.ModelTypes[0]
	}
	if err := f.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if snap == "" {
		return nil, apperr.Invalid("snapshot: a model needs its files uploaded as a snapshot; `ferry model create -f FILE` uploads the path it names")
	}
	if err := a.core.RequireSnapshot(snap, "snapshot"); err != nil {
		return nil, err
	}
	if _, err := a.core.ReadSnapshot(snap); err != nil {
		return nil, apperr.Invalid("snapshot: %v", err)
	}
	hash := modelHash(f, snap)

	versions, err := a.st.ListModels(ctx, f.Name)
	if err != nil {
		return nil, err
	}
	version := f.Version
	if version == "" {
		if latest, ok := a.models().latest(versions); ok && latest.Hash == hash {
			return modelView(latest)
		}
		version = a.models().next(versions)
	}
	for _, v := range versions {
		if v.Version != version {
			continue
		}
		if v.Hash == hash {
			return modelView(v)
		}
		return nil, apperr.Conflict("model %s:%s is registered with other content (files, type or properties), and versions do not change; give a new version, or leave version out to get %s", f.Name, version, a.models().next(versions))
	}
	raw, err := json.Marshal(modelSpec{Tags: f.Tags, Properties: f.Properties, PathName: ModelPathName(f.Path)})
	if err != nil {
		return nil, err
	}
	rec := store.Model{Name: f.Name, Version: version, Type: f.Type, Description: f.Description,
		Spec: raw, Snapshot: snap, Hash: hash, Created: a.now()}
	if err := a.st.CreateModel(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// Registered meanwhile: the same content is that version, as
			// it would have been had this call come second.
			if other, gerr := a.st.GetModel(ctx, f.Name, version); gerr == nil && other.Hash == hash {
				return modelView(other)
			}
			return nil, apperr.Conflict("model %s:%s was registered at the same time by someone else with other content; run the command again", f.Name, version)
		}
		return nil, apperr.NoSpace(err, "model "+f.Name+":"+version)
	}
	return modelView(rec)
}

// GetModel returns one version of a model, archived or not; version ""
// or "latest" is the newest one not archived.
func (a *Assets) GetModel(ctx context.Context, name, version string) (*apitypes.Model, error) {
	rec, err := a.models().lookup(ctx, name, version)
	if err != nil {
		return nil, err
	}
	return modelView(rec)
}

// ResolveModel finds the model a reference names: azureml:NAME:VERSION,
// azureml:NAME@latest or NAME@latest (spec.ParseModelRef). It is how
// deployments find their model. A bad reference is apperr.CodeInvalid, a model
// that is not registered apperr.CodeNotFound; both messages say what to do.
func (a *Assets) ResolveModel(ctx context.Context, ref string) (*apitypes.Model, error) {
	name, version, err := spec.ParseModelRef(ref)
	if err != nil {
		return nil, apperr.Invalid("%v", err)
	}
	return a.GetModel(ctx, name, version)
}

// ListModels returns the versions of every model, or of one, in
// registration order; archived versions only when includeArchived.
func (a *Assets) ListModels(ctx context.Context, name string, includeArchived bool) ([]*apitypes.Model, error) {
	recs, err := a.st.ListModels(ctx, name)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.Model{}
	for _, r := range a.models().visible(recs, includeArchived) {
		v, err := modelView(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ArchiveModel archives (archived true) or restores one version. An
// archived version keeps its files and can still be shown and downloaded
// by its version, but is no longer listed or the latest.
func (a *Assets) ArchiveModel(ctx context.Context, who auth.Principal, name, version string, archived bool) (*apitypes.Model, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot archive models")
	}
	if version == "" || version == "latest" {
		return nil, apperr.Invalid("version: say which version to archive or restore, e.g. --version 3")
	}
	rec, err := a.st.SetModelArchived(ctx, name, version, archived)
	if errors.Is(err, store.ErrNotFound) {
		return nil, a.models().unknown(ctx, name, version)
	}
	if err != nil {
		return nil, apperr.NoSpace(err, "model "+name+":"+version)
	}
	return modelView(rec)
}

// ModelPathName is the name of the file or folder a model's path names
// ("model" for ../model-1/model/); "" when it names none: what a
// deployment's scoring code finds the model under.
func ModelPathName(p string) string {
	name := path.Base(path.Clean(filepath.ToSlash(p)))
	if name == "." || name == "/" || name == ".." {
		return ""
	}
	return name
}
