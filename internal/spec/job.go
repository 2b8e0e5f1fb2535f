package spec

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// ParseJob reads a command job file strictly and validates it.
func ParseJob(data []byte) (*Job, error) { return ParseJobWithSet(data, nil) }

// ParseJobWithSet reads a job file, applies `--set path=value` overrides
// (values are YAML scalars), and validates the result.
func ParseJobWithSet(data []byte, sets []string) (*Job, error) {
	root, err := parseNode(data)
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		if err := applySet(root, s); err != nil {
			return nil, err
		}
	}
	var j Job
	if err := decodeYAML(root, &j); err != nil {
		return nil, err
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return &j, nil
}

// DecodeJobJSON reads a job from strict JSON (the REST API's form) and
// validates it.
func DecodeJobJSON(data []byte) (*Job, error) {
	var j Job
	if err := decodeJSON(data, &j); err != nil {
		return nil, err
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return &j, nil
}

// UnmarshalYAML reads an input written as a plain value (a literal) or as
// a mapping (a data input).
func (in *Input) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		v := n.Value
		*in = Input{Value: &v}
		return nil
	}
	type plain Input
	return n.Decode((*plain)(in))
}

// UnmarshalJSON reads an input as a JSON scalar (a literal) or object.
func (in *Input) UnmarshalJSON(data []byte) error {
	if v, ok := jsonScalar(data); ok {
		*in = Input{Value: &v}
		return nil
	}
	type plain Input
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	return dec.Decode((*plain)(in))
}

// UnmarshalYAML reads an environment written as a reference string or a mapping.
func (e *Environment) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*e = Environment{Ref: n.Value}
		return nil
	}
	type plain Environment
	return n.Decode((*plain)(e))
}

// UnmarshalJSON reads an environment as a reference string or an object.
func (e *Environment) UnmarshalJSON(data []byte) error {
	var s string
	if json.Unmarshal(data, &s) == nil {
		*e = Environment{Ref: s}
		return nil
	}
	type plain Environment
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	return dec.Decode((*plain)(e))
}

// jsonScalar returns a JSON string, number or boolean as text.
func jsonScalar(data []byte) (string, bool) {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return "", false
	}
	switch x := v.(type) {
	case string:
		return x, true
	case bool, float64:
		return strings.TrimSpace(string(data)), true
	}
	return "", false
}

// IsLiteral reports whether the input is a plain value, not data.
func (in Input) IsLiteral() bool { return in.Value != nil }

// ComputeName is the job's compute target without the azureml: prefix.
func (j *Job) ComputeName() string { return strings.TrimPrefix(j.Compute, "azureml:") }

var (
	jobNameRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$`)
	identRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	computeRe   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{1,31}$`)
	exprRe      = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)
	refExprRe   = regexp.MustCompile(`^(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)$`)
	shmRe       = regexp.MustCompile(`^[0-9]+[bkmgBKMG]?$`)
	envRefRe    = regexp.MustCompile(`^(azureml:)?[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+|@latest)$`)
	inputTypes  = set("uri_file", "uri_folder", "mltable", "mlflow_model", "custom_model")
	inputModes  = set("", "ro_mount", "download", "direct", "eval_mount", "eval_download")
	outputTypes = set("", "uri_folder", "uri_file", "mlflow_model", "custom_model")
	outputModes = set("", "rw_mount", "upload", "direct")
)

func set(vals ...string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vals {
		m[v] = true
	}
	return m
}

func oneOf(m map[string]bool) string {
	var vals []string
	for v := range m {
		if v != "" {
			vals = append(vals, v)
		}
	}
	sort.Strings(vals)
	return strings.Join(vals, ", ")
}

// Validate checks the job and returns every problem as Errors. It sets
// type to "command" when it is missing.
func (j *Job) Validate() error {
	var e errs
	switch j.Type {
	case "":
		j.Type = "command"
	case "command":
	case "pipeline", "sweep", "spark", "automl":
		e.add("type", 0, "%s jobs are not supported yet; only command jobs are", j.Type)
	default:
		e.add("type", 0, "must be command, got %q", j.Type)
	}
	if strings.TrimSpace(j.Command) == "" {
		e.add("command", 0, "is required: the shell command the job runs, e.g. `python train.py`")
	}
	if j.Name != "" && !jobNameRe.MatchString(j.Name) {
		e.add("name", 0, "%q is not a valid job name: use 1-255 letters, digits, '_' or '-', starting with a letter or digit", j.Name)
	}
	if c := j.ComputeName(); c != "" && !computeRe.MatchString(c) {
		e.add("compute", 0, "%q is not a compute target name (2-32 letters, digits, '-' or '_', starting with a letter)", j.Compute)
	}
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in := j.Inputs[name]
		f := "inputs." + name
		if !identRe.MatchString(name) {
			e.add(f, 0, "input names must be identifiers (letters, digits, '_')")
		}
		if in.IsLiteral() {
			continue
		}
		if !inputTypes[in.Type] {
			e.add(f+".type", 0, "must be one of %s, got %q", oneOf(inputTypes), in.Type)
		}
		if strings.TrimSpace(in.Path) == "" {
			e.add(f+".path", 0, "a data input needs a path")
		}
		if !inputModes[in.Mode] {
			e.add(f+".mode", 0, "must be one of %s, got %q", oneOf(inputModes), in.Mode)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(j.Outputs)) {
		out := j.Outputs[name]
		f := "outputs." + name
		if !identRe.MatchString(name) {
			e.add(f, 0, "output names must be identifiers (letters, digits, '_')")
		}
		if !outputTypes[out.Type] {
			e.add(f+".type", 0, "must be one of %s, got %q", oneOf(outputTypes), out.Type)
		}
		if !outputModes[out.Mode] {
			e.add(f+".mode", 0, "must be one of %s, got %q", oneOf(outputModes), out.Mode)
		}
	}
	for _, m := range exprRe.FindAllStringSubmatch(j.Command, -1) {
		ref := refExprRe.FindStringSubmatch(m[1])
		switch {
		case ref == nil:
			e.add("command", 0, "${{%s}} is not supported; use ${{inputs.NAME}} or ${{outputs.NAME}}", m[1])
		case ref[1] == "inputs":
			if _, ok := j.Inputs[ref[2]]; !ok {
				e.add("command", 0, "${{inputs.%s}} refers to an input the job does not declare (inputs: %s)", ref[2], listOrNone(slices.Sorted(maps.Keys(j.Inputs))))
			}
		default:
			if _, ok := j.Outputs[ref[2]]; !ok {
				e.add("command", 0, "${{outputs.%s}} refers to an output the job does not declare (outputs: %s)", ref[2], listOrNone(slices.Sorted(maps.Keys(j.Outputs))))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(j.EnvironmentVariables)) {
		f := "environment_variables." + k
		if !identRe.MatchString(k) {
			e.add(f, 0, "is not a valid variable name (letters, digits, '_', not starting with a digit)")
		} else if strings.HasPrefix(k, "FERRY_") {
			e.add(f, 0, "FERRY_ variables are set by Ferry; pick another name")
		}
	}
	if j.Limits != nil && j.Limits.Timeout < 0 {
		e.add("limits.timeout", 0, "must be a number of seconds ≥ 0, got %d", j.Limits.Timeout)
	}
	if r := j.Resources; r != nil {
		if r.InstanceCount < 0 {
			e.add("resources.instance_count", 0, "must be ≥ 1, got %d", r.InstanceCount)
		}
		if r.ShmSize != "" && !shmRe.MatchString(r.ShmSize) {
			e.add("resources.shm_size", 0, "must be a size like 2g or 512m, got %q", r.ShmSize)
		}
	}
	if d := j.Distribution; d != nil {
		switch d.Type {
		case "pytorch", "mpi":
			if d.ParameterServerCount != 0 || d.WorkerCount != 0 {
				e.add("distribution", 0, "parameter_server_count and worker_count apply to tensorflow only")
			}
		case "tensorflow":
			if d.ProcessCountPerInstance != 0 {
				e.add("distribution.process_count_per_instance", 0, "applies to pytorch and mpi only; tensorflow uses worker_count")
			}
		default:
			e.add("distribution.type", 0, "must be pytorch, mpi or tensorflow, got %q", d.Type)
		}
		if d.ProcessCountPerInstance < 0 || d.ParameterServerCount < 0 || d.WorkerCount < 0 {
			e.add("distribution", 0, "counts must be ≥ 0")
		}
	}
	serviceTypes := set("jupyter_lab", "ssh", "tensor_board", "vs_code", "custom")
	for _, name := range slices.Sorted(maps.Keys(j.Services)) {
		s := j.Services[name]
		if !serviceTypes[s.Type] {
			e.add("services."+name+".type", 0, "must be one of %s, got %q", oneOf(serviceTypes), s.Type)
		}
		if s.Port < 0 || s.Port > 65535 {
			e.add("services."+name+".port", 0, "must be a port number, got %d", s.Port)
		}
	}
	if q := j.QueueSettings; q != nil {
		if tiers := set("", "spot", "basic", "standard", "premium"); !tiers[q.JobTier] {
			e.add("queue_settings.job_tier", 0, "must be one of %s, got %q", oneOf(tiers), q.JobTier)
		}
		if prios := set("", "low", "medium", "high"); !prios[q.Priority] {
			e.add("queue_settings.priority", 0, "must be one of %s, got %q", oneOf(prios), q.Priority)
		}
	}
	if id := j.Identity; id != nil {
		if types := set("user_identity", "managed", "aml_token"); !types[id.Type] {
			e.add("identity.type", 0, "must be one of %s, got %q", oneOf(types), id.Type)
		}
	}
	if env := j.Environment; env != nil {
		validateEnvironment(env, &e)
	}
	return e.err()
}

func validateEnvironment(env *Environment, e *errs) {
	if env.Ref != "" {
		if !envRefRe.MatchString(env.Ref) {
			e.add("environment", 0, "%q is not an environment reference; write azureml:NAME:VERSION, NAME:VERSION or NAME@latest", env.Ref)
		}
		return
	}
	kinds := 0
	for _, set := range []bool{env.Image != "", env.Build != nil, env.Python != nil, env.UserManaged} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds == 0 && env.CondaFile == "":
		e.add("environment", 0, "give one of image, build, conda_file, python or user_managed: true")
	case kinds > 1:
		e.add("environment", 0, "give only one of image, build, python or user_managed")
	}
	if env.CondaFile != "" && (env.Build != nil || env.Python != nil || env.UserManaged) {
		e.add("environment.conda_file", 0, "goes alone or with image, not with build, python or user_managed")
	}
	if env.Build != nil && strings.TrimSpace(env.Build.Path) == "" {
		e.add("environment.build.path", 0, "a build needs the path of its context folder")
	}
	if env.Python != nil && strings.TrimSpace(env.Python.Requirements) == "" {
		e.add("environment.python.requirements", 0, "a python environment needs a requirements file")
	}
	if env.InterpreterPath != "" && !env.UserManaged {
		e.add("environment.interpreter_path", 0, "applies only with user_managed: true")
	}
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
