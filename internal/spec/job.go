package spec

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

const jobEmptyHint = "a command job needs at least `command:`, e.g. command: python train.py"

// ParseJob reads an Azure ML CLI v2 command job file. Decoding is strict:
// unknown fields, values of the wrong kind and invalid YAML are errors that
// name the field and its line. The job is then validated; a missing type is
// set to "command". Every error is an Errors.
func ParseJob(data []byte) (*Job, error) {
	return ParseJobWithSet(data, nil)
}

// ParseJobWithSet is ParseJob with `--set path=value` overrides applied to
// the file before it is decoded, in order. A path is dotted field names
// (limits.timeout, environment_variables.FOO, inputs.epochs); mappings on
// the way are created as needed. The value is read as a YAML scalar, so
// `limits.timeout=30` is a number and an empty value is null. With sets, an
// empty file is allowed: the job is made from the sets alone.
func ParseJobWithSet(data []byte, sets []string) (*Job, error) {
	j, root, err := parseYAML[Job](data, sets, "job", jobEmptyHint, jobTypeFirst)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	if err := j.Validate(); err != nil {
		addLines(err.(Errors), root)
		noteSets(err, sets)
		return nil, err
	}
	return j, nil
}

// noteSets adds to each problem with a field that a --set gave which --set
// that was, since the file does not show the value.
func noteSets(err error, sets []string) {
	es, _ := err.(Errors)
	for _, e := range es {
		for _, s := range sets {
			path, _, _ := strings.Cut(s, "=")
			path = strings.TrimSpace(path)
			if path != "" && (e.Field == path || strings.HasPrefix(e.Field, path+".")) {
				e.Message += fmt.Sprintf(" (from --set %s)", s)
			}
		}
	}
}

// DecodeJobJSON reads a job from JSON, the REST API's form: the same fields
// as the YAML file, unknown fields refused. Inputs and environments may be
// written in their short forms (a plain string, number or boolean for a
// literal input; a plain string for an environment reference) as well as
// in the objects that json.Marshal writes. The job is then validated.
func DecodeJobJSON(data []byte) (*Job, error) {
	j, root, err := decodeJSON[Job](data, "job")
	if err != nil {
		return nil, err
	}
	if err := j.Validate(); err != nil {
		addLines(err.(Errors), root)
		return nil, err
	}
	return j, nil
}

// jobTypeFirst reports a job type other than command on its own: the
// fields of a pipeline or sweep job would otherwise each be reported as
// unknown, burying the one problem that matters.
func jobTypeFirst(root *yaml.Node) *FieldError {
	if f := child(root, "flow"); f != nil && child(root, "type") == nil && child(root, "command") == nil {
		// Prompt flow's run files (flow: ./dir) sit beside Azure's jobs.
		return &FieldError{Field: "flow", Line: f.Line, Message: "this is a prompt flow run file (flow:), not an Azure ML job; Ferry does not run prompt flows: write a command job that runs the flow (pf run create) instead"}
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "type" || v.Kind != yaml.ScalarNode || isNull(v) || v.Value == "" {
			continue
		}
		if msg := typeProblem(v.Value); msg != "" {
			return &FieldError{Field: "type", Line: k.Line, Message: msg}
		}
	}
	return nil
}

// IsLiteral reports whether the input is a plain value rather than data.
func (in Input) IsLiteral() bool { return in.Value != nil }

// ComputeName is the name of the job's compute target without the
// azureml: prefix that Azure ML files carry; "" (no compute) stays "".
func (j *Job) ComputeName() string { return strings.TrimPrefix(j.Compute, "azureml:") }

// Clone returns a deep copy of the job. It panics if free-form properties
// were set in code to something JSON cannot encode, which no parser returns.
func (j *Job) Clone() *Job {
	if j == nil {
		return nil
	}
	data, err := json.Marshal(j)
	if err != nil {
		// Only free-form properties could fail to encode, and only when
		// set in code to something JSON cannot hold (a channel, NaN).
		panic(fmt.Sprintf("spec: clone job: %v", err))
	}
	var c Job
	if err := json.Unmarshal(data, &c); err != nil {
		panic(fmt.Sprintf("spec: clone job: %v", err))
	}
	return &c
}

// RefParts splits the reference Ref into the environment's name and
// version, or reports latest for `name@latest` and a registry's
// labels/latest; ok is false when Ref is not a reference that
// ParseEnvironmentRef reads.
func (e *Environment) RefParts() (name, version string, latest bool, ok bool) {
	r, err := ParseEnvironmentRef(e.Ref)
	if err != nil {
		return "", "", false, false
	}
	return r.Name, r.Version, r.Latest, true
}

var (
	jobNameRe    = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$`)
	identRe      = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
	computeRefRe = lazyRegexp(`^[A-Za-z0-9_-]{2,32}$`)
	exprRe       = lazyRegexp(`\$\{\{(.*?)\}\}`)
	refExprRe    = lazyRegexp(`^(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)$`)
	shmRe        = lazyRegexp(`^[0-9]+([bkmgBKMG]|[kmgKMG][bB])?$`)
	nodesRe      = lazyRegexp(`^(all|[0-9]+)$`)

	inputTypes   = []string{"uri_file", "uri_folder", "mltable", "mlflow_model", "custom_model", "triton_model"}
	inputModes   = []string{"ro_mount", "download", "direct", "rw_mount", "eval_mount", "eval_download", "mount"}
	outputTypes  = []string{"uri_folder", "uri_file", "mlflow_model", "custom_model"}
	outputModes  = []string{"rw_mount", "upload", "direct", "mount"}
	distTypes    = []string{"pytorch", "mpi", "tensorflow"}
	serviceTypes = []string{"jupyter_lab", "ssh", "tensor_board", "vs_code", "custom"}
	jobTiers     = []string{"spot", "basic", "standard", "premium"}
	priorities   = []string{"low", "medium", "high"}
	identities   = []string{"user_identity", "managed", "aml_token"}
)

// checkEnvironmentVariables checks a spec's environment_variables: names
// a shell takes, none of Ferry's own, no NUL in a value.
func checkEnvironmentVariables(es *Errors, vars map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		f := "environment_variables." + k
		switch {
		case !identRe().MatchString(k):
			es.add(f, "%s is not a valid variable name: use letters, digits and '_', not starting with a digit", quote(k))
		case strings.HasPrefix(k, "FERRY_"):
			es.add(f, "names starting with FERRY_ are reserved for the variables Ferry sets; pick another name")
		}
		if strings.ContainsRune(vars[k], 0) {
			es.add(f, "the value must not contain a NUL character")
		}
	}
}

// oneOf checks that v is one of allowed (or empty, when optional).
func oneOf(es *Errors, field, v string, optional bool, allowed []string) {
	if (v == "" && optional) || slices.Contains(allowed, v) {
		return
	}
	if v == "" {
		es.add(field, "is required: one of %s", joinOr(allowed))
		return
	}
	es.add(field, "must be one of %s, got %s", joinOr(allowed), quote(v))
}

func joinOr(names []string) string {
	if len(names) < 2 {
		return joinNames(names)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Validate checks the job against every rule Ferry has for command jobs and
// returns all the problems as Errors, or nil. A missing type is set to
// "command", Azure ML's only type of standalone job that Ferry runs.
func (j *Job) Validate() error {
	if j == nil {
		return Errors{{Message: "the job is missing"}}
	}
	var es Errors
	if j.Type == "" {
		j.Type = "command"
	}
	if j.Type == "sweep" {
		return j.validateSweep()
	}
	if msg := typeProblem(j.Type); msg != "" {
		es.add("type", "%s", msg)
	}
	j.refuseSweepFields(&es)
	if j.Name != "" && !jobNameRe().MatchString(j.Name) {
		es.add("name", "%s is not a valid job name: use 1 to 255 letters, digits, '_' or '-', starting with a letter or digit", quote(j.Name))
	}
	for _, k := range slices.Sorted(maps.Keys(j.Tags)) {
		if k == "" {
			es.add("tags", "a tag needs a name")
		}
	}
	j.validateCommand(&es)
	j.validateCompute(&es)
	j.validateIO(&es)
	checkEnvironmentVariables(&es, j.EnvironmentVariables)
	j.checkBounds(&es)
	if r := j.Resources; r != nil {
		if r.ShmSize != "" && !shmRe().MatchString(r.ShmSize) {
			es.add("resources.shm_size", "must be a size such as 2g, 512m or 1024k, got %s", quote(r.ShmSize))
		}
	}
	j.validateDistribution(&es)
	for _, name := range slices.Sorted(maps.Keys(j.Services)) {
		s, f := j.Services[name], "services."+name
		if name == "" {
			es.add("services", "a service needs a name")
		}
		oneOf(&es, f+".type", s.Type, false, serviceTypes)
		if s.Port < 0 || s.Port > 65535 {
			es.add(f+".port", "must be a port number from 1 to 65535, got %d", s.Port)
		}
		if s.Nodes != "" && !nodesRe().MatchString(s.Nodes) {
			es.add(f+".nodes", "must be all or a node index, got %s", quote(s.Nodes))
		}
	}
	if q := j.QueueSettings; q != nil {
		oneOf(&es, "queue_settings.job_tier", q.JobTier, true, jobTiers)
		oneOf(&es, "queue_settings.priority", q.Priority, true, priorities)
	}
	if id := j.Identity; id != nil {
		oneOf(&es, "identity.type", id.Type, false, identities)
		if id.Type != "managed" && (id.ClientID != "" || id.ObjectID != "" || id.MSIResourceID != "") {
			es.add("identity", "client_id, object_id and msi_resource_id apply only to type managed")
		}
		if id.PrincipalID != "" || id.TenantID != "" || len(id.UserAssignedIdentities) > 0 {
			es.add("identity", "principal_id, tenant_id and user_assigned_identities belong to an endpoint's identity; a job's managed identity takes client_id, object_id or msi_resource_id")
		}
	}
	if j.Environment != nil {
		j.Environment.validate(&es, "environment")
	}
	return es.err()
}

// typeProblem says what is wrong with a job type, or "" when nothing is.
func typeProblem(t string) string {
	switch t {
	case "command", "sweep":
		return ""
	case "pipeline":
		return "a pipeline job is read by ParsePipelineJob and submitted to POST /v1/pipeline-jobs (`ferry job create -f` does both)"
	case "spark", "automl", "parallel":
		return fmt.Sprintf("only command, sweep and pipeline jobs are supported; %s jobs are not supported yet: %s", t, otherKindHint(t))
	}
	return fmt.Sprintf("must be command, sweep or pipeline, got %s", quote(t))
}

// otherKindHint says why Ferry does not run a kind of Azure job, step or
// component, and what to write instead.
func otherKindHint(t string) string {
	switch t {
	case "automl":
		return "AutoML's model search is Azure's service, not a command Ferry can run; train with a command job, or search with a sweep job"
	case "spark":
		return "Ferry has no Spark compute; run PySpark in local mode in a command job (pip install pyspark)"
	case "parallel":
		return "for batch scoring use a batch endpoint (ferry batch-deployment create -f), which spreads mini-batches over nodes and workers"
	case "import", "data_transfer":
		return "Ferry does not copy from external databases or stores; fetch the data in a command step, or register it with ferry data create"
	}
	return "Ferry runs command jobs and components, sweeps and pipelines"
}

// validateCommand checks the command and its ${{...}} expressions.
func (j *Job) validateCommand(es *Errors) {
	if strings.TrimSpace(j.Command) == "" {
		es.add("command", "is required: the shell command the job runs, e.g. python train.py --epochs ${{inputs.epochs}}")
		return
	}
	if strings.ContainsRune(j.Command, 0) {
		es.add("command", "must not contain a NUL character")
	}
	for _, m := range exprRe().FindAllStringSubmatch(j.Command, -1) {
		expr := strings.TrimSpace(m[1])
		ref := refExprRe().FindStringSubmatch(expr)
		switch {
		case ref == nil:
			es.add("command", "%s is not supported; a command may use only ${{inputs.NAME}} and ${{outputs.NAME}}", quote(m[0]))
		case ref[1] == "inputs":
			if _, ok := j.Inputs[ref[2]]; !ok {
				es.add("command", "%s refers to input %q, which the job does not declare; %s", m[0], ref[2], declared("inputs", j.Inputs))
			}
		default:
			if _, ok := j.Outputs[ref[2]]; !ok {
				es.add("command", "%s refers to output %q, which the job does not declare; %s", m[0], ref[2], declared("outputs", j.Outputs))
			}
		}
	}
	if strings.Contains(exprRe().ReplaceAllString(j.Command, ""), "${{") {
		es.add("command", "has a ${{ without its closing }}")
	}
}

// declared lists the names of a job's inputs or outputs for messages.
func declared[V any](what string, m map[string]V) string {
	if len(m) == 0 {
		return fmt.Sprintf("it declares no %s; add it under %s:", what, what)
	}
	return fmt.Sprintf("declared %s: %s", what, joinNames(slices.Sorted(maps.Keys(m))))
}

// validateCompute checks the compute reference: "" (serverless or the
// server's default), local, NAME or azureml:NAME.
func (j *Job) validateCompute(es *Errors) {
	if j.Compute == "" {
		return
	}
	if name := j.ComputeName(); !computeRefRe().MatchString(name) {
		es.add("compute", "%s is not a compute target: write local, the target's name (2 to 32 letters, digits, '-' or '_') or azureml:NAME", quote(j.Compute))
	}
}

func (j *Job) validateIO(es *Errors) {
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		in, f := j.Inputs[name], "inputs."+name
		if !identRe().MatchString(name) {
			es.add(f, "%s is not a valid input name: use letters, digits and '_', not starting with a digit", quote(name))
		}
		if in.IsLiteral() {
			if in.Type != "" || in.Path != "" || in.Mode != "" {
				es.add(f, "a literal input has only a value; remove type, path and mode, or remove value to make it a data input")
			}
			continue
		}
		if in.Type == "" && in.Path == "" && in.Mode == "" {
			es.add(f, "give a value (%s: 5) or a data input with type and path", name)
			continue
		}
		oneOf(es, f+".type", in.Type, true, inputTypes)
		if strings.TrimSpace(in.Path) == "" {
			es.add(f+".path", "a data input needs a path: a local file or folder, or a URI")
		} else if IsDataRef(in.Path) {
			if _, _, err := ParseDataRef(in.Path); err != nil {
				es.add(f+".path", "%v", err)
			}
		} else if _, err := ParseDataURI(in.Path); err != nil {
			es.add(f+".path", "%v", err)
		}
		oneOf(es, f+".mode", in.Mode, true, inputModes)
	}
	for _, name := range slices.Sorted(maps.Keys(j.Outputs)) {
		out, f := j.Outputs[name], "outputs."+name
		if !identRe().MatchString(name) {
			es.add(f, "%s is not a valid output name: use letters, digits and '_', not starting with a digit", quote(name))
		}
		oneOf(es, f+".type", out.Type, true, outputTypes)
		oneOf(es, f+".mode", out.Mode, true, outputModes)
		validateOutputAsset(es, f, out.Name, out.Version)
	}
}

func (j *Job) validateDistribution(es *Errors) {
	d := j.Distribution
	if d == nil {
		return
	}
	oneOf(es, "distribution.type", d.Type, false, distTypes)
	switch d.Type {
	case "pytorch", "mpi":
		if d.ParameterServerCount != 0 {
			es.add("distribution.parameter_server_count", "applies only to type tensorflow; %s uses process_count_per_instance", d.Type)
		}
		if d.WorkerCount != 0 {
			es.add("distribution.worker_count", "applies only to type tensorflow; %s uses process_count_per_instance", d.Type)
		}
	case "tensorflow":
		if d.ProcessCountPerInstance != 0 {
			es.add("distribution.process_count_per_instance", "applies only to types pytorch and mpi; tensorflow uses worker_count and parameter_server_count")
		}
	}
}

// validate checks an environment found at field f.
func (e *Environment) validate(es *Errors, f string) {
	if e.Ref != "" {
		if !e.refOnly() {
			es.add(f, "a reference (%s) stands alone; remove the other fields, or remove ref to define the environment inline", e.Ref)
		}
		if strings.HasPrefix(e.Ref, EnvironmentFilePrefix) {
			if e.FilePath() == "" {
				es.add(f, "file: needs the path of an environment file, e.g. file:./env.yml")
			}
			return
		}
		if _, err := ParseEnvironmentRef(e.Ref); err != nil {
			es.add(f, "%v", err)
		}
		return
	}
	var kinds []string
	if e.Image != "" {
		kinds = append(kinds, "image")
	}
	if e.Build != nil {
		kinds = append(kinds, "build")
	}
	if e.Python != nil {
		kinds = append(kinds, "python")
	}
	if e.UserManaged {
		kinds = append(kinds, "user_managed")
	}
	switch {
	case len(kinds) == 0 && e.CondaFile == "":
		es.add(f, "say how to make the environment: image, build, python, conda_file or user_managed: true")
	case len(kinds) > 1:
		es.add(f, "use only one of image, build, python and user_managed; this one has %s", joinNames(kinds))
	}
	if e.CondaFile != "" && len(kinds) > 0 && e.Image == "" {
		es.add(f+".conda_file", "goes on its own or with image, not with %s", joinNames(kinds))
	}
	if e.Build != nil && strings.TrimSpace(e.Build.Path) == "" {
		es.add(f+".build.path", "a build needs path, the folder with its Dockerfile (the build context)")
	}
	if e.Python != nil && strings.TrimSpace(e.Python.Requirements) == "" {
		es.add(f+".python.requirements", "a python environment needs requirements, the path of its requirements.txt")
	}
	if e.InterpreterPath != "" && !e.UserManaged {
		es.add(f+".interpreter_path", "applies only with user_managed: true")
	}
}
