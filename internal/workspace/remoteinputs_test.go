package workspace

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/assets"
	"github.com/ferry-ml/ferry/internal/spec"
)

func mustDatastore(t *testing.T, s *Service, yaml string) *apitypes.Datastore {
	t.Helper()
	f, err := spec.ParseDatastore([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.assets.CreateDatastore(context.Background(), owner, f)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Remote inputs are resolved when the job is submitted, kept beside its
// input snapshots, and handed to the runner with the assignment.
func TestRemoteInputsResolvedAtSubmit(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	cfg := s.cfg
	cfg.BlobEndpoints = map[string]string{"mirrored": "http://127.0.0.1:9/blob"}
	s.assets = newAssets(cfg, s)
	mustDatastore(t, s, "name: nfs\npath: /mnt/nfs/data\n")
	mustDatastore(t, s, "name: web\nurl: https://example.com/sets/\n")
	blob := mustDatastore(t, s, "name: blobs\ntype: azure_blob\naccount_name: mirrored\ncontainer_name: data\ncredentials: {sas_token: SECRET}\n")
	if !cmp.Equal(blob.CredentialsNotKept, []string{"sas_token"}) {
		t.Errorf("CredentialsNotKept = %v", blob.CredentialsNotKept)
	}
	if got, err := s.assets.GetDatastore(ctx, "blobs"); err != nil || got.Spec.Credentials != nil {
		t.Errorf("stored datastore %+v, %v: credentials kept", got, err)
	}
	mustDatastore(t, s, "name: gen2\ntype: azure_data_lake_gen2\naccount_name: lake01\nfilesystem: fs1\n")
	_, snap := putFile(t, s, "local rows")

	j := &spec.Job{Name: "remote", Command: "true", Inputs: map[string]spec.Input{
		"local": {Type: "uri_file", Path: "./rows.csv"},
		"url":   {Type: "uri_file", Path: "https://example.com/a/b.csv"},
		"wasbs": {Type: "uri_folder", Path: "wasbs://data@mirrored.blob.core.windows.net/mnist/"},
		"pub":   {Type: "uri_folder", Path: "https://azuremlexamples.blob.core.windows.net/datasets/iris"},
		"nfs":   {Type: "uri_folder", Path: "azureml://datastores/nfs/paths/sets/one"},
		"web":   {Type: "uri_file", Path: "azureml://datastores/web/paths/x y.csv"},
		"blob":  {Type: "uri_folder", Path: "azureml://datastores/blobs/paths/m"},
		"gen2":  {Type: "uri_folder", Path: "azureml://datastores/gen2/paths/"},
	}}
	if _, err := s.SubmitJob(ctx, owner, Submission{Spec: j, InputSnapshots: map[string]string{"local": snap}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetJob(ctx, "remote", false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]apitypes.RemoteInput{
		"url":   {From: "https://example.com/a/b.csv", URL: "https://example.com/a/b.csv"},
		"wasbs": {From: "wasbs://data@mirrored.blob.core.windows.net/mnist/", Blob: &apitypes.BlobSource{Base: "http://127.0.0.1:9/blob", Container: "data", Path: "mnist"}},
		"pub":   {From: "https://azuremlexamples.blob.core.windows.net/datasets/iris", Blob: &apitypes.BlobSource{Base: "https://azuremlexamples.blob.core.windows.net", Container: "datasets", Path: "iris"}},
		"nfs":   {From: "azureml://datastores/nfs/paths/sets/one", Folder: "/mnt/nfs/data/sets/one"},
		"web":   {From: "azureml://datastores/web/paths/x y.csv", URL: "https://example.com/sets/x%20y.csv"},
		"blob":  {From: "azureml://datastores/blobs/paths/m", Blob: &apitypes.BlobSource{Base: "http://127.0.0.1:9/blob", Container: "data", Path: "m"}},
		"gen2":  {From: "azureml://datastores/gen2/paths/", Blob: &apitypes.BlobSource{Base: "https://lake01.blob.core.windows.net", Container: "fs1"}},
	}
	if d := cmp.Diff(want, got.RemoteInputs); d != "" {
		t.Errorf("RemoteInputs (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"local": snap}, got.InputSnapshots); d != "" {
		t.Errorf("InputSnapshots (-want +got):\n%s", d)
	}
	if a := s.assignmentOf(got, 1); cmp.Diff(want, a.RemoteInputs) != "" {
		t.Errorf("the assignment's remote inputs: %+v", a.RemoteInputs)
	}
}

func TestRemoteInputsRefused(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	mustDatastore(t, s, "name: share\ntype: azure_file\naccount_name: files01\nfile_share_name: s\n")
	submit := func(path string) error {
		_, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Command: "true", Inputs: map[string]spec.Input{"d": {Type: "uri_folder", Path: path}}}})
		return err
	}
	wantCode(t, "unknown datastore", submit("azureml://datastores/nope/paths/x"), apperr.CodeNotFound, "inputs.d.path", "datastore nope is not known", "share")
	wantCode(t, "azure_file", submit("azureml://datastores/share/paths/x"), apperr.CodeInvalid, "inputs.d.path", "no anonymous reads", "local_folder")
	_, err := s.SubmitJob(ctx, owner, Submission{Spec: &spec.Job{Command: "true", Inputs: map[string]spec.Input{"d": {Type: "uri_file", Path: "https://example.com/x"}}},
		InputSnapshots: map[string]string{"d": "0000"}})
	wantCode(t, "an upload for a URL input", err, apperr.CodeInvalid, "input_snapshots.d", "upload nothing")
}

// workspaceblobstore is built in until one of that name is created.
func TestDefaultDatastore(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	cfg := s.cfg
	cfg.DefaultDatastoreDir = "/srv/ferry-work/datastores/workspaceblobstore"
	s.assets = newAssets(cfg, s)
	d, err := s.assets.GetDatastore(ctx, assets.DefaultDatastore)
	if err != nil || !d.BuiltIn || d.Spec.Path != cfg.DefaultDatastoreDir {
		t.Fatalf("built-in default: %+v, %v", d, err)
	}
	wantCode(t, "deleting the built-in", s.assets.DeleteDatastore(ctx, owner, assets.DefaultDatastore), apperr.CodeInvalid, "built-in")
	mustDatastore(t, s, "name: workspaceblobstore\nurl: https://example.com/ws\n")
	list, err := s.assets.ListDatastores(ctx)
	if err != nil || len(list) != 1 || list[0].BuiltIn || list[0].Type != "http" {
		t.Fatalf("list after creating workspaceblobstore: %+v, %v", list, err)
	}
	if err := s.assets.DeleteDatastore(ctx, owner, assets.DefaultDatastore); err != nil {
		t.Fatal(err)
	}
	if d, err := s.assets.GetDatastore(ctx, assets.DefaultDatastore); err != nil || !d.BuiltIn {
		t.Errorf("after deleting the created one: %+v, %v; want the built-in again", d, err)
	}
}

// A data asset whose path is remote is kept as a reference, and a job
// naming it fetches that path.
func TestRemoteDataAsset(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	f := &spec.DataFile{Name: "iris", Type: "uri_file", Path: "https://example.com/iris.csv"}
	d, err := s.assets.CreateData(ctx, owner, f, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Path != f.Path || d.Snapshot != "" {
		t.Fatalf("remote asset %+v", d)
	}
	if again, err := s.assets.CreateData(ctx, owner, f, ""); err != nil || again.Version != "1" {
		t.Errorf("the same reference again: %+v, %v; want version 1", again, err)
	}
	j := &spec.Job{Name: "uses-iris", Command: "true", Inputs: map[string]spec.Input{"d": {Path: "azureml:iris@latest"}}}
	if _, err := s.SubmitJob(ctx, owner, Submission{Spec: j}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetJob(ctx, "uses-iris", false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]apitypes.RemoteInput{"d": {From: "azureml:iris@latest", URL: "https://example.com/iris.csv"}}
	if d := cmp.Diff(want, got.RemoteInputs); d != "" || got.Spec.Inputs["d"].Type != "uri_file" {
		t.Errorf("RemoteInputs (-want +got):\n%s; type %q", d, got.Spec.Inputs["d"].Type)
	}
	_, err = s.assets.CreateData(ctx, owner, &spec.DataFile{Name: "bad", Type: "uri_folder", Path: "azureml://datastores/nope/paths/x"}, "")
	wantCode(t, "an asset in an unknown datastore", err, apperr.CodeNotFound, "path:", "datastore nope")
}
