package workspace

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
)

func modelFile(name, version string) *spec.ModelFile {
	return &spec.ModelFile{Name: name, Version: version, Path: "./model", Description: "iris",
		Tags: map[string]string{"stage": "dev"}, Properties: map[string]string{"acc": "0.9"}}
}

func mustCreateModel(t *testing.T, s *Service, f *spec.ModelFile, snap string) *apitypes.Model {
	t.Helper()
	m, err := s.assets.CreateModel(context.Background(), owner, f, snap)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestModelVersionsAreImmutable(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, snapA := putFile(t, s, "weights A")
	_, snapB := putFile(t, s, "weights B")

	v1 := mustCreateModel(t, s, modelFile("iris", ""), snapA)
	if v1.Version != "1" || v1.Type != "custom_model" || v1.ID != "azureml:iris:1" || v1.Snapshot != snapA || v1.Tags["stage"] != "dev" {
		t.Fatalf("first version: %+v", v1)
	}
	// Unchanged content with no version is the same version; a new
	// description or tags alone are not new content.
	f := modelFile("iris", "")
	f.Description, f.Tags = "changed", nil
	if again := mustCreateModel(t, s, f, snapA); again.Version != "1" {
		t.Errorf("unchanged model got version %s, want 1", again.Version)
	}
	if again := mustCreateModel(t, s, modelFile("iris", "1"), snapA); again.Version != "1" {
		t.Errorf("iris:1 again with its content: version %s", again.Version)
	}
	// Other files under an existing version are refused, and say what to do.
	_, err := s.assets.CreateModel(ctx, owner, modelFile("iris", "1"), snapB)
	wantCode(t, "iris:1 with other files", err, apperr.CodeConflict, "iris:1", "other content", "leave version out to get 2")
	// So are other properties or another type.
	f = modelFile("iris", "1")
	f.Properties = map[string]string{"acc": "0.5"}
	_, err = s.assets.CreateModel(ctx, owner, f, snapA)
	wantCode(t, "iris:1 with other properties", err, apperr.CodeConflict)
	f = modelFile("iris", "1")
	f.Type = "mlflow_model"
	_, err = s.assets.CreateModel(ctx, owner, f, snapA)
	wantCode(t, "iris:1 with another type", err, apperr.CodeConflict)

	// Other files with no version get the next number.
	if v2 := mustCreateModel(t, s, modelFile("iris", ""), snapB); v2.Version != "2" {
		t.Errorf("changed files: version %s, want 2", v2.Version)
	}
	if v := mustCreateModel(t, s, modelFile("iris", "release-a"), snapA); v.Version != "release-a" {
		t.Errorf("named version: %s", v.Version)
	}
	if v := mustCreateModel(t, s, modelFile("iris", ""), snapB); v.Version != "3" {
		t.Errorf("after a named version: %s, want 3 (names are not numbers)", v.Version)
	}
}

func TestModelCreateRefuses(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	digest, snap := putFile(t, s, "weights")
	_, err := s.assets.CreateModel(ctx, runPrincipal("j", 1), modelFile("iris", ""), snap)
	wantCode(t, "run token", err, apperr.CodeForbidden)
	_, err = s.assets.CreateModel(ctx, owner, modelFile("iris", ""), "")
	wantCode(t, "no snapshot", err, apperr.CodeInvalid, "snapshot")
	_, err = s.assets.CreateModel(ctx, owner, modelFile("iris", ""), strings.Repeat("a", 64))
	wantCode(t, "snapshot not uploaded", err, apperr.CodeInvalid, "snapshot", "not uploaded")
	// A file's digest is not a snapshot.
	_, err = s.assets.CreateModel(ctx, owner, modelFile("iris", ""), digest)
	wantCode(t, "a blob that is not a manifest", err, apperr.CodeInvalid, "snapshot")
	f := modelFile("bad name", "")
	_, err = s.assets.CreateModel(ctx, owner, f, snap)
	wantCode(t, "bad name", err, apperr.CodeInvalid, "name")
	if ms, _ := s.assets.ListModels(ctx, "", true); len(ms) != 0 {
		t.Errorf("refused creates stored %v", ms)
	}
}

func TestModelArchiveHidesFromListAndLatest(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, snapA := putFile(t, s, "weights A")
	_, snapB := putFile(t, s, "weights B")
	mustCreateModel(t, s, modelFile("iris", ""), snapA)
	mustCreateModel(t, s, modelFile("iris", ""), snapB)

	latest := func() string {
		t.Helper()
		m, err := s.assets.GetModel(ctx, "iris", "latest")
		if err != nil {
			t.Fatal(err)
		}
		return m.Version
	}
	listed := func(all bool) []string {
		t.Helper()
		ms, err := s.assets.ListModels(ctx, "iris", all)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.Version)
		}
		return out
	}
	if v := latest(); v != "2" {
		t.Fatalf("latest = %s, want 2", v)
	}
	_, err := s.assets.ArchiveModel(ctx, runPrincipal("j", 1), "iris", "2", true)
	wantCode(t, "run token archives", err, apperr.CodeForbidden)
	if m, err := s.assets.ArchiveModel(ctx, owner, "iris", "2", true); err != nil || !m.Archived {
		t.Fatalf("archive iris:2: %+v, %v", m, err)
	}
	if v := latest(); v != "1" {
		t.Errorf("latest after archiving 2 = %s, want 1", v)
	}
	if d := cmp.Diff([]string{"1"}, listed(false)); d != "" {
		t.Errorf("list (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"1", "2"}, listed(true)); d != "" {
		t.Errorf("list --include-archived (-want +got):\n%s", d)
	}
	// By its version an archived model is still there.
	if m, err := s.assets.GetModel(ctx, "iris", "2"); err != nil || !m.Archived {
		t.Errorf("GetModel(iris, 2) = %+v, %v; want it, archived", m, err)
	}
	// Unchanged content with no version does not bring back an archived
	// version's number nor reuse it: it is a new version.
	if v := mustCreateModel(t, s, modelFile("iris", ""), snapB); v.Version != "3" {
		t.Errorf("re-creating archived content: version %s, want 3", v.Version)
	}
	if _, err := s.assets.ArchiveModel(ctx, owner, "iris", "3", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.assets.ArchiveModel(ctx, owner, "iris", "1", true); err != nil {
		t.Fatal(err)
	}
	_, err = s.assets.GetModel(ctx, "iris", "latest")
	wantCode(t, "latest of all archived", err, apperr.CodeNotFound, "all of its versions are archived", "ferry model restore")
	if _, err := s.assets.ArchiveModel(ctx, owner, "iris", "2", false); err != nil {
		t.Fatal(err)
	}
	if v := latest(); v != "2" {
		t.Errorf("latest after restoring 2 = %s, want 2", v)
	}
	_, err = s.assets.ArchiveModel(ctx, owner, "iris", "9", true)
	wantCode(t, "archive a missing version", err, apperr.CodeNotFound, "no version 9", "1, 2, 3")
	_, err = s.assets.ArchiveModel(ctx, owner, "iris", "latest", true)
	wantCode(t, "archive latest", err, apperr.CodeInvalid, "--version")
}

func TestResolveModel(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, snapA := putFile(t, s, "weights A")
	_, snapB := putFile(t, s, "weights B")
	mustCreateModel(t, s, modelFile("iris", ""), snapA)
	mustCreateModel(t, s, modelFile("iris", ""), snapB)
	for ref, want := range map[string]string{
		"azureml:iris:1":      snapA,
		"azureml:iris:2":      snapB,
		"azureml:iris@latest": snapB,
		"iris@latest":         snapB,
	} {
		m, err := s.assets.ResolveModel(ctx, ref)
		if err != nil || m.Snapshot != want {
			t.Errorf("ResolveModel(%s) = %+v, %v; want snapshot %s", ref, m, err, want)
		}
	}
	_, err := s.assets.ResolveModel(ctx, "iris")
	wantCode(t, "no version", err, apperr.CodeInvalid, "iris@latest")
	_, err = s.assets.ResolveModel(ctx, "azureml:iris:7")
	wantCode(t, "missing version", err, apperr.CodeNotFound, "no version 7", "1, 2")
	_, err = s.assets.ResolveModel(ctx, "azureml:iriss:1")
	wantCode(t, "typo", err, apperr.CodeNotFound, "did you mean iris?")
}

// Creates of one model at once all succeed: the same content is one
// version whoever stored it first.
func TestModelConcurrentCreatesAgree(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, &fakeTarget{capacity: 1})
	_, snap := putFile(t, s, "weights")
	const n = 8
	versions := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			m, err := s.assets.CreateModel(ctx, owner, modelFile("iris", "1"), snap)
			if err != nil {
				errs <- err
				return
			}
			versions <- m.Version
		}()
	}
	for range n {
		select {
		case err := <-errs:
			t.Errorf("a concurrent create failed: %v", err)
		case v := <-versions:
			if v != "1" {
				t.Errorf("a concurrent create gave version %s", v)
			}
		}
	}
	if ms, err := s.assets.ListModels(ctx, "iris", true); err != nil || len(ms) != 1 {
		t.Errorf("after %d concurrent creates: %v, %v; want one version", n, ms, err)
	}
}
