package spec

import (
	"fmt"
	"strings"
)

// References to registered components: azureml:NAME:VERSION,
// azureml:NAME@latest, and an Azure registry's
// azureml://registries/REGISTRY/components/NAME/(versions/V|labels/latest),
// which Ferry, having no registries, reads as the workspace's NAME.

// ComponentRegistry is the registry a component reference names
// (azureml://registries/REGISTRY/components/...), "" for any other.
// Ferry has no registries: such a reference is resolved against the
// components registered in the workspace, by name and version.
func ComponentRegistry(ref string) string {
	rest, ok := strings.CutPrefix(ref, "azureml://registries/")
	if !ok {
		return ""
	}
	reg, _, _ := strings.Cut(rest, "/")
	return reg
}

// RegistryNote says how Ferry reads a registry's component reference
// (azureml://registries/REGISTRY/components/...): as the component of
// that name and version registered in the workspace. "" for any other
// reference.
func RegistryNote(ref string) string {
	reg := ComponentRegistry(ref)
	if reg == "" {
		return ""
	}
	name, version, err := ParseComponentRef(ref)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("Ferry has no registries: %s is read as the workspace's component %s (version %s), whatever registry %s holds", ref, name, version, reg)
}

// RegistryMiss is the message for a component reference that is not
// registered (msg says what is): for a registry's reference, it says
// that Ferry looked among the workspace's components, and how to
// register one.
func RegistryMiss(ref, msg string) string {
	if ComponentRegistry(ref) == "" {
		return msg
	}
	msg = fmt.Sprintf("%s: Ferry has no registries and looks the component up among the workspace's by name and version: %s", ref, msg)
	if !strings.Contains(msg, "ferry component create") {
		msg += "; register it with `ferry component create -f FILE`"
	}
	return msg
}

// parseRegistryComponentRef reads azureml://registries/R/components/NAME
// followed by /versions/V, /labels/latest or nothing (latest).
func parseRegistryComponentRef(ref string) (name, version string, err error) {
	bad := fmt.Errorf("component %s: write azureml://registries/REGISTRY/components/NAME/versions/VERSION or .../labels/latest (or azureml:NAME:VERSION)", quote(ref))
	parts := strings.Split(strings.TrimPrefix(ref, "azureml://"), "/")
	if len(parts) < 4 || parts[0] != "registries" || parts[1] == "" || parts[2] != "components" {
		return "", "", bad
	}
	name = parts[3]
	switch rest := parts[4:]; {
	case len(rest) == 0:
		version = "latest"
	case len(rest) == 2 && rest[0] == "versions" && rest[1] != "":
		version = rest[1]
	case len(rest) == 2 && rest[0] == "labels":
		if rest[1] != "latest" {
			return "", "", fmt.Errorf("component %s: label %s: Ferry knows the label latest only; write .../labels/latest or .../versions/VERSION", quote(ref), quote(rest[1]))
		}
		version = "latest"
	default:
		return "", "", bad
	}
	return name, version, nil
}

// ParseComponentRef reads a reference to a registered component:
// azureml:NAME:VERSION or azureml:NAME@latest (version "latest"), or a
// registry's azureml://registries/REGISTRY/components/NAME/versions/V
// (or /labels/latest), which names the workspace's component NAME.
func ParseComponentRef(ref string) (name, version string, err error) {
	r := strings.TrimPrefix(ref, "azureml:")
	if strings.HasPrefix(ref, "azureml://") {
		if name, version, err = parseRegistryComponentRef(ref); err != nil {
			return "", "", err
		}
		r = name + ":" + version
	}
	switch {
	case strings.HasSuffix(r, "@latest"):
		name, version = strings.TrimSuffix(r, "@latest"), "latest"
	case strings.Contains(r, ":"):
		name, version, _ = strings.Cut(r, ":")
	default:
		name, version = r, "latest"
	}
	if !envNameRe().MatchString(name) {
		return "", "", fmt.Errorf("component %s: %s is not a valid component name; write azureml:NAME:VERSION or azureml:NAME@latest", quote(ref), quote(name))
	}
	if version != "latest" && !envNameRe().MatchString(version) {
		return "", "", fmt.Errorf("component %s: %s is not a valid version", quote(ref), quote(version))
	}
	return name, version, nil
}
