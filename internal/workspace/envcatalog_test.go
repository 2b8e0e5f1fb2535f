package workspace

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/envcatalog"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// TestCatalogReferencesResolve covers every form Azure's files write a
// built-in environment in, against the built-in catalog and a site's.
func TestCatalogReferencesResolve(t *testing.T) {
	s, _ := newService(t, &fakeTarget{})
	site, err := envcatalog.Builtin().Extend([]envcatalog.Entry{{
		Name: "AzureML-lab-1.0",
		Versions: []envcatalog.Version{
			{Version: "1", Image: "registry.lab/lab:1"},
			{Version: "2", Image: "registry.lab/lab:2"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.cfg
	cfg.Environments = site
	s.assets = newAssets(cfg, s)
	ctx := context.Background()
	img := func(name, version, image string) *environment.Spec {
		return &environment.Spec{Kind: environment.KindImage, Image: image, Name: name, Version: version}
	}
	const sk10 = "AzureML-sklearn-1.0-ubuntu20.04-py38-cpu"
	for ref, want := range map[string]*environment.Spec{
		"azureml:" + sk10 + "@latest":                                         img(sk10, "latest", "mcr.microsoft.com/azureml/curated/sklearn-1.0-ubuntu20.04-py38-cpu:latest"),
		"azureml:" + sk10 + ":1":                                              img(sk10, "1", "mcr.microsoft.com/azureml/curated/sklearn-1.0-ubuntu20.04-py38-cpu:1"),
		"azureml:azureml-SKLEARN-1.5@latest":                                  img("AzureML-sklearn-1.5", "latest", "mcr.microsoft.com/azureml/curated/sklearn-1.5:latest"),
		"azureml://registries/azureml/environments/sklearn-1.5/labels/latest": img("AzureML-sklearn-1.5", "latest", "mcr.microsoft.com/azureml/curated/sklearn-1.5:latest"),
		"azureml://registries/azureml/environments/sklearn-1.5/versions/12":   img("AzureML-sklearn-1.5", "12", "mcr.microsoft.com/azureml/curated/sklearn-1.5:12"),
		"azureml:AzureML-lab-1.0@latest":                                      img("AzureML-lab-1.0", "2", "registry.lab/lab:2"),
		"azureml://registries/azureml/environments/lab-1.0/versions/1":        img("AzureML-lab-1.0", "1", "registry.lab/lab:1"),
		// Names the catalog does not list follow Microsoft's naming rule.
		"azureml:AzureML-Minimal:1": img("AzureML-Minimal", "1", "mcr.microsoft.com/azureml/curated/minimal:1"),
		"azureml://registries/azureml/environments/tensorflow-2.16-cuda12/labels/latest": img("AzureML-tensorflow-2.16-cuda12", "latest", "mcr.microsoft.com/azureml/curated/tensorflow-2.16-cuda12:latest"),
	} {
		got, err := s.assets.ResolveEnvironment(ctx, &spec.Environment{Ref: ref}, "")
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", ref, diff)
		}
	}

	for ref, want := range map[string][]string{
		"azureml:AzureML-lab-1.0:3":  {"AzureML-lab-1.0 has no version 3", "the catalog has 1, 2"},
		"azureml:" + sk10 + ":beta":  {"has no version beta", "whole numbers"},
		"azureml:no-such-env@latest": {"not registered", "nor is it in the catalog"},
		"file:./env.yml":             {"file on the client's machine"},
	} {
		_, err := s.assets.ResolveEnvironment(ctx, &spec.Environment{Ref: ref}, "")
		if apperr.CodeOf(err) != apperr.CodeInvalid {
			t.Errorf("%s: %v, want an invalid-request error", ref, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", ref, err, w)
			}
		}
	}
}

// TestRegisteredEnvironmentWinsOverCatalog: a site replaces a curated
// environment by registering one of the same name, in either of Azure's
// spellings of it.
func TestRegisteredEnvironmentWinsOverCatalog(t *testing.T) {
	s, _ := newService(t, &fakeTarget{})
	ctx := context.Background()
	f := &spec.EnvironmentFile{Name: "AzureML-sklearn-1.5", Image: "registry.lab/sklearn:1.5"}
	if _, err := s.assets.CreateEnvironment(ctx, owner, f, ""); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"azureml:AzureML-sklearn-1.5@latest", "azureml:AzureML-sklearn-1.5:1",
		"azureml://registries/azureml/environments/sklearn-1.5/labels/latest"} {
		got, err := s.assets.ResolveEnvironment(ctx, &spec.Environment{Ref: ref}, "")
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if got.Image != "registry.lab/sklearn:1.5" || got.Version != "1" {
			t.Errorf("%s resolved to %s, want the registered environment", ref, got.Describe())
		}
	}
	// The registered name's versions are its own: the catalog's do not
	// fill in for one it lacks.
	_, err := s.assets.ResolveEnvironment(ctx, &spec.Environment{Ref: "azureml:AzureML-sklearn-1.5:12"}, "")
	if err == nil || !strings.Contains(err.Error(), "has no version 12; it has 1") {
		t.Errorf("a version the registered environment lacks: %v", err)
	}
}
