package envcatalog

import (
	"errors"
	"strings"
	"testing"
)

func TestBuiltinNamesAzureExamplesUse(t *testing.T) {
	c := Builtin()
	for _, name := range []string{"AzureML-sklearn-1.0-ubuntu20.04-py38-cpu", "sklearn-1.5", "AZUREML-SKLEARN-1.5",
		"AzureML-pytorch-1.10-ubuntu18.04-py38-cuda11-gpu", "acpt-pytorch-2.2-cuda12.1"} {
		e, ok := c.Lookup(name)
		if !ok {
			t.Errorf("%s is not in the built-in catalog", name)
			continue
		}
		if !strings.HasPrefix(e.Repository, mcr) || !strings.HasPrefix(e.Name, "AzureML-") {
			t.Errorf("%s: %+v", name, e)
		}
	}
	for _, e := range c.List() {
		if errs := validate(0, e); len(errs) > 0 {
			t.Errorf("built-in entry %s: %v", e.Name, errs)
		}
	}
}

func TestExtendReplacesAndValidates(t *testing.T) {
	site := []Entry{{Name: "sklearn-1.5", Versions: []Version{{Version: "1", Image: "ferry-base:bookworm"}}}}
	c, err := Builtin().Extend(site)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Resolve("AzureML-sklearn-1.5", "latest")
	if err != nil || r.Image != "ferry-base:bookworm" || r.Version != "1" {
		t.Errorf("the site entry did not replace the built-in one: %+v, %v", r, err)
	}
	if r, _ := Builtin().Resolve("AzureML-sklearn-1.5", ""); r.Image != mcr+"sklearn-1.5:latest" {
		t.Errorf("Extend changed the catalog it extended: %+v", r)
	}

	_, err = Builtin().Extend([]Entry{
		{Name: ""},
		{Name: "has space"},
		{Name: "neither"},
		{Name: "both", Repository: "r/x", Versions: []Version{{Version: "1", Image: "x:1"}}},
		{Name: "tagged", Repository: "registry:5000/x:1"},
		{Name: "bad-versions", Versions: []Version{{Version: "latest", Image: "x"}, {Version: "1", Image: "Bad Image"}, {Version: "1", Image: "x"}}},
		{Name: "Neither"},
	})
	if err == nil {
		t.Fatal("invalid entries were taken")
	}
	for _, want := range []string{
		"environments[0].name: required",
		`environments[1].name: "has space" is not a valid name`,
		"environments[2] (neither): give versions",
		"environments[3] (both): give versions or repository, not both",
		"environments[4] (tagged): repository",
		"versions[0].version: latest is the last version listed",
		`versions[1].image: "Bad Image" is not an image reference`,
		"versions[2].version: 1 is listed twice",
		`environments[6].name: "Neither" is already defined by environments[2]`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
}

func TestNamingRuleForUnlistedCuratedNames(t *testing.T) {
	c, err := Builtin().Extend([]Entry{{Name: "lab", Versions: []Version{{Version: "1", Image: "x:1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Resolve("AzureML-Designer-Score", "3")
	if err != nil || r.Image != mcr+"designer-score:3" || r.Name != "AzureML-Designer-Score" {
		t.Errorf("an unlisted AzureML- name: %+v, %v", r, err)
	}
	for _, name := range []string{"sklearn-9", "AzureML-", "AzureML-bad name"} {
		if _, err := c.Resolve(name, "1"); !errors.Is(err, ErrUnknown) {
			t.Errorf("Resolve(%q) = %v, want ErrUnknown", name, err)
		}
	}
	if _, ok := (&Catalog{}).Lookup("AzureML-sklearn-1.5"); ok {
		t.Error("a catalog without the naming rule found an unlisted name")
	}
}
