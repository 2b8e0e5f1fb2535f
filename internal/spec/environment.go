package spec

import (
	"strings"
)

// EnvironmentFile is an Azure ML CLI v2 environment file, the input of
// `ferry environment create -f`. Its software fields are those of an inline
// environment in a job.
type EnvironmentFile struct {
	Schema          string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name            string            `yaml:"name,omitempty" json:"name,omitempty"`
	Version         string            `yaml:"version,omitempty" json:"version,omitempty"`
	Description     string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags            map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	Image           string            `yaml:"image,omitempty" json:"image,omitempty"`
	CondaFile       string            `yaml:"conda_file,omitempty" json:"conda_file,omitempty"`
	Build           *Build            `yaml:"build,omitempty" json:"build,omitempty"`
	Python          *Python           `yaml:"python,omitempty" json:"python,omitempty"`
	UserManaged     bool              `yaml:"user_managed,omitempty" json:"user_managed,omitempty"`
	InterpreterPath string            `yaml:"interpreter_path,omitempty" json:"interpreter_path,omitempty"`
	OSType          string            `yaml:"os_type,omitempty" json:"os_type,omitempty"`
	// InferenceConfig is taken for compatibility and kept; endpoints use it later.
	InferenceConfig map[string]any `yaml:"inference_config,omitempty" json:"inference_config,omitempty"`
}

const environmentEmptyHint = "an environment needs a name and its software, e.g. name: sklearn and conda_file: env.yml"

var envNameRe = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$`)

// ParseEnvironment reads an environment file strictly (see ParseJob) and
// validates it.
func ParseEnvironment(data []byte) (*EnvironmentFile, error) {
	f, root, err := parseYAML[EnvironmentFile](data, nil, "environment", environmentEmptyHint, nil)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return f, nil
}

// ParseInlineEnvironment reads the environment file a job names with
// `environment: file:PATH`, as strictly as ParseEnvironment; its software
// becomes the job's inline environment, so unlike a registered one it
// needs no name.
func ParseInlineEnvironment(data []byte) (*Environment, error) {
	f, root, err := parseYAML[EnvironmentFile](data, nil, "environment", environmentEmptyHint, nil)
	if err != nil {
		return nil, err
	}
	if err := f.check(false); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return f.Environment(), nil
}

// DecodeEnvironmentJSON reads an environment from strict JSON, the API's
// form, and validates it.
func DecodeEnvironmentJSON(data []byte) (*EnvironmentFile, error) {
	f, root, err := decodeJSON[EnvironmentFile](data, "environment")
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return f, nil
}

// Environment is the file's software as an inline job environment.
func (f *EnvironmentFile) Environment() *Environment {
	return &Environment{
		Name: f.Name, Version: f.Version, Description: f.Description, Tags: f.Tags,
		Image: f.Image, CondaFile: f.CondaFile, Build: f.Build, Python: f.Python,
		UserManaged: f.UserManaged, InterpreterPath: f.InterpreterPath,
	}
}

// Validate checks the file; every problem is reported, each naming its field.
func (f *EnvironmentFile) Validate() error { return f.check(true) }

// check is Validate; needName is false for an inline environment's file.
func (f *EnvironmentFile) check(needName bool) error {
	var es Errors
	switch {
	case f.Name == "" && !needName:
	case f.Name == "":
		es.add("name", "a registered environment needs a name, e.g. name: sklearn-env")
	case !envNameRe().MatchString(f.Name):
		es.add("name", "%s is not a valid name: use letters, digits, '.', '-' and '_', starting with a letter or digit", quote(f.Name))
	}
	if f.Version != "" && !envNameRe().MatchString(f.Version) {
		es.add("version", "%s is not a valid version: use letters, digits, '.', '-' and '_', such as 1 or 2.0; leave it out to get the next number", quote(f.Version))
	}
	if f.OSType != "" && !strings.EqualFold(f.OSType, "linux") {
		es.add("os_type", "only linux environments run on Ferry's nodes, not %s", quote(f.OSType))
	}
	var inner Errors
	f.Environment().validate(&inner, "environment")
	for _, e := range inner {
		e.Field = strings.TrimPrefix(strings.TrimPrefix(e.Field, "environment"), ".")
		es = append(es, e)
	}
	return es.err()
}
