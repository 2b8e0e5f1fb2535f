package assets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
)

// ResolveRemoteInputs resolves each of a job's inputs whose path is a URL,
// a blob container's path, a datastore path or a registered data asset
// kept as a reference, naming the field of any that cannot be.
func (a *Assets) ResolveRemoteInputs(ctx context.Context, j *spec.Job) (map[string]apitypes.RemoteInput, error) {
	var out map[string]apitypes.RemoteInput
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[name]
		if in.IsLiteral() {
			continue
		}
		field := "inputs." + name + ".path"
		p := in.Path
		if spec.IsDataRef(p) {
			if spec.IsModelType(in.Type) {
				continue // a registered model: ResolveDataInputs gives its snapshot
			}
			dname, version, err := spec.ParseDataRef(p)
			if err != nil {
				return nil, apperr.Invalid("%s: %v", field, err)
			}
			d, err := a.GetData(ctx, dname, version)
			if err != nil || d.Path == "" {
				continue // ResolveDataInputs says what is wrong, or gives its snapshot
			}
			p = d.Path
		}
		if !spec.IsRemotePath(p) {
			continue
		}
		r, err := a.resolveRemote(ctx, p)
		if err != nil {
			var e *apperr.Error
			if errors.As(err, &e) {
				e.Msg = field + ": " + e.Msg
				return nil, e
			}
			return nil, apperr.Invalid("%s: %v", field, err)
		}
		if out == nil {
			out = map[string]apitypes.RemoteInput{}
		}
		r.From = in.Path
		out[name] = r
	}
	return out, nil
}

// resolveRemote resolves one remote path (not an asset reference).
func (a *Assets) resolveRemote(ctx context.Context, p string) (apitypes.RemoteInput, error) {
	u, err := spec.ParseDataURI(p)
	if err != nil {
		return apitypes.RemoteInput{}, err
	}
	switch u.Kind {
	case spec.URIHTTP:
		return apitypes.RemoteInput{URL: u.URL}, nil
	case spec.URIBlob:
		return apitypes.RemoteInput{Blob: &apitypes.BlobSource{Base: spec.BlobBase(u.Account, u.Host, a.blobEndpoints), Container: u.Container, Path: u.Path}}, nil
	case spec.URIDatastore:
		ds, err := a.GetDatastore(ctx, u.Store)
		if err != nil {
			return apitypes.RemoteInput{}, err
		}
		return a.inDatastore(ds, u.Path)
	}
	return apitypes.RemoteInput{}, fmt.Errorf("%q is not a remote path", p)
}

// inDatastore is where the path p of datastore ds is.
func (a *Assets) inDatastore(ds *apitypes.Datastore, p string) (apitypes.RemoteInput, error) {
	f := ds.Spec
	switch ds.Type {
	case "local_folder":
		return apitypes.RemoteInput{Folder: path.Join(f.Path, p)}, nil
	case "http":
		u := strings.TrimRight(f.URL, "/")
		if p != "" {
			u += "/" + spec.EscapeURLPath(p)
		}
		return apitypes.RemoteInput{URL: u}, nil
	case "azure_blob", "azure_data_lake_gen2":
		container := f.ContainerName
		if ds.Type == "azure_data_lake_gen2" {
			container = f.Filesystem
		}
		host := f.AccountName + ".blob." + f.Endpoint
		return apitypes.RemoteInput{Blob: &apitypes.BlobSource{Base: spec.BlobBase(f.AccountName, host, a.blobEndpoints), Container: container, Path: p}}, nil
	case "azure_file":
		return apitypes.RemoteInput{}, apperr.Invalid("datastore %s is an azure_file share, which has no anonymous reads: mount the share on every node and create a local_folder datastore for the mount", ds.Name)
	case "azure_data_lake_gen1", "one_lake":
		return apitypes.RemoteInput{}, apperr.Invalid("datastore %s is %s storage, which Ferry cannot read (no anonymous reads): copy the data to a blob container that allows public reads or to a folder every node mounts (a local_folder datastore)", ds.Name, ds.Type)
	}
	return apitypes.RemoteInput{}, apperr.Invalid("datastore %s has type %s, which inputs cannot read", ds.Name, ds.Type)
}
