package spec

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// BatchEndpoint is an Azure ML CLI v2 batch endpoint file
// (batchEndpoint.schema.json): a name, and the deployment that scores
// when an invocation names none.
type BatchEndpoint struct {
	Schema      string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name        string            `yaml:"name,omitempty" json:"name,omitempty"`
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags        map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties  map[string]string `yaml:"properties,omitempty" json:"properties,omitempty"`
	// AuthMode is aad_token, the only mode Azure has for batch endpoints;
	// Ferry invokes with its own tokens whatever it says.
	AuthMode string         `yaml:"auth_mode,omitempty" json:"auth_mode,omitempty"`
	Defaults *BatchDefaults `yaml:"defaults,omitempty" json:"defaults,omitempty"`
	// Accepted and shown; they mean nothing here.
	Identity *Identity `yaml:"identity,omitempty" json:"identity,omitempty"`
}

// BatchDefaults names the deployment an invocation without one goes to.
type BatchDefaults struct {
	DeploymentName string `yaml:"deployment_name,omitempty" json:"deployment_name,omitempty"`
}

// BatchDeployment is an Azure ML CLI v2 model batch deployment file
// (modelBatchDeployment.schema.json): the scoring script, model and
// environment a batch job runs, on how many nodes and workers, and how it
// treats failures. Azure's files give the scoring settings at the top
// level or, in newer files, under settings:; the parser takes both and
// keeps them at the top level.
type BatchDeployment struct {
	Schema            string             `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name              string             `yaml:"name,omitempty" json:"name,omitempty"`
	EndpointName      string             `yaml:"endpoint_name,omitempty" json:"endpoint_name,omitempty"`
	Type              string             `yaml:"type,omitempty" json:"type,omitempty"`
	Description       string             `yaml:"description,omitempty" json:"description,omitempty"`
	Tags              map[string]string  `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties        map[string]string  `yaml:"properties,omitempty" json:"properties,omitempty"`
	Model             *ModelRef          `yaml:"model,omitempty" json:"model,omitempty"`
	CodeConfiguration *CodeConfiguration `yaml:"code_configuration,omitempty" json:"code_configuration,omitempty"`
	Environment       *Environment       `yaml:"environment,omitempty" json:"environment,omitempty"`
	// Compute is the cluster its jobs run on (azureml: prefix allowed).
	Compute   string          `yaml:"compute,omitempty" json:"compute,omitempty"`
	Resources *BatchResources `yaml:"resources,omitempty" json:"resources,omitempty"`
	// The scoring settings (BatchSettings says what each means).
	MaxConcurrencyPerInstance int               `yaml:"max_concurrency_per_instance,omitempty" json:"max_concurrency_per_instance,omitempty"`
	MiniBatchSize             int               `yaml:"mini_batch_size,omitempty" json:"mini_batch_size,omitempty"`
	RetrySettings             *RetrySettings    `yaml:"retry_settings,omitempty" json:"retry_settings,omitempty"`
	ErrorThreshold            *int              `yaml:"error_threshold,omitempty" json:"error_threshold,omitempty"`
	LoggingLevel              string            `yaml:"logging_level,omitempty" json:"logging_level,omitempty"`
	OutputAction              string            `yaml:"output_action,omitempty" json:"output_action,omitempty"`
	OutputFileName            string            `yaml:"output_file_name,omitempty" json:"output_file_name,omitempty"`
	EnvironmentVariables      map[string]string `yaml:"environment_variables,omitempty" json:"environment_variables,omitempty"`
	// Settings is where newer files put BatchSettings; empty after
	// parsing, its fields moved to the top level.
	Settings *BatchSettings `yaml:"settings,omitempty" json:"settings,omitempty"`
}

// BatchResources are the nodes a batch job takes.
type BatchResources struct {
	InstanceCount int            `yaml:"instance_count,omitempty" json:"instance_count,omitempty"`
	InstanceType  string         `yaml:"instance_type,omitempty" json:"instance_type,omitempty"`
	Properties    map[string]any `yaml:"properties,omitempty" json:"properties,omitempty"`
}

// BatchSettings say how a batch job scores: mini-batches of
// MiniBatchSize files, MaxConcurrencyPerInstance workers per node, each
// mini-batch retried up to RetrySettings.MaxRetries times, the job failed
// once more than ErrorThreshold files failed (-1: never), and what it
// writes (OutputAction, OutputFileName).
type BatchSettings struct {
	MaxConcurrencyPerInstance int               `yaml:"max_concurrency_per_instance,omitempty" json:"max_concurrency_per_instance,omitempty"`
	MiniBatchSize             int               `yaml:"mini_batch_size,omitempty" json:"mini_batch_size,omitempty"`
	RetrySettings             *RetrySettings    `yaml:"retry_settings,omitempty" json:"retry_settings,omitempty"`
	ErrorThreshold            *int              `yaml:"error_threshold,omitempty" json:"error_threshold,omitempty"`
	LoggingLevel              string            `yaml:"logging_level,omitempty" json:"logging_level,omitempty"`
	OutputAction              string            `yaml:"output_action,omitempty" json:"output_action,omitempty"`
	OutputFileName            string            `yaml:"output_file_name,omitempty" json:"output_file_name,omitempty"`
	EnvironmentVariables      map[string]string `yaml:"environment_variables,omitempty" json:"environment_variables,omitempty"`
}

// RetrySettings bound one mini-batch: how often it is tried again after
// it failed or ran past Timeout seconds.
type RetrySettings struct {
	MaxRetries *int `yaml:"max_retries,omitempty" json:"max_retries,omitempty"`
	Timeout    int  `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// Azure's documented defaults for a batch deployment, and
// Ferry's bounds.
const (
	DefaultMiniBatchSize       = 10
	DefaultBatchMaxRetries     = 3
	DefaultBatchTimeout        = 30
	DefaultBatchOutputFileName = "predictions.csv"
	maxBatchConcurrency        = 256
	maxMiniBatchSize           = 100000
	maxBatchRetries            = 100
	maxBatchTimeout            = 7 * 24 * 3600
)

// BatchOutputActions and BatchLoggingLevels are the values Azure takes.
var (
	BatchOutputActions = []string{"append_row", "summary_only"}
	BatchLoggingLevels = []string{"debug", "info", "warning", "error", "critical"}
)

// ParseBatchEndpoint reads a batch endpoint file strictly (see ParseJob),
// with `--set path=value` overrides, validates it and fills in its
// defaults.
func ParseBatchEndpoint(data []byte, sets []string) (*BatchEndpoint, error) {
	e, root, err := parseYAML[BatchEndpoint](data, sets, "batch endpoint", "a batch endpoint needs at least a name, e.g. name: my-batch-endpoint", nil)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	return finishBatchEndpoint(e, root, sets)
}

// DecodeBatchEndpointJSON reads a batch endpoint from strict JSON (the
// REST API's form), validates it and fills in its defaults.
func DecodeBatchEndpointJSON(data []byte) (*BatchEndpoint, error) {
	e, root, err := decodeJSON[BatchEndpoint](data, "batch endpoint")
	if err != nil {
		return nil, err
	}
	return finishBatchEndpoint(e, root, nil)
}

func finishBatchEndpoint(e *BatchEndpoint, root *yaml.Node, sets []string) (*BatchEndpoint, error) {
	if es := e.validate(); len(es) > 0 {
		addLines(es, root)
		noteSets(es, sets)
		return nil, es
	}
	if e.AuthMode == "" {
		e.AuthMode = "aad_token"
	}
	return e, nil
}

// Validate checks a batch endpoint as its parser does.
func (e *BatchEndpoint) Validate() error { return e.validate().err() }

func (e *BatchEndpoint) validate() Errors {
	var es Errors
	checkServingName(&es, "name", e.Name, true)
	oneOf(&es, "auth_mode", e.AuthMode, true, []string{"aad_token", "key"})
	if e.Defaults != nil && e.Defaults.DeploymentName != "" {
		checkServingName(&es, "defaults.deployment_name", e.Defaults.DeploymentName, true)
	}
	return es
}

// DefaultDeployment is the deployment the endpoint's defaults name, or "".
func (e *BatchEndpoint) DefaultDeployment() string {
	if e.Defaults == nil {
		return ""
	}
	return e.Defaults.DeploymentName
}

// ParseBatchDeployment reads a model batch deployment file strictly (see
// ParseJob), with `--set path=value` overrides, validates it and fills in
// Azure's defaults.
func ParseBatchDeployment(data []byte, sets []string) (*BatchDeployment, error) {
	d, root, err := parseYAML[BatchDeployment](data, sets, "batch deployment", "a batch deployment needs at least name, endpoint_name, compute and code_configuration", batchTypeFirst)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	return finishBatchDeployment(d, root, sets)
}

// DecodeBatchDeploymentJSON reads a batch deployment from strict JSON (the
// REST API's form), validates it and fills in its defaults.
func DecodeBatchDeploymentJSON(data []byte) (*BatchDeployment, error) {
	d, root, err := decodeJSON[BatchDeployment](data, "batch deployment")
	if err != nil {
		return nil, err
	}
	return finishBatchDeployment(d, root, nil)
}

// batchTypeFirst reports a pipeline deployment on its own, before its
// other fields are each reported as unknown.
func batchTypeFirst(root *yaml.Node) *FieldError {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == "type" && v.Kind == yaml.ScalarNode && v.Value == "pipeline" {
			return &FieldError{Field: "type", Line: k.Line, Message: "pipeline batch deployments (pipelineComponentBatchDeployment) are not supported; use type: model with a scoring script"}
		}
	}
	return nil
}

func finishBatchDeployment(d *BatchDeployment, root *yaml.Node, sets []string) (*BatchDeployment, error) {
	es, lifted := d.liftSettings()
	for _, e := range d.validate() {
		// A problem of a field written under settings: names it there,
		// so that its line is found.
		if first, _, _ := strings.Cut(e.Field, "."); lifted[first] {
			e.Field = "settings." + e.Field
		}
		es = append(es, e)
	}
	if len(es) > 0 {
		addLines(es, root)
		noteSets(es, sets)
		return nil, es
	}
	d.ApplyDefaults()
	return d, nil
}

// liftSettings moves the fields of settings: to the top level and says
// which it moved; a field given in both places is an error.
func (d *BatchDeployment) liftSettings() (Errors, map[string]bool) {
	s := d.Settings
	if s == nil {
		return nil, nil
	}
	d.Settings = nil
	var es Errors
	lifted := map[string]bool{}
	top := d
	both := func(field string) { es.add("settings."+field, "is given at the top level too; give it once") }
	if s.MaxConcurrencyPerInstance != 0 {
		if top.MaxConcurrencyPerInstance != 0 {
			both("max_concurrency_per_instance")
		}
		top.MaxConcurrencyPerInstance = s.MaxConcurrencyPerInstance
		lifted["max_concurrency_per_instance"] = true
	}
	if s.MiniBatchSize != 0 {
		if top.MiniBatchSize != 0 {
			both("mini_batch_size")
		}
		top.MiniBatchSize = s.MiniBatchSize
		lifted["mini_batch_size"] = true
	}
	if s.RetrySettings != nil {
		if top.RetrySettings != nil {
			both("retry_settings")
		}
		top.RetrySettings = s.RetrySettings
		lifted["retry_settings"] = true
	}
	if s.ErrorThreshold != nil {
		if top.ErrorThreshold != nil {
			both("error_threshold")
		}
		top.ErrorThreshold = s.ErrorThreshold
		lifted["error_threshold"] = true
	}
	for _, f := range []struct {
		name     string
		from, to *string
	}{
		{"logging_level", &s.LoggingLevel, &top.LoggingLevel},
		{"output_action", &s.OutputAction, &top.OutputAction},
		{"output_file_name", &s.OutputFileName, &top.OutputFileName},
	} {
		if *f.from != "" {
			if *f.to != "" {
				both(f.name)
			}
			*f.to = *f.from
			lifted[f.name] = true
		}
	}
	if s.EnvironmentVariables != nil {
		if top.EnvironmentVariables != nil {
			both("environment_variables")
		}
		top.EnvironmentVariables = s.EnvironmentVariables
		lifted["environment_variables"] = true
	}
	return es, lifted
}

// Validate checks a batch deployment as its parser does.
func (d *BatchDeployment) Validate() error {
	if d.Settings != nil {
		return Errors{{Field: "settings", Message: "must be moved to the top level before validation (the parser does it)"}}
	}
	return d.validate().err()
}

func (d *BatchDeployment) validate() Errors {
	var es Errors
	checkServingName(&es, "name", d.Name, true)
	if d.EndpointName == "" {
		es.add("endpoint_name", "is required: the batch endpoint this deployment belongs to (or pass --endpoint-name)")
	} else {
		checkServingName(&es, "endpoint_name", d.EndpointName, true)
	}
	oneOf(&es, "type", d.Type, true, []string{"model"})
	if m := d.Model; m != nil {
		m.validate(&es, "model")
	}
	switch c := d.CodeConfiguration; {
	case c == nil && d.Model == nil:
		es.add("code_configuration", "is required: code (the folder of the scoring code) and scoring_script (the file in it that defines init() and run(mini_batch)); only an MLflow model is scored without one")
	case c == nil:
		// An MLflow model, scored by Ferry's own script (the workspace
		// checks the model's type).
	case strings.TrimSpace(c.ScoringScript) == "":
		es.add("code_configuration.scoring_script", "is required: the file, in code, that defines init() and run(mini_batch)")
	case strings.TrimSpace(c.Code) == "":
		es.add("code_configuration.code", "is required: the folder that holds %s", quote(c.ScoringScript))
	}
	if d.Environment != nil {
		d.Environment.validate(&es, "environment")
	}
	if strings.TrimSpace(strings.TrimPrefix(d.Compute, "azureml:")) == "" {
		es.add("compute", "is required: the compute its jobs run on, e.g. compute: azureml:cpu-cluster (ferry compute list)")
	}
	if r := d.Resources; r != nil && (r.InstanceCount < 0 || r.InstanceCount > maxReplicas) {
		es.add("resources.instance_count", "must be from 1 to %d nodes, got %d", maxReplicas, r.InstanceCount)
	}
	if n := d.MaxConcurrencyPerInstance; n < 0 || n > maxBatchConcurrency {
		es.add("max_concurrency_per_instance", "must be from 1 to %d workers per node, got %d", maxBatchConcurrency, n)
	}
	if n := d.MiniBatchSize; n < 0 || n > maxMiniBatchSize {
		es.add("mini_batch_size", "must be from 1 to %d files, got %d", maxMiniBatchSize, n)
	}
	if r := d.RetrySettings; r != nil {
		if r.MaxRetries != nil && (*r.MaxRetries < 0 || *r.MaxRetries > maxBatchRetries) {
			es.add("retry_settings.max_retries", "must be from 0 to %d, got %d", maxBatchRetries, *r.MaxRetries)
		}
		if r.Timeout < 0 || r.Timeout > maxBatchTimeout {
			es.add("retry_settings.timeout", "must be from 1 to %d seconds, got %d", maxBatchTimeout, r.Timeout)
		}
	}
	if t := d.ErrorThreshold; t != nil && *t < -1 {
		es.add("error_threshold", "must be -1 (no limit) or how many failed files to allow (0 or more), got %d", *t)
	}
	oneOf(&es, "logging_level", d.LoggingLevel, true, BatchLoggingLevels)
	oneOf(&es, "output_action", d.OutputAction, true, BatchOutputActions)
	if f := d.OutputFileName; f != "" && (strings.ContainsAny(f, "/\\\x00\n") || f == "." || f == ".." || len(f) > 255) {
		es.add("output_file_name", "%s must be a file name, without folders, such as predictions.csv", quote(shorten(f)))
	}
	checkEnvironmentVariables(&es, d.EnvironmentVariables)
	return es
}

// ApplyDefaults fills in what Azure fills in for a batch deployment.
func (d *BatchDeployment) ApplyDefaults() {
	if d.Type == "" {
		d.Type = "model"
	}
	if d.Resources == nil {
		d.Resources = &BatchResources{}
	}
	if d.Resources.InstanceCount == 0 {
		d.Resources.InstanceCount = 1
	}
	if d.MaxConcurrencyPerInstance == 0 {
		d.MaxConcurrencyPerInstance = 1
	}
	if d.MiniBatchSize == 0 {
		d.MiniBatchSize = DefaultMiniBatchSize
	}
	if d.RetrySettings == nil {
		d.RetrySettings = &RetrySettings{}
	}
	if d.RetrySettings.MaxRetries == nil {
		n := DefaultBatchMaxRetries
		d.RetrySettings.MaxRetries = &n
	}
	if d.RetrySettings.Timeout == 0 {
		d.RetrySettings.Timeout = DefaultBatchTimeout
	}
	if d.ErrorThreshold == nil {
		n := -1
		d.ErrorThreshold = &n
	}
	if d.LoggingLevel == "" {
		d.LoggingLevel = "info"
	}
	if d.OutputAction == "" {
		d.OutputAction = "append_row"
	}
	if d.OutputFileName == "" {
		d.OutputFileName = DefaultBatchOutputFileName
	}
}

// ComputeName is the deployment's compute without the azureml: prefix.
func (d *BatchDeployment) ComputeName() string { return strings.TrimPrefix(d.Compute, "azureml:") }
