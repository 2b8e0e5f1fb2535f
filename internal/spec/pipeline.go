package spec

import (
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// PipelineJob is an Azure ML CLI v2 pipeline job file (type: pipeline):
// steps (Jobs) that are command jobs or command components, wired
// together by bindings. Fields Ferry does not use are accepted and
// listed in Ignored.
type PipelineJob struct {
	Schema         string                    `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Type           string                    `yaml:"type,omitempty" json:"type,omitempty"`
	Name           string                    `yaml:"name,omitempty" json:"name,omitempty"`
	DisplayName    string                    `yaml:"display_name,omitempty" json:"display_name,omitempty"`
	ExperimentName string                    `yaml:"experiment_name,omitempty" json:"experiment_name,omitempty"`
	Description    string                    `yaml:"description,omitempty" json:"description,omitempty"`
	Tags           map[string]string         `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties     map[string]string         `yaml:"properties,omitempty" json:"properties,omitempty"`
	Compute        string                    `yaml:"compute,omitempty" json:"compute,omitempty"`
	Settings       *PipelineSettings         `yaml:"settings,omitempty" json:"settings,omitempty"`
	Inputs         map[string]PipelineInput  `yaml:"-" json:"inputs,omitempty"`
	Outputs        map[string]PipelineOutput `yaml:"-" json:"outputs,omitempty"`
	Jobs           map[string]*PipelineStep  `yaml:"-" json:"jobs"`
	// Root is the pipeline component a pipeline job runs whole
	// (component: ./pipeline.yml instead of jobs:, with the job's inputs
	// and outputs its own). The client expands it into Jobs before it
	// submits the pipeline (ExpandPipelineSteps).
	Root *PipelineStep `yaml:"-" json:"-"`
	// Ignored lists the fields of the file Ferry does not use.
	Ignored []string `yaml:"-" json:"ignored,omitempty"`
}

// PipelineSettings are a pipeline's settings.
type PipelineSettings struct {
	DefaultCompute        string `yaml:"default_compute,omitempty" json:"default_compute,omitempty"`
	DefaultDatastore      string `yaml:"default_datastore,omitempty" json:"default_datastore,omitempty"`
	ContinueOnStepFailure bool   `yaml:"continue_on_step_failure,omitempty" json:"continue_on_step_failure,omitempty"`
	ForceRerun            bool   `yaml:"force_rerun,omitempty" json:"force_rerun,omitempty"`
	// Environment is the environment of the pipeline's command steps
	// that name none (Azure's settings.environment).
	Environment *Environment `yaml:"environment,omitempty" json:"environment,omitempty"`
}

// PipelineInput is a pipeline's input: a literal (Value) or data (Type,
// Path, Mode), as a command job's.
type PipelineInput struct {
	Value       *string `yaml:"value,omitempty" json:"value,omitempty"`
	Type        string  `yaml:"type,omitempty" json:"type,omitempty"`
	Path        string  `yaml:"path,omitempty" json:"path,omitempty"`
	Mode        string  `yaml:"mode,omitempty" json:"mode,omitempty"`
	Description string  `yaml:"description,omitempty" json:"description,omitempty"`
	Optional    bool    `yaml:"optional,omitempty" json:"optional,omitempty"`
}

// IsLiteral says whether the input is a value rather than data.
func (in PipelineInput) IsLiteral() bool { return in.Value != nil }

// PipelineOutput is a pipeline's output, which a step's output binds to.
type PipelineOutput struct {
	// Name and Version register the output as a data asset when the
	// pipeline completes.
	Name        string `yaml:"name,omitempty" json:"name,omitempty"`
	Version     string `yaml:"version,omitempty" json:"version,omitempty"`
	Type        string `yaml:"type,omitempty" json:"type,omitempty"`
	Mode        string `yaml:"mode,omitempty" json:"mode,omitempty"`
	Path        string `yaml:"path,omitempty" json:"path,omitempty"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
}

// PipelineStep is one step of a pipeline: a component (Component) with
// its inputs and outputs bound, an inline command job (Command), or a
// sweep (type: sweep) whose trial is the command component Component
// (written trial: in the file) and whose outputs are its best trial's.
type PipelineStep struct {
	Type                 string                `yaml:"type,omitempty" json:"type,omitempty"`
	Component            *ComponentRef         `yaml:"-" json:"component,omitempty"`
	DisplayName          string                `yaml:"display_name,omitempty" json:"display_name,omitempty"`
	Description          string                `yaml:"description,omitempty" json:"description,omitempty"`
	Tags                 map[string]string     `yaml:"tags,omitempty" json:"tags,omitempty"`
	Compute              string                `yaml:"compute,omitempty" json:"compute,omitempty"`
	Inputs               map[string]StepInput  `yaml:"-" json:"inputs,omitempty"`
	Outputs              map[string]StepOutput `yaml:"-" json:"outputs,omitempty"`
	Command              string                `yaml:"command,omitempty" json:"command,omitempty"`
	Code                 string                `yaml:"code,omitempty" json:"code,omitempty"`
	Environment          *Environment          `yaml:"environment,omitempty" json:"environment,omitempty"`
	EnvironmentVariables map[string]string     `yaml:"environment_variables,omitempty" json:"environment_variables,omitempty"`
	Resources            *Resources            `yaml:"resources,omitempty" json:"resources,omitempty"`
	Distribution         *Distribution         `yaml:"distribution,omitempty" json:"distribution,omitempty"`
	Limits               *Limits               `yaml:"limits,omitempty" json:"limits,omitempty"`
	ForceRerun           *bool                 `yaml:"force_rerun,omitempty" json:"force_rerun,omitempty"`
	IsDeterministic      *bool                 `yaml:"is_deterministic,omitempty" json:"is_deterministic,omitempty"`

	// Subpipeline is the pipeline component the step runs, once read (by
	// the client for a file; from the file for an inline one). Such a
	// step is expanded into the component's steps (ExpandPipelineSteps)
	// before the pipeline is submitted, so it never reaches the
	// workspace.
	Subpipeline *PipelineJob `yaml:"-" json:"-"`

	// A sweep step's own fields, as a sweep job's; its limits are Limits
	// (max_total_trials, max_concurrent_trials, timeout, trial_timeout).
	SearchSpace       map[string]SearchParam `yaml:"search_space,omitempty" json:"search_space,omitempty"`
	Objective         *Objective             `yaml:"objective,omitempty" json:"objective,omitempty"`
	SamplingAlgorithm *SamplingAlgorithm     `yaml:"sampling_algorithm,omitempty" json:"sampling_algorithm,omitempty"`
	EarlyTermination  *EarlyTermination      `yaml:"early_termination,omitempty" json:"early_termination,omitempty"`

	// CodeSnapshot and EnvironmentSnapshot are an inline command step's
	// uploads (set by the client, not the file).
	CodeSnapshot        string `yaml:"-" json:"code_snapshot,omitempty"`
	EnvironmentSnapshot string `yaml:"-" json:"environment_snapshot,omitempty"`
}

// ComponentRef is a step's component: Ref as the file wrote it (a path
// relative to the pipeline file, azureml:NAME:VERSION or
// azureml:NAME@latest) and, once resolved (by the client for a file, by
// the workspace for a registered one), the component itself.
type ComponentRef struct {
	Ref      string     `json:"ref,omitempty"`
	Resolved *Component `json:"resolved,omitempty"`
	// Digest is the registered component's content digest, set by the
	// workspace when it resolves a reference.
	Digest string `json:"digest,omitempty"`
}

// IsRegistered says whether Ref names a registered component
// (azureml:NAME:VERSION, azureml:NAME@latest, or a registry's
// azureml://registries/REGISTRY/components/NAME/...).
func (r *ComponentRef) IsRegistered() bool {
	return r != nil && strings.HasPrefix(r.Ref, "azureml:")
}

// IsSweep says whether the step is a sweep (type: sweep).
func (st *PipelineStep) IsSweep() bool { return st != nil && st.Type == "sweep" }

// StepInput is a step's input: a literal (Value), a binding (Binding,
// written alone or as a data input's path), or data (Type, Path, Mode).
type StepInput struct {
	Value   *string  `json:"value,omitempty"`
	Binding *Binding `json:"binding,omitempty"`
	Type    string   `json:"type,omitempty"`
	Path    string   `json:"path,omitempty"`
	Mode    string   `json:"mode,omitempty"`
}

// StepOutput is a step's output: its type and mode, and the pipeline
// output it is (Binding, ${{parent.outputs.NAME}}), if any.
type StepOutput struct {
	Binding *Binding `json:"binding,omitempty"`
	Type    string   `json:"type,omitempty"`
	Mode    string   `json:"mode,omitempty"`
	// Name and Version register the output as a data asset when the
	// step completes.
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

const pipelineEmptyHint = "a pipeline job needs type: pipeline and jobs:, each step a component or a command"

// IsPipelineFile says whether a job file's top-level type is pipeline,
// without reading the rest of it.
func IsPipelineFile(data []byte) bool {
	root, err := parseTree(data, "job")
	if err != nil || root == nil {
		return false
	}
	t := child(root, "type")
	return t != nil && t.Kind == yaml.ScalarNode && t.Value == "pipeline"
}

// ParsePipelineJob reads a pipeline job file, with `--set path=value`
// overrides on its top-level fields applied first, and validates it as
// far as the file alone allows: steps that name a component file or a
// registered component are checked once those are resolved (Resolve).
func ParsePipelineJob(data []byte, sets []string) (*PipelineJob, error) {
	root, err := parseTree(data, "job")
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, Errors{{Message: "the job file is empty; " + pipelineEmptyHint}}
	}
	if root.Kind != yaml.MappingNode {
		return nil, Errors{{Line: root.Line, Message: "the job file must be a YAML mapping of fields (field: value), got " + describe(root)}}
	}
	var es Errors
	for _, s := range sets {
		if fe := applySet(root, s); fe != nil {
			es = append(es, fe)
		}
	}
	if len(es) > 0 {
		return nil, es
	}
	p, err := pipelineFromNode(root)
	if err == nil {
		p.matchStepNames()
		err = p.resolveComputeInputs()
	}
	if err != nil {
		if fes, ok := err.(Errors); ok {
			addLines(fes, root)
		}
		return nil, err
	}
	if err := p.validate(true); err != nil {
		addLines(err.(Errors), root)
		noteSets(err, sets)
		return nil, err
	}
	return p, nil
}

// without returns a shallow copy of a mapping node without keys.
func without(n *yaml.Node, keys ...string) *yaml.Node {
	c := *n
	c.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !slices.Contains(keys, n.Content[i].Value) {
			c.Content = append(c.Content, n.Content[i], n.Content[i+1])
		}
	}
	return &c
}

func pipelineFromNode(root *yaml.Node) (*PipelineJob, error) {
	var p PipelineJob
	var ignored []string
	var es Errors
	fail := func(field string, n *yaml.Node, err error) {
		fe := yamlError(err)
		fe.Field, fe.Line = field, n.Line
		es = append(es, fe)
	}
	if err := decodeLenient(without(root, "inputs", "outputs", "jobs", "component"), &p, "", &ignored); err != nil {
		fail("", root, err)
		return nil, es
	}
	if c := child(root, "component"); c != nil && !isNull(c) {
		switch {
		case c.Kind == yaml.ScalarNode:
			p.Root = &PipelineStep{Type: "pipeline", Component: &ComponentRef{Ref: strings.TrimPrefix(c.Value, EnvironmentFilePrefix)}}
		case isPipelineNode(c):
			sub, err := pipelineComponentFromNode(c, "component")
			if err != nil {
				es = append(es, err.(Errors)...)
			} else {
				ignored = append(ignored, sub.Ignored...)
				sub.Ignored = nil
				p.Root = &PipelineStep{Type: "pipeline", Subpipeline: sub}
			}
		default:
			es.add("component", "a pipeline job's component is a pipeline component: its file (component: ./pipeline.yml) or the component written inline with type: pipeline and jobs:")
		}
	}
	if n := child(root, "inputs"); n != nil && !isNull(n) {
		if n.Kind != yaml.MappingNode {
			es.add("inputs", "must be a mapping of input names to values or data, got %s", describe(n))
		}
		p.Inputs = map[string]PipelineInput{}
		for _, k := range mappingKeys(n) {
			v, f := child(n, k), "inputs."+k
			switch {
			case v.Kind == yaml.ScalarNode && !isNull(v):
				val := v.Value
				p.Inputs[k] = PipelineInput{Value: &val}
			case v.Kind == yaml.MappingNode:
				if ds := child(v, "dataset"); ds != nil {
					// The older form: dataset: {local_path: ./data} or dataset: azureml:NAME:V.
					if lp := child(ds, "local_path"); lp != nil {
						ds = lp
					}
					if ds.Kind == yaml.ScalarNode {
						v = without(v, "dataset")
						v.Content = append(v.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "path"}, ds)
					}
				}
				var raw struct {
					Value       *string `yaml:"value,omitempty"`
					Default     *string `yaml:"default,omitempty"`
					Type        string  `yaml:"type,omitempty"`
					Path        string  `yaml:"path,omitempty"`
					Mode        string  `yaml:"mode,omitempty"`
					Description string  `yaml:"description,omitempty"`
					Optional    bool    `yaml:"optional,omitempty"`
				}
				if err := decodeLenient(v, &raw, f, &ignored); err != nil {
					fail(f, v, err)
					continue
				}
				in := PipelineInput{Value: raw.Value, Type: raw.Type, Path: raw.Path, Mode: raw.Mode, Description: raw.Description, Optional: raw.Optional}
				if in.Value == nil && raw.Default != nil && in.Path == "" {
					in.Value = raw.Default
				}
				if in.Value != nil && IsLiteralType(in.Type) {
					in.Type = "" // a typed literal: the value is what counts
				}
				p.Inputs[k] = in
			default:
				es.add(f, "give a value (%s: 5) or a data input with type and path", k)
			}
		}
	}
	if n := child(root, "outputs"); n != nil && !isNull(n) {
		p.Outputs = map[string]PipelineOutput{}
		for _, k := range mappingKeys(n) {
			v, f := child(n, k), "outputs."+k
			var out PipelineOutput
			switch {
			case isNull(v):
			case v.Kind == yaml.MappingNode:
				if err := decodeLenient(v, &out, f, &ignored); err != nil {
					fail(f, v, err)
					continue
				}
			default:
				es.add(f, "an output is a mapping (type, mode) or empty, got %s", describe(v))
				continue
			}
			p.Outputs[k] = out
		}
	}
	jobs := child(root, "jobs")
	if jobs != nil && jobs.Kind == yaml.MappingNode {
		p.Jobs = map[string]*PipelineStep{}
		for _, k := range mappingKeys(jobs) {
			st, err := stepFromNode(child(jobs, k), "jobs."+k, &ignored)
			if err != nil {
				es = append(es, err.(Errors)...)
				continue
			}
			p.Jobs[k] = st
		}
	} else if jobs != nil && !isNull(jobs) {
		es.add("jobs", "must be a mapping of step names to steps, got %s", describe(jobs))
	}
	if len(es) > 0 {
		return nil, es
	}
	if p.Settings != nil && p.Settings.Environment != nil {
		for _, st := range p.Jobs {
			if st != nil && st.Component == nil && st.Subpipeline == nil && !st.IsSweep() && st.Environment == nil {
				e := *p.Settings.Environment
				st.Environment = &e
			}
		}
	}
	p.Ignored = sortedIgnored(ignored)
	return &p, nil
}

func stepFromNode(n *yaml.Node, f string, ignored *[]string) (*PipelineStep, error) {
	var es Errors
	if n == nil || n.Kind != yaml.MappingNode {
		line := 0
		if n != nil {
			line = n.Line
		}
		return nil, Errors{{Field: f, Line: line, Message: "a step must be a mapping (type, component or command, inputs, outputs, compute)"}}
	}
	var st PipelineStep
	if err := decodeLenient(without(n, "inputs", "outputs", "component", "trial"), &st, f, ignored); err != nil {
		fe := yamlError(err)
		fe.Field, fe.Line = f, n.Line
		return nil, Errors{fe}
	}
	compField, c := "component", child(n, "component")
	if t := child(n, "trial"); t != nil && !isNull(t) {
		// A sweep step's trial is the component each trial runs.
		switch {
		case c != nil && !isNull(c):
			es.add(f+".trial", "give either trial (a sweep step's component) or component, not both")
		case st.Type != "sweep":
			es.add(f+".trial", "applies only to sweep steps (type: sweep); a command step names its component with component:")
		default:
			compField, c = "trial", t
		}
	}
	if c != nil && !isNull(c) {
		switch {
		case isPipelineNode(c) && compField == "component":
			sub, err := pipelineComponentFromNode(c, f+".component")
			if err != nil {
				es = append(es, err.(Errors)...)
			} else {
				*ignored = append(*ignored, sub.Ignored...)
				sub.Ignored = nil
				st.Subpipeline = sub
			}
		case c.Kind == yaml.ScalarNode:
			// file:./train.yml is Azure's explicit spelling of a local file.
			st.Component = &ComponentRef{Ref: strings.TrimPrefix(c.Value, EnvironmentFilePrefix)}
		case c.Kind == yaml.MappingNode:
			comp, err := componentFromNode(c, f+"."+compField)
			if err != nil {
				es = append(es, err.(Errors)...)
			} else {
				*ignored = append(*ignored, comp.Ignored...)
				comp.Ignored = nil
				st.Component = &ComponentRef{Resolved: comp}
			}
		default:
			es.add(f+"."+compField, "must be a component file's path, azureml:NAME:VERSION, azureml:NAME@latest or an inline component, got %s", describe(c))
		}
	}
	if in := child(n, "inputs"); in != nil && !isNull(in) {
		st.Inputs = map[string]StepInput{}
		for _, k := range mappingKeys(in) {
			v, fi := child(in, k), f+".inputs."+k
			var si StepInput
			switch {
			case v.Kind == yaml.ScalarNode && !isNull(v):
				b, ok, err := ParseBinding(v.Value)
				if st.IsSweep() && isSearchSpaceExpr(v.Value) {
					// ${{search_space.NAME}}: the trial's parameter,
					// which the sweep puts in the command.
					ok, err = false, nil
				}
				switch {
				case err != nil:
					es.add(fi, "%v", err)
				case ok:
					si.Binding = &b
				default:
					val := v.Value
					si.Value = &val
				}
			case v.Kind == yaml.MappingNode:
				var raw struct {
					Type  string  `yaml:"type,omitempty"`
					Path  string  `yaml:"path,omitempty"`
					Mode  string  `yaml:"mode,omitempty"`
					Value *string `yaml:"value,omitempty"`
				}
				if err := decodeLenient(v, &raw, fi, ignored); err != nil {
					fe := yamlError(err)
					fe.Field, fe.Line = fi, v.Line
					es = append(es, fe)
					continue
				}
				si = StepInput{Type: raw.Type, Path: raw.Path, Mode: raw.Mode, Value: raw.Value}
				if b, ok, err := ParseBinding(raw.Path); err != nil {
					es.add(fi+".path", "%v", err)
				} else if ok {
					si.Binding, si.Path = &b, ""
				}
				if si.Value != nil && IsLiteralType(si.Type) {
					si.Type = ""
				}
			default:
				es.add(fi, "give a value, a binding such as ${{parent.inputs.NAME}}, or a data input with type and path")
				continue
			}
			st.Inputs[k] = si
		}
	}
	if out := child(n, "outputs"); out != nil && !isNull(out) {
		st.Outputs = map[string]StepOutput{}
		for _, k := range mappingKeys(out) {
			v, fo := child(out, k), f+".outputs."+k
			var so StepOutput
			switch {
			case isNull(v):
			case v.Kind == yaml.ScalarNode:
				b, ok, err := ParseBinding(v.Value)
				switch {
				case err != nil:
					es.add(fo, "%v", err)
				case !ok:
					es.add(fo, "an output is a binding such as ${{parent.outputs.NAME}} or a mapping (type, mode), got %s", quote(v.Value))
				default:
					so.Binding = &b
				}
			case v.Kind == yaml.MappingNode:
				var raw struct {
					Type    string `yaml:"type,omitempty"`
					Mode    string `yaml:"mode,omitempty"`
					Path    string `yaml:"path,omitempty"`
					Name    string `yaml:"name,omitempty"`
					Version string `yaml:"version,omitempty"`
				}
				if err := decodeLenient(v, &raw, fo, ignored); err != nil {
					fe := yamlError(err)
					fe.Field, fe.Line = fo, v.Line
					es = append(es, fe)
					continue
				}
				so = StepOutput{Type: raw.Type, Mode: raw.Mode, Name: raw.Name, Version: raw.Version}
				if b, ok, err := ParseBinding(raw.Path); err != nil {
					es.add(fo+".path", "%v", err)
				} else if ok {
					so.Binding = &b
				} else if raw.Path != "" {
					*ignored = append(*ignored, fo+".path")
				}
			default:
				es.add(fo, "an output is a binding such as ${{parent.outputs.NAME}} or a mapping (type, mode)")
				continue
			}
			st.Outputs[k] = so
		}
	}
	if len(es) > 0 {
		return nil, es
	}
	return &st, nil
}

// StepComponent is the component a step runs: its resolved component, or
// for an inline command step, one made of the step's own fields with
// inputs and outputs declared by what the step gives them. It is nil for a
// step whose component is not resolved yet.
func (p *PipelineJob) StepComponent(name string) *Component {
	st := p.Jobs[name]
	if st == nil {
		return nil
	}
	if st.Component != nil {
		return st.Component.Resolved
	}
	if st.IsSweep() || st.Subpipeline != nil {
		return nil // a sweep step without a trial (Validate says so), or a pipeline component
	}
	c := &Component{Type: "command", Command: st.Command, Code: st.Code, Environment: st.Environment,
		EnvironmentVariables: st.EnvironmentVariables, Resources: st.Resources, Distribution: st.Distribution,
		Limits: st.Limits, IsDeterministic: st.IsDeterministic, CodeSnapshot: st.CodeSnapshot,
		EnvironmentSnapshot: st.EnvironmentSnapshot,
		Inputs:              map[string]ComponentInput{}, Outputs: map[string]ComponentOutput{}}
	for k, in := range st.Inputs {
		c.Inputs[k] = ComponentInput{Type: p.inputType(in)}
	}
	for k, out := range st.Outputs {
		c.Outputs[k] = ComponentOutput{Type: out.Type, Mode: out.Mode}
	}
	return c
}

// inputType is the type of what a step input gives: a literal is a
// string; data has its type, or that of what it is bound to.
func (p *PipelineJob) inputType(in StepInput) string {
	switch {
	case in.Type != "":
		return in.Type
	case in.Value != nil:
		return "string"
	case in.Binding != nil && in.Binding.Kind == BindParentInput:
		if pi, ok := p.Inputs[in.Binding.Name]; ok {
			if pi.IsLiteral() {
				return "string"
			}
			if pi.Type != "" {
				return pi.Type
			}
		}
	case in.Binding != nil && in.Binding.Kind == BindStepOutput:
		// The other step's declared output, read without making its
		// component, which could lead back here in a circle of steps.
		if other := p.Jobs[in.Binding.Step]; other != nil {
			t := other.Outputs[in.Binding.Name].Type
			if other.Component != nil && other.Component.Resolved != nil {
				t = other.Component.Resolved.Outputs[in.Binding.Name].Type
			}
			if t != "" {
				return t
			}
		}
	}
	return "uri_folder"
}

// Dependencies are the steps whose outputs a step's inputs bind to,
// sorted.
func (st *PipelineStep) Dependencies() []string {
	var deps []string
	for _, in := range st.Inputs {
		if in.Binding != nil && in.Binding.Kind == BindStepOutput && !slices.Contains(deps, in.Binding.Step) {
			deps = append(deps, in.Binding.Step)
		}
	}
	slices.Sort(deps)
	return deps
}

// StepOrder numbers the steps in an order in which each comes after the
// steps it takes inputs from (by name among those that could go first),
// the order they run in: 0, 1, 2, ...
func (p *PipelineJob) StepOrder() map[string]int {
	order := map[string]int{}
	for len(order) < len(p.Jobs) {
		progress := false
		for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
			if _, done := order[n]; done {
				continue
			}
			ready := true
			if st := p.Jobs[n]; st != nil {
				for _, d := range st.Dependencies() {
					if _, done := order[d]; !done && p.Jobs[d] != nil && d != n {
						ready = false
					}
				}
			}
			if ready {
				order[n] = len(order)
				progress = true
			}
		}
		if !progress { // a circle, which Validate refuses: the rest by name
			for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
				if _, done := order[n]; !done {
					order[n] = len(order)
				}
			}
		}
	}
	return order
}

// ContinueOnStepFailure says whether steps that do not depend on a failed
// step go on.
func (p *PipelineJob) ContinueOnStepFailure() bool {
	return p.Settings != nil && p.Settings.ContinueOnStepFailure
}

// DefaultCompute is the compute of steps that name none: settings'
// default_compute, else the pipeline's compute; "" when neither is given.
func (p *PipelineJob) DefaultCompute() string {
	if p.Settings != nil && p.Settings.DefaultCompute != "" {
		return strings.TrimPrefix(p.Settings.DefaultCompute, "azureml:")
	}
	return strings.TrimPrefix(p.Compute, "azureml:")
}

// StepCompute is the compute a step runs on ("" for the server's default).
func (p *PipelineJob) StepCompute(name string) string {
	if st := p.Jobs[name]; st != nil && st.Compute != "" {
		return strings.TrimPrefix(st.Compute, "azureml:")
	}
	return p.DefaultCompute()
}

// ForceRerun says whether a step must run even when an earlier run with
// the same component, inputs and environment could be reused.
func (p *PipelineJob) ForceRerun(name string) bool {
	st := p.Jobs[name]
	if st != nil && st.ForceRerun != nil {
		return *st.ForceRerun
	}
	if p.Settings != nil && p.Settings.ForceRerun {
		return true
	}
	if c := p.StepComponent(name); c != nil && c.IsDeterministic != nil && !*c.IsDeterministic {
		return true
	}
	return false
}

// MaxPipelineSteps bounds the steps of one pipeline.
const MaxPipelineSteps = 500

// Validate checks the pipeline as far as its resolved parts allow and
// returns every problem, each naming its field. A step whose component
// is a reference not yet resolved is checked for its reference only.
func (p *PipelineJob) Validate() error { return p.validate(false) }

// validate is Validate; withComponents accepts steps that run pipeline
// components, which the client expands before it submits the pipeline
// (a file just parsed has them, a pipeline sent to the workspace must not).
func (p *PipelineJob) validate(withComponents bool) error {
	if p == nil {
		return Errors{{Message: "the pipeline job is missing"}}
	}
	var es Errors
	if p.Type != "pipeline" {
		es.add("type", "must be pipeline, got %s", quote(p.Type))
	}
	if p.Name != "" && !jobNameRe().MatchString(p.Name) {
		es.add("name", "%s is not a valid job name: use 1 to 255 letters, digits, '_' or '-', starting with a letter or digit", quote(p.Name))
	}
	checkComputeRef(&es, "compute", p.Compute)
	if p.Settings != nil {
		checkComputeRef(&es, "settings.default_compute", p.Settings.DefaultCompute)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Inputs)) {
		in, f := p.Inputs[k], "inputs."+k
		if !identRe().MatchString(k) {
			es.add(f, "%s is not a valid input name: use letters, digits and '_', not starting with a digit", quote(k))
		}
		if in.IsLiteral() {
			continue
		}
		if in.Path == "" && !in.Optional {
			es.add(f+".path", "a data input needs a path: a local file or folder, azureml:NAME:VERSION or a URI")
		}
		oneOf(&es, f+".type", in.Type, true, DataInputTypes)
		oneOf(&es, f+".mode", in.Mode, true, append(slices.Clone(inputModes), "rw_mount"))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Outputs)) {
		out, f := p.Outputs[k], "outputs."+k
		if !identRe().MatchString(k) {
			es.add(f, "%s is not a valid output name: use letters, digits and '_', not starting with a digit", quote(k))
		}
		oneOf(&es, f+".type", out.Type, true, componentOutputs)
		oneOf(&es, f+".mode", out.Mode, true, outputModes)
		validateOutputAsset(&es, f, out.Name, out.Version)
	}
	switch {
	case p.Root != nil && len(p.Jobs) > 0:
		es.add("component", "give either jobs (the pipeline's steps) or component (a pipeline component that is the whole pipeline), not both")
	case p.Root != nil && withComponents:
		// The pipeline component's steps, once the client has read it.
	case len(p.Jobs) == 0:
		es.add("jobs", "is required: the pipeline's steps, e.g. jobs: {train: {type: command, component: ./train.yml}}")
	case len(p.Jobs) > MaxPipelineSteps:
		es.add("jobs", "a pipeline has at most %d steps (got %d)", MaxPipelineSteps, len(p.Jobs))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Jobs)) {
		if st := p.Jobs[name]; withComponents && st.IsPipelineComponent() {
			p.validatePipelineComponentStep(&es, name)
			continue
		}
		p.validateStep(&es, name)
	}
	if cyc := p.cycle(); cyc != "" {
		es.add("jobs", "the steps' bindings go round in a circle (%s); a step can only take the outputs of steps before it", cyc)
	}
	return es.err()
}

func checkComputeRef(es *Errors, f, c string) {
	if c != "" && !computeRefRe().MatchString(strings.TrimPrefix(c, "azureml:")) {
		es.add(f, "%s is not a compute target: write local, the target's name or azureml:NAME", quote(c))
	}
}

func (p *PipelineJob) validateStep(es *Errors, name string) {
	st, f := p.Jobs[name], "jobs."+name
	if !stepNameRe().MatchString(name) {
		es.add(f, "%s is not a valid step name: use letters, digits, '_' and '-', starting with a letter or '_'", quote(name))
	}
	if st == nil {
		es.add(f, "the step is empty; give it a component or a command")
		return
	}
	switch st.Type {
	case "", "command", "component":
		p.refuseSweepStepFields(es, name)
	case "sweep":
		p.validateSweepStep(es, name)
	case "pipeline":
		es.add(f+".component", "a pipeline step's component must be a pipeline component file (component: ./train_pipeline.yml) or written inline; the client expands it into its steps before it submits the pipeline")
		return
	case "parallel", "spark", "automl", "import", "data_transfer":
		es.add(f+".type", "%s steps are not supported yet; Ferry runs command, sweep and pipeline steps (a command, a command component, a sweep, or a pipeline component): %s", st.Type, otherKindHint(st.Type))
		return // the step's other fields are that kind's: their problems would bury this one
	default:
		es.add(f+".type", "must be command, got %s", quote(st.Type))
	}
	checkComputeRef(es, f+".compute", st.Compute)
	switch {
	case st.IsSweep():
		if strings.TrimSpace(st.Command) != "" {
			es.add(f+".command", "a sweep step runs its trial's command; write the command in the trial's component (trial: ./train.yml)")
		}
		if st.Component == nil {
			es.add(f+".trial", "is required: the command component each trial runs, trial: ./train.yml or azureml:NAME:VERSION")
		}
	case st.Component != nil && strings.TrimSpace(st.Command) != "":
		es.add(f, "give either component or command, not both")
	case st.Component == nil && strings.TrimSpace(st.Command) == "":
		es.add(f, "a step needs a component (component: ./train.yml or azureml:NAME:VERSION) or a command")
	}
	cf := "component"
	if st.IsSweep() {
		cf = "trial"
	}
	if st.Component != nil && st.Component.Resolved == nil {
		ref := strings.TrimSpace(st.Component.Ref)
		switch {
		case ref == "":
			es.add(f+"."+cf, "is empty; write a component file's path or azureml:NAME:VERSION")
		case st.Component.IsRegistered():
			if _, _, err := ParseComponentRef(ref); err != nil {
				es.add(f+"."+cf, "%v", err)
			}
		}
	}
	comp := p.StepComponent(name)
	if comp != nil {
		if err := comp.validate(false, f+"."+cf); err != nil {
			for _, fe := range err.(Errors) {
				if st.Component == nil {
					fe.Field = strings.Replace(fe.Field, f+"."+cf+".", f+".", 1)
				}
				*es = append(*es, fe)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.Inputs)) {
		in, fi := st.Inputs[k], f+".inputs."+k
		if comp != nil {
			if _, ok := comp.Inputs[k]; !ok {
				es.add(fi, "the component has no input %q; %s", k, declared("inputs", comp.Inputs))
			}
		}
		if in.Binding == nil {
			if in.Value == nil && in.Path == "" {
				es.add(fi, "give a value, a binding such as ${{parent.inputs.NAME}}, or a data input with type and path")
			}
			continue
		}
		switch b := in.Binding; b.Kind {
		case BindParentInput:
			if _, ok := p.Inputs[b.Name]; !ok {
				es.add(fi, "%s: the pipeline has no input %q; %s", b, b.Name, declared("inputs", p.Inputs))
			}
		case BindStepOutput:
			other, ok := p.Jobs[b.Step]
			switch {
			case !ok:
				es.add(fi, "%s: the pipeline has no step %q; %s", b, b.Step, declared("jobs", p.Jobs))
			case b.Step == name:
				es.add(fi, "%s: a step cannot take its own output", b)
			case other != nil:
				if oc := p.StepComponent(b.Step); oc != nil {
					if _, ok := oc.Outputs[b.Name]; !ok {
						es.add(fi, "%s: step %s has no output %q; %s", b, b.Step, b.Name, declared("outputs", oc.Outputs))
					}
				}
			}
		default:
			es.add(fi, "%s names a pipeline output; an input takes ${{parent.inputs.NAME}} or ${{parent.jobs.STEP.outputs.NAME}}", b)
		}
	}
	if comp != nil {
		for _, k := range slices.Sorted(maps.Keys(comp.Inputs)) {
			ci := comp.Inputs[k]
			_, swept := st.SearchSpace[k] // a sweep binds a parameter to the input of its name
			if _, ok := st.Inputs[k]; !ok && !ci.Optional && ci.Default == nil && !(st.IsSweep() && swept) {
				es.add(f+".inputs", "the component's input %s is required (it is not optional and has no default); give it under inputs: %s:", k, k)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.Outputs)) {
		out, fo := st.Outputs[k], f+".outputs."+k
		validateOutputAsset(es, fo, out.Name, out.Version)
		if comp != nil {
			if _, ok := comp.Outputs[k]; !ok {
				es.add(fo, "the component has no output %q; %s", k, declared("outputs", comp.Outputs))
			}
		}
		if out.Binding == nil {
			oneOf(es, fo+".type", out.Type, true, componentOutputs)
			oneOf(es, fo+".mode", out.Mode, true, outputModes)
			continue
		}
		if out.Binding.Kind != BindParentOutput {
			es.add(fo, "%s: an output binds to a pipeline output, ${{parent.outputs.NAME}}", out.Binding)
		} else if _, ok := p.Outputs[out.Binding.Name]; !ok {
			es.add(fo, "%s: the pipeline has no output %q; %s", out.Binding, out.Binding.Name, declared("outputs", p.Outputs))
		}
	}
}

// cycle names a circle of steps bound to each other's outputs, or "".
func (p *PipelineJob) cycle() string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var path []string
	var found string
	var visit func(n string) bool
	visit = func(n string) bool {
		color[n] = grey
		path = append(path, n)
		if st := p.Jobs[n]; st != nil {
			for _, d := range st.Dependencies() {
				if _, ok := p.Jobs[d]; !ok {
					continue
				}
				switch color[d] {
				case grey:
					i := slices.Index(path, d)
					found = strings.Join(append(slices.Clone(path[i:]), d), " → ")
					return true
				case white:
					if visit(d) {
						return true
					}
				}
			}
		}
		path = path[:len(path)-1]
		color[n] = black
		return false
	}
	for _, n := range slices.Sorted(maps.Keys(p.Jobs)) {
		if color[n] == white && visit(n) {
			return found
		}
	}
	return ""
}

// isSearchSpaceExpr says whether a value is ${{search_space.NAME}}.
func isSearchSpaceExpr(v string) bool {
	m := exprRe().FindStringSubmatch(strings.TrimSpace(v))
	return m != nil && searchExprRe().MatchString(strings.TrimSpace(m[1]))
}

// DecodePipelineJobJSON reads a pipeline job from JSON, the REST API's
// form (the client has parsed the file): unknown fields are refused, and
// the pipeline is validated.
func DecodePipelineJobJSON(data []byte) (*PipelineJob, error) {
	var p PipelineJob
	if err := strictJSON(data, &p); err != nil {
		return nil, jsonError(err, data, "pipeline job")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// DecodeComponentJSON reads a component from JSON, the REST API's form:
// unknown fields are refused, and the component is validated.
func DecodeComponentJSON(data []byte) (*Component, error) {
	var c Component
	if err := strictJSON(data, &c); err != nil {
		return nil, jsonError(err, data, "component")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}
