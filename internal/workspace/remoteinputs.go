package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/spec"
)

// RemoteInput is where the runner gets a job's input that the workspace
// does not hold: an http(s) file, a blob container's file or folder, or a
// folder every node reads. The workspace resolves it when the job is
// submitted (datastores and data assets included), so the job gets what
// they named then, and the runner needs nothing but this to fetch it.
type RemoteInput struct {
	// From is what the job or its data asset names, as written.
	From string `json:"from"`
	// URL is an http(s) file.
	URL string `json:"url,omitempty"`
	// Blob is a file or folder of an Azure blob container, read
	// anonymously.
	Blob *BlobSource `json:"blob,omitempty"`
	// Folder is a file or folder at this absolute path on every node (a
	// local_folder datastore).
	Folder string `json:"folder,omitempty"`
}

// BlobSource is a path in a blob container of the blob service at Base.
type BlobSource struct {
	Base      string `json:"base"`
	Container string `json:"container"`
	Path      string `json:"path,omitempty"`
}

// URLOf is the https URL of the blob path (a folder's is its prefix).
func (b *BlobSource) URLOf() string {
	u := b.Base + "/" + b.Container
	if b.Path != "" {
		u += "/" + spec.EscapeURLPath(b.Path)
	}
	return u
}

// Where is what a job with mode direct gets as the input's value, and
// what the log and messages name.
func (r RemoteInput) Where() string {
	switch {
	case r.URL != "":
		return r.URL
	case r.Blob != nil:
		return r.Blob.URLOf()
	}
	return r.Folder
}

// resolveRemoteInputs resolves each of a job's inputs whose path is a URL,
// a blob container's path, a datastore path or a registered data asset
// kept as a reference, naming the field of any that cannot be.
func (s *Service) resolveRemoteInputs(ctx context.Context, j *spec.Job) (map[string]RemoteInput, error) {
	var out map[string]RemoteInput
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[name]
		if in.IsLiteral() {
			continue
		}
		field := "inputs." + name + ".path"
		p := in.Path
		if spec.IsDataRef(p) {
			if spec.IsModelType(in.Type) {
				continue // a registered model: resolveDataInputs gives its snapshot
			}
			dname, version, err := spec.ParseDataRef(p)
			if err != nil {
				return nil, Invalid("%s: %v", field, err)
			}
			d, err := s.GetData(ctx, dname, version)
			if err != nil || d.Path == "" {
				continue // resolveDataInputs says what is wrong, or gives its snapshot
			}
			p = d.Path
		}
		if !spec.IsRemotePath(p) {
			continue
		}
		r, err := s.resolveRemote(ctx, p)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Msg = field + ": " + e.Msg
				return nil, e
			}
			return nil, Invalid("%s: %v", field, err)
		}
		if out == nil {
			out = map[string]RemoteInput{}
		}
		r.From = in.Path
		out[name] = r
	}
	return out, nil
}

// resolveRemote resolves one remote path (not an asset reference).
func (s *Service) resolveRemote(ctx context.Context, p string) (RemoteInput, error) {
	u, err := spec.ParseDataURI(p)
	if err != nil {
		return RemoteInput{}, err
	}
	switch u.Kind {
	case spec.URIHTTP:
		return RemoteInput{URL: u.URL}, nil
	case spec.URIBlob:
		return RemoteInput{Blob: &BlobSource{Base: spec.BlobBase(u.Account, u.Host, s.cfg.BlobEndpoints), Container: u.Container, Path: u.Path}}, nil
	case spec.URIDatastore:
		ds, err := s.GetDatastore(ctx, u.Store)
		if err != nil {
			return RemoteInput{}, err
		}
		return s.inDatastore(ds, u.Path)
	}
	return RemoteInput{}, fmt.Errorf("%q is not a remote path", p)
}

// inDatastore is where the path p of datastore ds is.
func (s *Service) inDatastore(ds *Datastore, p string) (RemoteInput, error) {
	f := ds.Spec
	switch ds.Type {
	case "local_folder":
		return RemoteInput{Folder: path.Join(f.Path, p)}, nil
	case "http":
		u := strings.TrimRight(f.URL, "/")
		if p != "" {
			u += "/" + spec.EscapeURLPath(p)
		}
		return RemoteInput{URL: u}, nil
	case "azure_blob", "azure_data_lake_gen2":
		container := f.ContainerName
		if ds.Type == "azure_data_lake_gen2" {
			container = f.Filesystem
		}
		host := f.AccountName + ".blob." + f.Endpoint
		return RemoteInput{Blob: &BlobSource{Base: spec.BlobBase(f.AccountName, host, s.cfg.BlobEndpoints), Container: container, Path: p}}, nil
	case "azure_file":
		return RemoteInput{}, Invalid("datastore %s is an azure_file share, which has no anonymous reads: mount the share on every node and create a local_folder datastore for the mount", ds.Name)
	case "azure_data_lake_gen1", "one_lake":
		return RemoteInput{}, Invalid("datastore %s is %s storage, which Ferry cannot read (no anonymous reads): copy the data to a blob container that allows public reads or to a folder every node mounts (a local_folder datastore)", ds.Name, ds.Type)
	}
	return RemoteInput{}, Invalid("datastore %s has type %s, which inputs cannot read", ds.Name, ds.Type)
}

// storedInputs is the jobs.inputs column: a JSON object whose values are
// snapshot ids (strings, as every job stored before remote inputs) or
// remote inputs (objects).
func storedInputs(snaps map[string]string, remote map[string]RemoteInput) (json.RawMessage, error) {
	if len(remote) == 0 {
		return json.Marshal(snaps)
	}
	all := map[string]any{}
	for k, v := range snaps {
		all[k] = v
	}
	for k, v := range remote {
		all[k] = v
	}
	return json.Marshal(all)
}

// readStoredInputs reads the jobs.inputs column into v.
func readStoredInputs(raw json.RawMessage, v *Job) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		return err
	}
	for k, r := range all {
		if len(r) > 0 && r[0] == '{' {
			var ri RemoteInput
			if err := json.Unmarshal(r, &ri); err != nil {
				return fmt.Errorf("input %s: %w", k, err)
			}
			if v.RemoteInputs == nil {
				v.RemoteInputs = map[string]RemoteInput{}
			}
			v.RemoteInputs[k] = ri
			continue
		}
		var id string
		if err := json.Unmarshal(r, &id); err != nil {
			return fmt.Errorf("input %s: %w", k, err)
		}
		if v.InputSnapshots == nil {
			v.InputSnapshots = map[string]string{}
		}
		v.InputSnapshots[k] = id
	}
	return nil
}
