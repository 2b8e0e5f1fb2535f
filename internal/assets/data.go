package assets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// dataSpec is what the store keeps of a data file beside its columns.
type dataSpec struct {
	Tags map[string]string `json:"tags,omitempty"`
	Path string            `json:"path,omitempty"` // a remote asset's path
}

func dataView(rec store.DataAsset) (*apitypes.DataAsset, error) {
	var ds dataSpec
	if len(rec.Spec) > 0 {
		if err := json.Unmarshal(rec.Spec, &ds); err != nil {
			return nil, fmt.Errorf("data asset %s:%s: stored spec: %w", rec.Name, rec.Version, err)
		}
	}
	return &apitypes.DataAsset{ID: "azureml:" + rec.Name + ":" + rec.Version, Name: rec.Name, Version: rec.Version,
		Type: rec.Type, Description: rec.Description, Tags: ds.Tags, Snapshot: rec.Snapshot, Path: ds.Path,
		Hash: rec.Hash, Archived: rec.Archived, Created: rec.Created}, nil
}

// dataHash is a version's identity: its files and its type. Description
// and tags are about the data, not part of it, so a change to them alone
// is not new content.
func dataHash(f *spec.DataFile, snap string) string {
	h := sha256.New()
	fmt.Fprintf(h, "type %q\nsnapshot %q\n", f.Type, snap)
	if snap == "" {
		fmt.Fprintf(h, "path %q\n", f.Path) // a reference: its path is its content
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CreateData registers a version of a data asset whose files are the
// uploaded snapshot snap, with the rules of CreateModel: versions are
// immutable, the same content under the same version (or under no
// version, when it is the latest's) is that version, and other content
// under an existing version is refused.
func (a *Assets) CreateData(ctx context.Context, who auth.Principal, f *spec.DataFile, snap string) (*apitypes.DataAsset, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot register data assets")
	}
	if f == nil {
		return nil, apperr.Invalid("the data asset is missing")
	}
	if f.Type == "" {
		f.Type = spec.DataTypes[0]
	}
	if err := f.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	remote := spec.IsRemotePath(f.Path)
	switch {
	case remote && snap != "":
		return nil, apperr.Invalid("snapshot: path %s is remote and kept as a reference; upload nothing for it", f.Path)
	case remote:
		if _, err := a.resolveRemote(ctx, f.Path); err != nil {
			var e *apperr.Error
			if errors.As(err, &e) {
				e.Msg = "path: " + e.Msg
				return nil, e
			}
			return nil, apperr.Invalid("path: %v", err)
		}
	case snap == "":
		return nil, apperr.Invalid("snapshot: a data asset needs its files uploaded as a snapshot; `ferry data create -f FILE` uploads the path it names")
	default:
		if err := a.core.RequireSnapshot(snap, "snapshot"); err != nil {
			return nil, err
		}
		if _, err := a.core.ReadSnapshot(snap); err != nil {
			return nil, apperr.Invalid("snapshot: %v", err)
		}
	}
	hash := dataHash(f, snap)

	versions, err := a.st.ListData(ctx, f.Name)
	if err != nil {
		return nil, err
	}
	version := f.Version
	if version == "" {
		if latest, ok := a.dataAssets().latest(versions); ok && latest.Hash == hash {
			return dataView(latest)
		}
		version = a.dataAssets().next(versions)
	}
	for _, v := range versions {
		if v.Version != version {
			continue
		}
		if v.Hash == hash {
			return dataView(v)
		}
		return nil, apperr.Conflict("data asset %s:%s is registered with other content (files or type), and versions do not change; give a new version, or leave version out to get %s", f.Name, version, a.dataAssets().next(versions))
	}
	ds := dataSpec{Tags: f.Tags}
	if remote {
		ds.Path = f.Path
	}
	raw, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	rec := store.DataAsset{Name: f.Name, Version: version, Type: f.Type, Description: f.Description,
		Spec: raw, Snapshot: snap, Hash: hash, Created: a.now()}
	if err := a.st.CreateData(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			if other, gerr := a.st.GetData(ctx, f.Name, version); gerr == nil && other.Hash == hash {
				return dataView(other)
			}
			return nil, apperr.Conflict("data asset %s:%s was registered at the same time by someone else with other content; run the command again", f.Name, version)
		}
		return nil, apperr.NoSpace(err, "data asset "+f.Name+":"+version)
	}
	return dataView(rec)
}

// GetData returns one version of a data asset, archived or not; version
// "" or "latest" is the newest one not archived.
func (a *Assets) GetData(ctx context.Context, name, version string) (*apitypes.DataAsset, error) {
	rec, err := a.dataAssets().lookup(ctx, name, version)
	if err != nil {
		return nil, err
	}
	return dataView(rec)
}

// ListData returns the versions of every data asset, or of one, in
// registration order; archived versions only when includeArchived.
func (a *Assets) ListData(ctx context.Context, name string, includeArchived bool) ([]*apitypes.DataAsset, error) {
	recs, err := a.st.ListData(ctx, name)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.DataAsset{}
	for _, r := range a.dataAssets().visible(recs, includeArchived) {
		v, err := dataView(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ArchiveData archives (archived true) or restores one version. An
// archived version keeps its files and can still be shown, downloaded and
// named by its version, but is no longer listed or the latest.
func (a *Assets) ArchiveData(ctx context.Context, who auth.Principal, name, version string, archived bool) (*apitypes.DataAsset, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot archive data assets")
	}
	if version == "" || version == "latest" {
		return nil, apperr.Invalid("version: say which version to archive or restore, e.g. --version 3")
	}
	rec, err := a.st.SetDataArchived(ctx, name, version, archived)
	if errors.Is(err, store.ErrNotFound) {
		return nil, a.dataAssets().unknown(ctx, name, version)
	}
	if err != nil {
		return nil, apperr.NoSpace(err, "data asset "+name+":"+version)
	}
	return dataView(rec)
}

// RegisteredOutput returns the id of the version of data asset name that
// registers output k of job ("" when none does): the one tagged with both.
func (a *Assets) RegisteredOutput(ctx context.Context, name, job, k string) (string, error) {
	versions, err := a.st.ListData(ctx, name)
	if err != nil {
		return "", err
	}
	for _, v := range versions {
		var ds dataSpec
		if json.Unmarshal(v.Spec, &ds) == nil && ds.Tags["ferry.job"] == job && ds.Tags["ferry.output"] == k {
			return "azureml:" + v.Name + ":" + v.Version, nil
		}
	}
	return "", nil
}

// ResolveDataInputs finds the data asset each of a job's data inputs
// names by reference (path: azureml:NAME:VERSION or azureml:NAME@latest),
// or the registered model for an input of a model type, and returns the
// inputs' snapshots with those added: a registered input is the asset's
// snapshot, looked up here, never uploaded by the client.
// An input whose type is not the asset's is refused, naming the field;
// one with no type takes the asset's.
func (a *Assets) ResolveDataInputs(ctx context.Context, j *spec.Job, uploaded map[string]string) (map[string]string, error) {
	out, cloned := uploaded, false // unchanged (nil stays nil) when no input names an asset
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[name]
		if in.IsLiteral() || !spec.IsDataRef(in.Path) {
			continue
		}
		field := "inputs." + name + ".path"
		if _, ok := uploaded[name]; ok {
			return nil, apperr.Invalid("input_snapshots.%s: input %s names the registered data asset %s, whose files the workspace has; upload nothing for it", name, name, in.Path)
		}
		if spec.IsModelType(in.Type) {
			// A model input (mlflow_model, custom_model, triton_model)
			// names a registered model: its files are the input.
			m, err := a.ResolveModel(ctx, in.Path)
			if err != nil {
				var e *apperr.Error
				if errors.As(err, &e) {
					return nil, &apperr.Error{Code: e.Code, Msg: field + ": " + e.Msg}
				}
				return nil, err
			}
			if !cloned {
				out, cloned = maps.Clone(uploaded), true
				if out == nil {
					out = map[string]string{}
				}
			}
			out[name] = m.Snapshot
			continue
		}
		dname, version, err := spec.ParseDataRef(in.Path)
		if err != nil {
			return nil, apperr.Invalid("%s: %v", field, err)
		}
		d, err := a.GetData(ctx, dname, version)
		if err != nil {
			var e *apperr.Error
			if errors.As(err, &e) && e.Code == apperr.CodeNotFound {
				return nil, apperr.NotFound("%s: %s", field, e.Msg)
			}
			return nil, err
		}
		if !spec.DataTypeFits(in.Type, d.Type) {
			return nil, apperr.Invalid("inputs.%s.type: %s is %s, but the input's type is %s; write type: %s", name, d.ID, d.Type, in.Type, d.Type)
		}
		if in.Type == "" {
			in.Type = d.Type
		}
		j.Inputs[name] = in
		if d.Snapshot == "" {
			continue // a reference: ResolveRemoteInputs resolves its path
		}
		if !cloned {
			out, cloned = maps.Clone(uploaded), true // the caller's map is not written
			if out == nil {
				out = map[string]string{}
			}
		}
		out[name] = d.Snapshot
	}
	return out, nil
}
