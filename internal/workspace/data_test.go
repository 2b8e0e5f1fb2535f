package workspace

import (
	"context"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
)

func dataFile(name, version, typ string) *spec.DataFile {
	return &spec.DataFile{Name: name, Version: version, Type: typ, Path: "./data", Tags: map[string]string{"stage": "dev"}}
}

func mustCreateData(t *testing.T, s *Service, f *spec.DataFile, snap string) *apitypes.DataAsset {
	t.Helper()
	d, err := s.assets.CreateData(context.Background(), owner, f, snap)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDataVersionsAndLatest(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, snapA := putFile(t, s, "rows A")
	_, snapB := putFile(t, s, "rows B")

	v1 := mustCreateData(t, s, dataFile("cifar", "", ""), snapA)
	if v1.Version != "1" || v1.Type != "uri_folder" || v1.ID != "azureml:cifar:1" || v1.Snapshot != snapA || v1.Tags["stage"] != "dev" {
		t.Fatalf("first version: %+v", v1)
	}
	// Unchanged files are the same version, whatever the tags say.
	f := dataFile("cifar", "", "")
	f.Tags = nil
	if again := mustCreateData(t, s, f, snapA); again.Version != "1" {
		t.Errorf("unchanged data got version %s, want 1", again.Version)
	}
	_, err := s.assets.CreateData(ctx, owner, dataFile("cifar", "1", ""), snapB)
	wantCode(t, "cifar:1 with other files", err, apperr.CodeConflict, "cifar:1", "other content", "leave version out to get 2")
	_, err = s.assets.CreateData(ctx, owner, dataFile("cifar", "1", "uri_file"), snapA)
	wantCode(t, "cifar:1 with another type", err, apperr.CodeConflict)
	if v2 := mustCreateData(t, s, dataFile("cifar", "", ""), snapB); v2.Version != "2" {
		t.Errorf("changed files: version %s, want 2", v2.Version)
	}

	// An archived version is not the latest nor listed, but is still
	// there by its version.
	if _, err := s.assets.ArchiveData(ctx, owner, "cifar", "2", true); err != nil {
		t.Fatal(err)
	}
	if d, err := s.assets.GetData(ctx, "cifar", "latest"); err != nil || d.Version != "1" {
		t.Errorf("latest after archiving 2: %+v, %v; want 1", d, err)
	}
	if ds, err := s.assets.ListData(ctx, "", false); err != nil || len(ds) != 1 {
		t.Errorf("ListData without archived: %v, %v; want cifar:1 only", ds, err)
	}
	if d, err := s.assets.GetData(ctx, "cifar", "2"); err != nil || !d.Archived {
		t.Errorf("archived cifar:2 by its version: %+v, %v", d, err)
	}
	// A number once given is not given again.
	if v3 := mustCreateData(t, s, dataFile("cifar", "", ""), snapB); v3.Version != "3" {
		t.Errorf("after archiving 2: version %s, want 3", v3.Version)
	}
	_, err = s.assets.GetData(ctx, "cifra", "1")
	wantCode(t, "a misspelt name", err, apperr.CodeNotFound, "did you mean cifar?")
	_, err = s.assets.ArchiveData(ctx, owner, "cifar", "latest", true)
	wantCode(t, "archive latest", err, apperr.CodeInvalid, "version")
}

func TestDataCreateRefuses(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, snap := putFile(t, s, "rows")
	_, err := s.assets.CreateData(ctx, runPrincipal("j", 1), dataFile("cifar", "", ""), snap)
	wantCode(t, "run token", err, apperr.CodeForbidden)
	_, err = s.assets.CreateData(ctx, owner, dataFile("cifar", "", ""), "")
	wantCode(t, "no snapshot", err, apperr.CodeInvalid, "snapshot")
	_, err = s.assets.CreateData(ctx, owner, dataFile("cifar", "", "table"), snap)
	wantCode(t, "type table", err, apperr.CodeInvalid, "type", "not a data type")
	_, err = s.assets.CreateData(ctx, owner, dataFile("bad name", "", ""), snap)
	wantCode(t, "bad name", err, apperr.CodeInvalid, "name")
}

// A job input that names a registered data asset gets the asset's
// snapshot from the workspace; the client uploads nothing for it.
func TestSubmitJobResolvesDataInputs(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 4})
	_, snapA := putFile(t, s, "rows A")
	_, snapB := putFile(t, s, "rows B")
	mustCreateData(t, s, dataFile("cifar", "", ""), snapA)
	mustCreateData(t, s, dataFile("cifar", "", ""), snapB)
	mustCreateData(t, s, dataFile("labels", "", "uri_file"), snapA)

	job := func(name string, inputs map[string]spec.Input) *spec.Job {
		return &spec.Job{Name: name, Command: "true", Inputs: inputs}
	}
	for _, c := range []struct {
		job, path, typ, want, wantType string
	}{
		{"latest", "azureml:cifar@latest", "uri_folder", snapB, "uri_folder"},
		{"pinned", "azureml:cifar:1", "uri_folder", snapA, "uri_folder"},
		{"typeless", "azureml:labels:1", "", snapA, "uri_file"},
	} {
		j, err := s.SubmitJob(ctx, owner, Submission{Spec: job(c.job, map[string]spec.Input{"d": {Type: c.typ, Path: c.path}})})
		if err != nil {
			t.Fatalf("%s: %v", c.job, err)
		}
		got, err := s.GetJob(ctx, j.Name, false)
		if err != nil {
			t.Fatal(err)
		}
		if got.InputSnapshots["d"] != c.want || got.Spec.Inputs["d"].Type != c.wantType || got.Spec.Inputs["d"].Path != c.path {
			t.Errorf("%s: input snapshot %s, input %+v; want %s, type %s, path kept", c.job, got.InputSnapshots["d"], got.Spec.Inputs["d"], c.want, c.wantType)
		}
	}

	_, err := s.SubmitJob(ctx, owner, Submission{Spec: job("mismatch", map[string]spec.Input{"d": {Type: "uri_file", Path: "azureml:cifar:1"}})})
	wantCode(t, "a type mismatch", err, apperr.CodeInvalid, "inputs.d.type", "uri_folder", "uri_file")
	_, err = s.SubmitJob(ctx, owner, Submission{Spec: job("unknown", map[string]spec.Input{"d": {Type: "uri_folder", Path: "azureml:cifra@latest"}})})
	wantCode(t, "an unknown asset", err, apperr.CodeNotFound, "inputs.d.path", "did you mean cifar?")
	_, err = s.SubmitJob(ctx, owner, Submission{Spec: job("noversion", map[string]spec.Input{"d": {Type: "uri_folder", Path: "azureml:cifar:9"}})})
	wantCode(t, "an unknown version", err, apperr.CodeNotFound, "inputs.d.path", "no version 9")
	_, err = s.SubmitJob(ctx, owner, Submission{Spec: job("uploaded", map[string]spec.Input{"d": {Type: "uri_folder", Path: "azureml:cifar:1"}}),
		InputSnapshots: map[string]string{"d": snapB}})
	wantCode(t, "an upload for a registered input", err, apperr.CodeInvalid, "input_snapshots.d", "upload nothing")
	_, err = s.SubmitJob(ctx, owner, Submission{Spec: job("badref", map[string]spec.Input{"d": {Type: "uri_folder", Path: "azureml:cifar"}})})
	wantCode(t, "a reference without a version", err, apperr.CodeInvalid, "inputs.d.path", "say which version")
}
