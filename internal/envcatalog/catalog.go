package envcatalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Entry is one curated environment. The JSON and YAML names are those of
// the server's catalog file.
//
// Its versions come one of two ways: Versions lists them, each with its own
// image, the last being latest; or Repository is an image repository whose
// tags are the versions (version 12 is REPOSITORY:12, latest is
// REPOSITORY:latest), which is how Microsoft tags its curated images and so
// every version Azure ever published resolves without being listed.
type Entry struct {
	// Name is as Azure's workspace form writes it (AzureML-sklearn-1.5);
	// the registry form leaves out the AzureML- prefix (sklearn-1.5), and
	// either finds the entry.
	Name        string    `json:"name" yaml:"name"`
	Description string    `json:"description,omitempty" yaml:"description,omitempty"`
	Python      string    `json:"python,omitempty" yaml:"python,omitempty"`         // "3.8"
	Frameworks  []string  `json:"frameworks,omitempty" yaml:"frameworks,omitempty"` // "scikit-learn 1.0"
	Repository  string    `json:"repository,omitempty" yaml:"repository,omitempty"`
	Versions    []Version `json:"versions,omitempty" yaml:"versions,omitempty"`
}

// Version is one version of an entry and the image that runs it.
type Version struct {
	Version string `json:"version" yaml:"version"`
	Image   string `json:"image" yaml:"image"`
}

// Latest is the version that @latest and labels/latest mean: the last
// listed one, or "latest" for a repository entry.
func (e Entry) Latest() string {
	if n := len(e.Versions); n > 0 {
		return e.Versions[n-1].Version
	}
	return "latest"
}

// Resolved is a catalog reference turned into the image that runs it.
type Resolved struct {
	Name    string // the entry's name
	Version string // the version asked for, or the latest one
	Image   string
}

// ErrUnknown is wrapped by Resolve's error for a name the catalog lacks.
var ErrUnknown = errors.New("not in the environment catalog")

// Catalog is a set of curated environments looked up by name ignoring case
// and an AzureML- prefix. A Catalog is immutable once made, so it is safe
// for concurrent use.
type Catalog struct {
	byKey map[string]Entry
	// curated is the repository prefix that names the catalog does not
	// list resolve under when they are written as Azure writes its curated
	// environments (AzureML-NAME); "" resolves none that way.
	curated string
}

// key is how names are compared: Azure writes AzureML-sklearn-1.5 in a
// workspace reference and sklearn-1.5 in a registry one, for one
// environment.
func key(name string) string {
	k := strings.ToLower(strings.TrimSpace(name))
	return strings.TrimPrefix(k, "azureml-")
}

// Builtin returns the built-in catalog (see builtin).
func Builtin() *Catalog {
	c := &Catalog{byKey: make(map[string]Entry, len(builtin)), curated: mcr}
	for _, e := range builtin {
		c.byKey[key(e.Name)] = e
	}
	return c
}

// Lookup finds an entry by name, ignoring case and an AzureML- prefix.
// A name the catalog does not list but that is written as Azure writes its
// curated environments, AzureML-NAME, is found too in the built-in
// catalog: Microsoft publishes every curated environment's image as
// mcr.microsoft.com/azureml/curated/NAME (lower-cased) tagged by version,
// so the ones Azure adds after this list was written resolve as well.
func (c *Catalog) Lookup(name string) (Entry, bool) {
	k := key(name)
	if e, ok := c.byKey[k]; ok {
		return e, true
	}
	name = strings.TrimSpace(name)
	if c.curated == "" || !nameRe().MatchString(name) || !strings.HasPrefix(strings.ToLower(name), "azureml-") || k == "" {
		return Entry{}, false
	}
	return Entry{Name: name, Description: "a curated environment by Microsoft's naming rule", Repository: c.curated + k}, true
}

// List returns every entry, ordered by name ignoring case.
func (c *Catalog) List() []Entry {
	out := make([]Entry, 0, len(c.byKey))
	for _, e := range c.byKey {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(key(a.Name), key(b.Name)) })
	return out
}

// Resolve finds the image of name at version; version "" or "latest" is
// the entry's latest. An unknown name wraps ErrUnknown; an unknown version
// of a known name says which versions there are.
func (c *Catalog) Resolve(name, version string) (Resolved, error) {
	e, ok := c.Lookup(name)
	if !ok {
		return Resolved{}, fmt.Errorf("%s is %w", name, ErrUnknown)
	}
	if version == "" || version == "latest" {
		version = e.Latest()
	}
	if e.Repository != "" {
		if version != "latest" && !wholeRe().MatchString(version) {
			return Resolved{}, fmt.Errorf("curated environment %s has no version %s: its versions are whole numbers (the tags of %s), or use @latest", e.Name, version, e.Repository)
		}
		return Resolved{Name: e.Name, Version: version, Image: e.Repository + ":" + version}, nil
	}
	var have []string
	for _, v := range e.Versions {
		if v.Version == version {
			return Resolved{Name: e.Name, Version: version, Image: v.Image}, nil
		}
		have = append(have, v.Version)
	}
	return Resolved{}, fmt.Errorf("curated environment %s has no version %s; the catalog has %s (or use @latest)", e.Name, version, strings.Join(have, ", "))
}

var (
	wholeRe = lazyRegexp(`^[0-9]{1,9}$`)
	nameRe  = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$`)
	// imageRe is loose on purpose: the engine judges the reference; this
	// only keeps out what could never be one (spaces, a scheme, a tag on a
	// repository).
	imageRe = lazyRegexp(`^[a-z0-9][a-zA-Z0-9._/:@-]*$`)
)

// Extend returns a new catalog with the given entries added; one whose name
// matches an existing entry (ignoring case and an AzureML- prefix) replaces
// it whole. Every invalid entry is reported, each error naming the entry
// and the field as the file spells it; on error nil is returned. c itself
// is never modified.
func (c *Catalog) Extend(entries []Entry) (*Catalog, error) {
	var errs []error
	seen := make(map[string]int, len(entries))
	for i, e := range entries {
		errs = append(errs, validate(i, e)...)
		k := key(e.Name)
		if k == "" {
			continue
		}
		if j, dup := seen[k]; dup {
			errs = append(errs, fmt.Errorf("environments[%d].name: %q is already defined by environments[%d]", i, e.Name, j))
		}
		seen[k] = i
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := &Catalog{byKey: make(map[string]Entry, len(c.byKey)+len(entries)), curated: c.curated}
	for k, e := range c.byKey {
		out.byKey[k] = e
	}
	for _, e := range entries {
		e.Name = strings.TrimSpace(e.Name)
		out.byKey[key(e.Name)] = e
	}
	return out, nil
}

func validate(i int, e Entry) []error {
	at := fmt.Sprintf("environments[%d]", i)
	name := strings.TrimSpace(e.Name)
	if name == "" {
		return []error{fmt.Errorf("%s.name: required (an environment name such as AzureML-sklearn-1.5)", at)}
	}
	if !nameRe().MatchString(name) {
		return []error{fmt.Errorf("%s.name: %q is not a valid name: use letters, digits, '.', '-' and '_', starting with a letter or digit", at, name)}
	}
	at = fmt.Sprintf("environments[%d] (%s)", i, name)
	var errs []error
	switch {
	case e.Repository == "" && len(e.Versions) == 0:
		errs = append(errs, fmt.Errorf("%s: give versions (a list of {version, image}) or repository (an image repository tagged by version)", at))
	case e.Repository != "" && len(e.Versions) > 0:
		errs = append(errs, fmt.Errorf("%s: give versions or repository, not both", at))
	case e.Repository != "" && (!imageRe().MatchString(e.Repository) || strings.ContainsAny(lastPart(e.Repository), ":@")):
		errs = append(errs, fmt.Errorf("%s: repository %q must be an image repository without a tag, such as registry.example.com/curated/sklearn-1.5", at, e.Repository))
	}
	seen := map[string]bool{}
	for j, v := range e.Versions {
		vat := fmt.Sprintf("%s: versions[%d]", at, j)
		switch {
		case !nameRe().MatchString(v.Version):
			errs = append(errs, fmt.Errorf("%s.version: %q is not a version: use letters, digits, '.', '-' and '_', such as 1 or 2.0", vat, v.Version))
		case v.Version == "latest":
			errs = append(errs, fmt.Errorf("%s.version: latest is the last version listed, not a version of its own", vat))
		case seen[v.Version]:
			errs = append(errs, fmt.Errorf("%s.version: %s is listed twice", vat, v.Version))
		}
		seen[v.Version] = true
		if !imageRe().MatchString(v.Image) {
			errs = append(errs, fmt.Errorf("%s.image: %q is not an image reference, such as ferry-base:bookworm", vat, v.Image))
		}
	}
	return errs
}

// lastPart is the part of an image reference after its last slash, where a
// tag or digest would be (a registry's host:port comes before it).
func lastPart(ref string) string {
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		return ref[i+1:]
	}
	return ref
}

// Describe is the entry's software in a few words: its frameworks and Python.
func (e Entry) Describe() string {
	parts := slices.Clone(e.Frameworks)
	if e.Python != "" {
		parts = append(parts, "Python "+e.Python)
	}
	return strings.Join(parts, ", ")
}

// VersionList is how listings show an entry's versions.
func (e Entry) VersionList() string {
	if e.Repository != "" {
		return "any (latest)"
	}
	vs := make([]string, len(e.Versions))
	for i, v := range e.Versions {
		vs[i] = v.Version
	}
	return strings.Join(vs, ", ")
}

// ImageOf is how listings show an entry's image: the repository, or the
// latest version's image.
func (e Entry) ImageOf() string {
	if e.Repository != "" {
		return e.Repository + ":VERSION"
	}
	if len(e.Versions) == 0 {
		return ""
	}
	return e.Versions[len(e.Versions)-1].Image
}
