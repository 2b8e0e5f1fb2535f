package spec

import (
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Component is an Azure ML CLI v2 command component file
// (commandComponent.schema.json): a reusable step with typed inputs and
// outputs, the input of `ferry component create -f` and of a pipeline
// step's `component:`. Code is a path relative to the file; the client
// uploads it and the workspace keeps its snapshot (CodeSnapshot).
type Component struct {
	Schema          string                     `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name            string                     `yaml:"name,omitempty" json:"name,omitempty"`
	Version         string                     `yaml:"version,omitempty" json:"version,omitempty"`
	DisplayName     string                     `yaml:"display_name,omitempty" json:"display_name,omitempty"`
	Description     string                     `yaml:"description,omitempty" json:"description,omitempty"`
	Type            string                     `yaml:"type,omitempty" json:"type,omitempty"`
	Tags            map[string]string          `yaml:"tags,omitempty" json:"tags,omitempty"`
	IsDeterministic *bool                      `yaml:"is_deterministic,omitempty" json:"is_deterministic,omitempty"`
	Inputs          map[string]ComponentInput  `yaml:"inputs,omitempty" json:"inputs,omitempty"`
	Outputs         map[string]ComponentOutput `yaml:"outputs,omitempty" json:"outputs,omitempty"`
	Command         string                     `yaml:"command,omitempty" json:"command,omitempty"`
	Code            string                     `yaml:"code,omitempty" json:"code,omitempty"`
	// AdditionalIncludes are files and folders, relative to the
	// component file, that join its code at the code's root under their
	// own names, as Azure's additional_includes do.
	AdditionalIncludes   []string          `yaml:"additional_includes,omitempty" json:"additional_includes,omitempty"`
	Environment          *Environment      `yaml:"environment,omitempty" json:"environment,omitempty"`
	EnvironmentVariables map[string]string `yaml:"environment_variables,omitempty" json:"environment_variables,omitempty"`
	Resources            *Resources        `yaml:"resources,omitempty" json:"resources,omitempty"`
	Distribution         *Distribution     `yaml:"distribution,omitempty" json:"distribution,omitempty"`
	Limits               *Limits           `yaml:"limits,omitempty" json:"limits,omitempty"`

	// CodeSnapshot is the uploaded code (set by the client, not the file).
	CodeSnapshot string `yaml:"-" json:"code_snapshot,omitempty"`
	// EnvironmentSnapshot holds the files an inline environment names.
	EnvironmentSnapshot string `yaml:"-" json:"environment_snapshot,omitempty"`
	// Ignored lists the fields of the file Ferry does not use.
	Ignored []string `yaml:"-" json:"ignored,omitempty"`
}

// ComponentInput is one declared input of a component.
type ComponentInput struct {
	Type        string   `yaml:"type,omitempty" json:"type,omitempty"`
	Description string   `yaml:"description,omitempty" json:"description,omitempty"`
	Default     *string  `yaml:"default,omitempty" json:"default,omitempty"`
	Optional    bool     `yaml:"optional,omitempty" json:"optional,omitempty"`
	Min         *string  `yaml:"min,omitempty" json:"min,omitempty"`
	Max         *string  `yaml:"max,omitempty" json:"max,omitempty"`
	Enum        []string `yaml:"enum,omitempty" json:"enum,omitempty"`
	Mode        string   `yaml:"mode,omitempty" json:"mode,omitempty"`
}

// ComponentOutput is one declared output of a component.
type ComponentOutput struct {
	Type        string `yaml:"type,omitempty" json:"type,omitempty"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	Mode        string `yaml:"mode,omitempty" json:"mode,omitempty"`
}

var (
	// LiteralInputTypes are the component input types that hold a value.
	LiteralInputTypes = []string{"string", "integer", "number", "boolean"}
	// DataInputTypes are the component input types that hold data.
	DataInputTypes   = []string{"uri_file", "uri_folder", "mltable", "mlflow_model", "custom_model", "triton_model"}
	componentOutputs = []string{"uri_folder", "uri_file", "mltable", "mlflow_model", "custom_model", "triton_model"}
)

// IsLiteralType says whether an input type holds a value, not data.
func IsLiteralType(t string) bool { return slices.Contains(LiteralInputTypes, t) }

const componentEmptyHint = "a component needs a name, inputs/outputs and a command, e.g. name: train and command: python train.py"

// ParseComponent reads a command component file. Fields Ferry does not use
// are accepted and listed in Ignored; values of the wrong kind, a missing
// command and references to undeclared inputs are errors naming the field
// and line. A missing type is set to command.
func ParseComponent(data []byte) (*Component, error) {
	root, err := parseTree(data, "component")
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, Errors{{Message: "the component file is empty; " + componentEmptyHint}}
	}
	c, err := componentFromNode(root, "")
	if err != nil {
		return nil, err
	}
	if err := c.validate(true, ""); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return c, nil
}

// componentFromNode decodes a component from a mapping found at path.
func componentFromNode(n *yaml.Node, path string) (*Component, error) {
	if n.Kind != yaml.MappingNode {
		return nil, Errors{{Field: path, Line: n.Line, Message: "a component must be a mapping of fields (name, inputs, outputs, command, ...), got " + describe(n)}}
	}
	if code := child(n, "code"); code != nil && code.Kind == yaml.MappingNode {
		// The older form: code: {local_path: ./src}.
		if lp := child(code, "local_path"); lp != nil && lp.Kind == yaml.ScalarNode {
			n = without(n, "code")
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "code"}, lp)
		}
	}
	var c Component
	var ignored []string
	if err := decodeLenient(n, &c, path, &ignored); err != nil {
		fe := yamlError(err)
		fe.Field = path
		return nil, Errors{fe}
	}
	c.Ignored = sortedIgnored(ignored)
	if c.Type == "" {
		c.Type = "command"
	}
	// The older type path is a folder or a file: uri_folder takes both.
	for k, in := range c.Inputs {
		if in.Type == "path" {
			in.Type = "uri_folder"
			c.Inputs[k] = in
		}
	}
	for k, out := range c.Outputs {
		if out.Type == "path" {
			out.Type = "uri_folder"
			c.Outputs[k] = out
		}
	}
	return &c, nil
}

// Validate checks a component to be registered: it needs a name.
func (c *Component) Validate() error { return c.validate(true, "") }

// validate checks the component; needName for one to be registered, f the
// prefix of its fields (a step's inline component: jobs.STEP.component).
func (c *Component) validate(needName bool, f string) error {
	var es Errors
	at := func(k string) string { return join(f, k) }
	switch c.Type {
	case "command":
	case "":
		c.Type = "command"
	case "parallel", "spark", "pipeline", "import", "automl", "sweep":
		// The rest of the file is another kind's fields: its problems
		// would only bury this one.
		hint := otherKindHint(c.Type)
		if c.Type == "pipeline" {
			hint = "a pipeline component runs as a step of a pipeline job that names its file (type: pipeline, component: ./its-file.yml); Ferry does not register pipeline components"
		}
		es.add(at("type"), "%s components are not supported yet; Ferry runs command components: %s", c.Type, hint)
		return es
	default:
		es.add(at("type"), "must be command, got %s", quote(c.Type))
	}
	if needName {
		switch {
		case c.Name == "":
			es.add(at("name"), "is required: the name the component is registered under, e.g. name: train_model")
		case !envNameRe().MatchString(c.Name):
			es.add(at("name"), "%s is not a valid component name: use letters, digits, '_', '-' and '.'", quote(c.Name))
		}
	}
	if c.Version != "" && !envNameRe().MatchString(c.Version) {
		es.add(at("version"), "%s is not a valid version: use letters, digits, '_', '-' and '.'", quote(c.Version))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Inputs)) {
		in, fi := c.Inputs[name], at("inputs."+name)
		if !identRe().MatchString(name) {
			es.add(fi, "%s is not a valid input name: use letters, digits and '_', not starting with a digit", quote(name))
		}
		if in.Type == "" {
			es.add(fi+".type", "is required: one of %s", joinOr(append(slices.Clone(LiteralInputTypes), DataInputTypes...)))
		} else if !IsLiteralType(in.Type) && !slices.Contains(DataInputTypes, in.Type) {
			es.add(fi+".type", "must be one of %s, got %s", joinOr(append(slices.Clone(LiteralInputTypes), DataInputTypes...)), quote(in.Type))
		}
		if in.Mode != "" && !slices.Contains(inputModes, in.Mode) && in.Mode != "rw_mount" {
			es.add(fi+".mode", "must be one of %s, got %s", joinOr(inputModes), quote(in.Mode))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Outputs)) {
		out, fo := c.Outputs[name], at("outputs."+name)
		if !identRe().MatchString(name) {
			es.add(fo, "%s is not a valid output name: use letters, digits and '_', not starting with a digit", quote(name))
		}
		oneOf(&es, fo+".type", out.Type, true, componentOutputs)
		oneOf(&es, fo+".mode", out.Mode, true, outputModes)
	}
	c.validateCommand(&es, at("command"))
	checkEnvironmentVariables(&es, c.EnvironmentVariables)
	if c.Environment != nil {
		c.Environment.validate(&es, at("environment"))
	}
	if c.Distribution != nil {
		(&Job{Distribution: c.Distribution}).validateDistribution(&es)
	}
	return es.err()
}

func (c *Component) validateCommand(es *Errors, f string) {
	if strings.TrimSpace(c.Command) == "" {
		es.add(f, "is required: the shell command the component runs, e.g. python train.py --data ${{inputs.data}}")
		return
	}
	if strings.ContainsRune(c.Command, 0) {
		es.add(f, "must not contain a NUL character")
	}
	inputs, outputs, bad := commandRefs(c.Command)
	for _, b := range bad {
		es.add(f, "%s is not supported; a command may use only ${{inputs.NAME}} and ${{outputs.NAME}}", quote(b))
	}
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		in, ok := c.Inputs[name]
		switch {
		case !ok:
			es.add(f, "${{inputs.%s}} refers to input %q, which the component does not declare; %s", name, name, declared("inputs", c.Inputs))
		case in.Optional && in.Default == nil && !inputs[name]:
			es.add(f, "input %s is optional, so its use must be inside an optional fragment: $[[--%s ${{inputs.%s}}]]", name, name, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(outputs)) {
		if _, ok := c.Outputs[name]; !ok {
			es.add(f, "${{outputs.%s}} refers to output %q, which the component does not declare; %s", name, name, declared("outputs", c.Outputs))
		}
	}
}
