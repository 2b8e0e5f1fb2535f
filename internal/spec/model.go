package spec

import (
	"fmt"
	"slices"
	"strings"
)

// ModelFile is an Azure ML CLI v2 model file, the input of
// `ferry model create -f`. Path is the local file or folder holding the
// model, relative to the file; the client uploads it as a snapshot and the
// workspace keeps that snapshot, not the path.
type ModelFile struct {
	Schema      string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name        string            `yaml:"name,omitempty" json:"name,omitempty"`
	Version     string            `yaml:"version,omitempty" json:"version,omitempty"`
	Path        string            `yaml:"path,omitempty" json:"path,omitempty"`
	Type        string            `yaml:"type,omitempty" json:"type,omitempty"`
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags        map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties  map[string]string `yaml:"properties,omitempty" json:"properties,omitempty"`
}

// ModelTypes are the model types Azure ML v2 registers; the first is the
// default.
var ModelTypes = []string{"custom_model", "mlflow_model", "triton_model"}

// IsModelType says whether an input or output type is a model's
// (custom_model, mlflow_model, triton_model): an input of such a type
// that names azureml:NAME:VERSION or azureml:NAME@latest takes the
// registered model of that name, as Azure's does, not a data asset.
func IsModelType(t string) bool { return slices.Contains(ModelTypes, t) }

const modelEmptyHint = "a model needs a name and its files, e.g. name: sklearn-iris and path: ./model"

// ParseModel reads a model file strictly (see ParseJob), with `--set
// path=value` overrides applied first, and validates it. A missing type is
// set to custom_model, as Azure does.
func ParseModel(data []byte, sets []string) (*ModelFile, error) {
	f, root, err := parseYAML[ModelFile](data, sets, "model", modelEmptyHint, datastorePathFirst)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	if f.Type == "" {
		f.Type = ModelTypes[0]
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		noteSets(err, sets)
		return nil, err
	}
	return f, nil
}

// DecodeModelJSON reads a model from strict JSON, the API's form, and
// validates it.
func DecodeModelJSON(data []byte) (*ModelFile, error) {
	f, root, err := decodeJSON[ModelFile](data, "model")
	if err != nil {
		return nil, err
	}
	if f.Type == "" {
		f.Type = ModelTypes[0]
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return f, nil
}

// Validate checks the file; every problem is reported, each naming its
// field. Names and versions follow the rules of environments.
func (f *ModelFile) Validate() error {
	var es Errors
	switch {
	case f.Name == "":
		es.add("name", "a registered model needs a name, e.g. name: sklearn-iris")
	case !envNameRe().MatchString(f.Name):
		es.add("name", "%s is not a valid name: use letters, digits, '.', '-' and '_', starting with a letter or digit", quote(f.Name))
	}
	switch {
	case f.Version == "":
	case f.Version == "latest":
		es.add("version", "latest is a label, not a version: leave version out to get the next number")
	case !envNameRe().MatchString(f.Version):
		es.add("version", "%s is not a valid version: use letters, digits, '.', '-' and '_', such as 1 or 2.0; leave it out to get the next number", quote(f.Version))
	}
	if f.Path == "" {
		es.add("path", "a model needs its files: path: a file or folder, relative to the model file")
	}
	if f.Type != "" && !slices.Contains(ModelTypes, f.Type) {
		es.add("type", "%s is not a model type: use %s", quote(f.Type), joinNames(ModelTypes))
	}
	for k := range f.Tags {
		if k == "" {
			es.add("tags", "a tag needs a name")
		}
	}
	for k := range f.Properties {
		if k == "" {
			es.add("properties", "a property needs a name")
		}
	}
	return es.err()
}

// ParseModelRef reads a reference to a registered model as deployments
// and the CLI write it: azureml:NAME:VERSION, azureml:NAME@latest or
// NAME@latest. The version is "latest" for @latest. A NAME:VERSION without
// the azureml: prefix is taken too, since the CLI's users write it so.
func ParseModelRef(ref string) (name, version string, err error) {
	r := strings.TrimPrefix(ref, "azureml:")
	switch {
	case strings.HasPrefix(ref, "azureml://"):
		return "", "", fmt.Errorf("model %s: registry and workspace URIs are not supported; use azureml:NAME:VERSION or NAME@latest", quote(ref))
	case strings.HasSuffix(r, "@latest"):
		name = strings.TrimSuffix(r, "@latest")
		version = "latest"
	case strings.Contains(r, ":"):
		name, version, _ = strings.Cut(r, ":")
	default:
		return "", "", fmt.Errorf("model %s: say which version: azureml:%s:VERSION, or %s@latest for the newest", quote(ref), r, r)
	}
	if !envNameRe().MatchString(name) {
		return "", "", fmt.Errorf("model %s: %s is not a valid model name", quote(ref), quote(name))
	}
	if version != "latest" && !envNameRe().MatchString(version) {
		return "", "", fmt.Errorf("model %s: %s is not a valid version", quote(ref), quote(version))
	}
	return name, version, nil
}
