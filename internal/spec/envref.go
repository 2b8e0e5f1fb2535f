package spec

import (
	"fmt"
	"strings"
)

// EnvironmentRef is an environment reference as Azure ML files write it,
// read by ParseEnvironmentRef.
type EnvironmentRef struct {
	Name string
	// Version is "" when Latest is set.
	Version string
	// Latest is set by NAME@latest and by a registry's labels/latest.
	Latest bool
	// Registry is the registry of an azureml://registries/REGISTRY/...
	// reference (only Azure's own, azureml, is known); "" for a reference
	// to the workspace.
	Registry string
}

// BuiltinRegistry is the registry of Azure's curated environments, the only
// one a registry reference may name: Ferry answers it from its environment
// catalog.
const BuiltinRegistry = "azureml"

var (
	envRefRe      = lazyRegexp(`^([A-Za-z0-9_.-]+)(?::([A-Za-z0-9_.-]+)|(@latest))$`)
	registryRefRe = lazyRegexp(`^azureml://registries/([^/]+)/environments/([A-Za-z0-9_.-]+)/(?:labels/(latest)|versions/([A-Za-z0-9_.-]+))$`)
)

// ParseEnvironmentRef reads a reference to an environment in any form
// Azure's files write one: azureml:NAME:VERSION, azureml:NAME@latest (the
// azureml: prefix may be left out), and the registry forms
// azureml://registries/azureml/environments/NAME/labels/latest and
// .../versions/VERSION. Its errors say which forms there are.
func ParseEnvironmentRef(ref string) (EnvironmentRef, error) {
	if strings.HasPrefix(ref, "azureml://") {
		m := registryRefRe().FindStringSubmatch(ref)
		switch {
		case m == nil:
			return EnvironmentRef{}, fmt.Errorf("%s is not an environment reference Ferry knows: write azureml://registries/azureml/environments/NAME/labels/latest or .../versions/VERSION for a built-in environment, or azureml:NAME:VERSION for a registered one", quote(ref))
		case m[1] != BuiltinRegistry:
			return EnvironmentRef{}, fmt.Errorf("%s: registry %s is not known here, only Azure's built-in environments (registry %s) are; register the environment with `ferry environment create` and use azureml:NAME:VERSION", quote(ref), quote(m[1]), BuiltinRegistry)
		}
		return EnvironmentRef{Name: m[2], Version: m[4], Latest: m[3] != "", Registry: m[1]}, nil
	}
	m := envRefRe().FindStringSubmatch(strings.TrimPrefix(ref, "azureml:"))
	if m == nil {
		return EnvironmentRef{}, fmt.Errorf("%s is not an environment reference: write azureml:NAME:VERSION, azureml:NAME@latest, azureml://registries/azureml/environments/NAME/labels/latest, file:ENV.yml or an inline mapping (image, build, python, conda_file or user_managed)", quote(ref))
	}
	return EnvironmentRef{Name: m[1], Version: m[2], Latest: m[3] != ""}, nil
}

// String writes the reference back in the form it came in.
func (r EnvironmentRef) String() string {
	if r.Registry != "" {
		if r.Latest {
			return "azureml://registries/" + r.Registry + "/environments/" + r.Name + "/labels/latest"
		}
		return "azureml://registries/" + r.Registry + "/environments/" + r.Name + "/versions/" + r.Version
	}
	if r.Latest {
		return "azureml:" + r.Name + "@latest"
	}
	return "azureml:" + r.Name + ":" + r.Version
}

// EnvironmentFilePrefix starts a reference to an environment file beside
// the job file (environment: file:./env.yml), which the client reads and
// sends inline; a server never resolves one.
const EnvironmentFilePrefix = "file:"

// FilePath is the path of an environment file reference (file:PATH), ""
// when Ref is not one.
func (e *Environment) FilePath() string {
	if e == nil {
		return ""
	}
	p, ok := strings.CutPrefix(e.Ref, EnvironmentFilePrefix)
	if !ok {
		return ""
	}
	return strings.TrimSpace(p)
}
