package spec

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// OnlineEndpoint is an Azure ML CLI v2 managed online endpoint file
// (managedOnlineEndpoint.schema.json): a name with keys, and how its
// requests are split between its deployments.
type OnlineEndpoint struct {
	Schema      string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name        string            `yaml:"name,omitempty" json:"name,omitempty"`
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags        map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties  map[string]string `yaml:"properties,omitempty" json:"properties,omitempty"`
	// AuthMode is key (the default) or aml_token.
	AuthMode string `yaml:"auth_mode,omitempty" json:"auth_mode,omitempty"`
	// Traffic is the percent of live requests each deployment gets; they
	// sum to 100 or less.
	Traffic map[string]int `yaml:"traffic,omitempty" json:"traffic,omitempty"`
	// MirrorTraffic is the percent of live requests copied to a
	// deployment, whose answers are dropped (50 at most).
	MirrorTraffic map[string]int `yaml:"mirror_traffic,omitempty" json:"mirror_traffic,omitempty"`
	// Compute names a Kubernetes compute for a Kubernetes endpoint.
	Compute string `yaml:"compute,omitempty" json:"compute,omitempty"`
	// Accepted and shown; they mean nothing here (docs/endpoints.md).
	PublicNetworkAccess string    `yaml:"public_network_access,omitempty" json:"public_network_access,omitempty"`
	Identity            *Identity `yaml:"identity,omitempty" json:"identity,omitempty"`
}

// OnlineDeployment is an Azure ML CLI v2 managed online deployment file
// (managedOnlineDeployment.schema.json): a model, the code that scores
// with it, its environment, and the replicas that serve it.
type OnlineDeployment struct {
	Schema               string             `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name                 string             `yaml:"name,omitempty" json:"name,omitempty"`
	EndpointName         string             `yaml:"endpoint_name,omitempty" json:"endpoint_name,omitempty"`
	Description          string             `yaml:"description,omitempty" json:"description,omitempty"`
	Tags                 map[string]string  `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties           map[string]string  `yaml:"properties,omitempty" json:"properties,omitempty"`
	Model                *ModelRef          `yaml:"model,omitempty" json:"model,omitempty"`
	CodeConfiguration    *CodeConfiguration `yaml:"code_configuration,omitempty" json:"code_configuration,omitempty"`
	Environment          *Environment       `yaml:"environment,omitempty" json:"environment,omitempty"`
	InstanceType         string             `yaml:"instance_type,omitempty" json:"instance_type,omitempty"`
	InstanceCount        int                `yaml:"instance_count,omitempty" json:"instance_count,omitempty"`
	EnvironmentVariables map[string]string  `yaml:"environment_variables,omitempty" json:"environment_variables,omitempty"`
	RequestSettings      *RequestSettings   `yaml:"request_settings,omitempty" json:"request_settings,omitempty"`
	LivenessProbe        *Probe             `yaml:"liveness_probe,omitempty" json:"liveness_probe,omitempty"`
	ReadinessProbe       *Probe             `yaml:"readiness_probe,omitempty" json:"readiness_probe,omitempty"`
	ScaleSettings        *ScaleSettings     `yaml:"scale_settings,omitempty" json:"scale_settings,omitempty"`
	// Accepted and shown; they mean nothing here (docs/endpoints.md).
	AppInsightsEnabled        bool           `yaml:"app_insights_enabled,omitempty" json:"app_insights_enabled,omitempty"`
	EgressPublicNetworkAccess string         `yaml:"egress_public_network_access,omitempty" json:"egress_public_network_access,omitempty"`
	DataCollector             map[string]any `yaml:"data_collector,omitempty" json:"data_collector,omitempty"`
}

// ModelRef is a deployment's model: a reference to a registered model
// (Ref, written as a plain string: azureml:NAME:VERSION, NAME@latest) or
// an inline model (path, with an optional name and version).
type ModelRef struct {
	Ref         string `yaml:"ref,omitempty" json:"ref,omitempty"`
	Name        string `yaml:"name,omitempty" json:"name,omitempty"`
	Version     string `yaml:"version,omitempty" json:"version,omitempty"`
	Path        string `yaml:"path,omitempty" json:"path,omitempty"`
	Type        string `yaml:"type,omitempty" json:"type,omitempty"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
}

// CodeConfiguration is the folder of the scoring code and the script in
// it that defines init() and run().
type CodeConfiguration struct {
	Code          string `yaml:"code,omitempty" json:"code,omitempty"`
	ScoringScript string `yaml:"scoring_script,omitempty" json:"scoring_script,omitempty"`
}

// RequestSettings bound each request and each replica's load.
type RequestSettings struct {
	RequestTimeoutMS                 int `yaml:"request_timeout_ms,omitempty" json:"request_timeout_ms,omitempty"`
	MaxConcurrentRequestsPerInstance int `yaml:"max_concurrent_requests_per_instance,omitempty" json:"max_concurrent_requests_per_instance,omitempty"`
	MaxQueueWaitMS                   int `yaml:"max_queue_wait_ms,omitempty" json:"max_queue_wait_ms,omitempty"`
}

// Probe is a liveness or readiness probe of a replica; times in seconds.
type Probe struct {
	InitialDelay     *int `yaml:"initial_delay,omitempty" json:"initial_delay,omitempty"`
	Period           int  `yaml:"period,omitempty" json:"period,omitempty"`
	Timeout          int  `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	SuccessThreshold int  `yaml:"success_threshold,omitempty" json:"success_threshold,omitempty"`
	FailureThreshold int  `yaml:"failure_threshold,omitempty" json:"failure_threshold,omitempty"`
}

// ScaleSettings say how many replicas serve: instance_count always
// (type default), or between min_instances and max_instances by load
// (type target_utilization, as Azure's Kubernetes deployments have it).
// A min_instances of 0 scales to zero after ScaleToZeroAfter seconds
// without requests, a Ferry addition.
type ScaleSettings struct {
	Type                        string `yaml:"type,omitempty" json:"type,omitempty"`
	MinInstances                *int   `yaml:"min_instances,omitempty" json:"min_instances,omitempty"`
	MaxInstances                int    `yaml:"max_instances,omitempty" json:"max_instances,omitempty"`
	PollingInterval             int    `yaml:"polling_interval,omitempty" json:"polling_interval,omitempty"`
	TargetUtilizationPercentage int    `yaml:"target_utilization_percentage,omitempty" json:"target_utilization_percentage,omitempty"`
	ScaleToZeroAfter            int    `yaml:"scale_to_zero_after,omitempty" json:"scale_to_zero_after,omitempty"`
}

// Defaults Azure documents for a deployment.
const (
	DefaultRequestTimeoutMS = 5000
	MaxRequestTimeoutMS     = 180000
	DefaultMaxQueueWaitMS   = 500
	DefaultTargetPercent    = 70
	DefaultScaleToZeroAfter = 300
)

// ParseOnlineEndpoint reads an online endpoint file strictly (see
// ParseJob), with `--set path=value` overrides, validates it and fills
// in its defaults.
func ParseOnlineEndpoint(data []byte, sets []string) (*OnlineEndpoint, error) {
	e, root, err := parseYAML[OnlineEndpoint](data, sets, "online endpoint", "an endpoint needs at least a name, e.g. name: my-endpoint", nil)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	return finishEndpoint(e, root, sets)
}

// DecodeOnlineEndpointJSON reads an online endpoint from strict JSON (the
// REST API's form), validates it and fills in its defaults.
func DecodeOnlineEndpointJSON(data []byte) (*OnlineEndpoint, error) {
	e, root, err := decodeJSON[OnlineEndpoint](data, "online endpoint")
	if err != nil {
		return nil, err
	}
	return finishEndpoint(e, root, nil)
}

func finishEndpoint(e *OnlineEndpoint, root *yaml.Node, sets []string) (*OnlineEndpoint, error) {
	if es := e.validate(); len(es) > 0 {
		addLines(es, root)
		noteSets(es, sets)
		return nil, es
	}
	if e.AuthMode == "" {
		e.AuthMode = "key"
	}
	return e, nil
}

// Validate checks an endpoint as its parser does.
func (e *OnlineEndpoint) Validate() error {
	if es := e.validate(); len(es) > 0 {
		return es
	}
	return nil
}

// endpointNameRe is Azure's rule for endpoint and deployment names: a
// letter first, then letters, digits and hyphens, not ending in a hyphen.
var endpointNameRe = lazyRegexp(`^[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?$`)

var authModes = []string{"key", "aml_token"}

func (e *OnlineEndpoint) validate() Errors {
	var es Errors
	checkServingName(&es, "name", e.Name, true)
	switch e.AuthMode {
	case "", "key", "aml_token":
	case "aad_token":
		es.add("auth_mode", "aad_token (Microsoft Entra ID) is not available here; use key or aml_token")
	default:
		oneOf(&es, "auth_mode", e.AuthMode, true, authModes)
	}
	CheckTraffic(&es, "traffic", e.Traffic, 100)
	CheckTraffic(&es, "mirror_traffic", e.MirrorTraffic, 50)
	for _, d := range slices.Sorted(maps.Keys(e.MirrorTraffic)) {
		if e.Traffic[d] > 0 && e.MirrorTraffic[d] > 0 {
			es.add("mirror_traffic."+d, "deployment %s gets live traffic (%d%%); a deployment gets live or mirrored traffic, not both", d, e.Traffic[d])
		}
	}
	oneOf(&es, "public_network_access", e.PublicNetworkAccess, true, []string{"enabled", "disabled"})
	return es
}

// checkServingName checks an endpoint's or a deployment's name.
func checkServingName(es *Errors, field, name string, required bool) {
	switch {
	case name == "" && required:
		es.add(field, "is required: 3 to 32 letters, digits and hyphens, starting with a letter")
	case name == "":
	case len(name) < 3 || len(name) > 32:
		es.add(field, "must be 3 to 32 characters long, got %d (%s)", len(name), quote(shorten(name)))
	case !endpointNameRe().MatchString(name):
		es.add(field, "%s must start with a letter and hold only letters, digits and hyphens (not at the end)", quote(name))
	}
}

// CheckTraffic checks a traffic split: deployment names to whole percents,
// each 0 to most and together at most most.
func CheckTraffic(es *Errors, field string, t map[string]int, most int) {
	sum := 0
	for _, d := range slices.Sorted(maps.Keys(t)) {
		checkServingName(es, field+"."+d, d, true)
		if p := t[d]; p < 0 || p > most {
			es.add(field+"."+d, "must be a percent from 0 to %d, got %d", most, p)
		}
		sum += t[d]
	}
	if sum > most {
		es.add(field, "the percents add up to %d; they must add up to %d or less", sum, most)
	}
}

// ParseTraffic reads a traffic split as `az ml online-endpoint update
// --traffic` takes it: "blue=90 green=10" (spaces or commas between).
func ParseTraffic(s string) (map[string]int, error) {
	out := map[string]int{}
	for part := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
		name, pct, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%s is not DEPLOYMENT=PERCENT (write blue=90 green=10)", quote(shorten(part)))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("deployment %s is given twice", quote(name))
		}
		n, err := strconv.Atoi(strings.TrimSuffix(pct, "%"))
		if err != nil {
			return nil, fmt.Errorf("%s: %s is not a whole percent", quote(name), quote(shorten(pct)))
		}
		out[name] = n
	}
	return out, nil
}

// FormatTraffic writes a split as ParseTraffic reads it, by name.
func FormatTraffic(t map[string]int) string {
	var parts []string
	for _, d := range slices.Sorted(maps.Keys(t)) {
		parts = append(parts, d+"="+strconv.Itoa(t[d]))
	}
	return strings.Join(parts, " ")
}

// ParseOnlineDeployment reads an online deployment file strictly (see
// ParseJob), with `--set path=value` overrides, validates it and fills in
// its defaults.
func ParseOnlineDeployment(data []byte, sets []string) (*OnlineDeployment, error) {
	d, root, err := parseYAML[OnlineDeployment](data, sets, "online deployment", "a deployment needs at least name, endpoint_name and code_configuration", privateNetworkFirst)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	return finishDeployment(d, root, sets)
}

// DecodeOnlineDeploymentJSON reads an online deployment from strict JSON
// (the REST API's form), validates it and fills in its defaults.
func DecodeOnlineDeploymentJSON(data []byte) (*OnlineDeployment, error) {
	d, root, err := decodeJSON[OnlineDeployment](data, "online deployment")
	if err != nil {
		return nil, err
	}
	return finishDeployment(d, root, nil)
}

func finishDeployment(d *OnlineDeployment, root *yaml.Node, sets []string) (*OnlineDeployment, error) {
	if es := d.validate(); len(es) > 0 {
		addLines(es, root)
		noteSets(es, sets)
		return nil, es
	}
	d.ApplyDefaults()
	return d, nil
}

// SchemaKind says which kind of online deployment the file's $schema
// names: "kubernetes" (kubernetesOnlineDeployment), "managed"
// (managedOnlineDeployment) or "" (none, or another).
func (d *OnlineDeployment) SchemaKind() string {
	switch s := strings.ToLower(d.Schema); {
	case strings.Contains(s, "kubernetesonlinedeployment"):
		return "kubernetes"
	case strings.Contains(s, "managedonlinedeployment"):
		return "managed"
	}
	return ""
}

// Validate checks a deployment as its parser does.
func (d *OnlineDeployment) Validate() error {
	if es := d.validate(); len(es) > 0 {
		return es
	}
	return nil
}

// maxReplicas bounds instance_count and max_instances.
const maxReplicas = 1000

func (d *OnlineDeployment) validate() Errors {
	var es Errors
	checkServingName(&es, "name", d.Name, true)
	if d.EndpointName == "" {
		es.add("endpoint_name", "is required: the endpoint this deployment serves (or pass --endpoint-name)")
	} else {
		checkServingName(&es, "endpoint_name", d.EndpointName, true)
	}
	if m := d.Model; m != nil {
		m.validate(&es, "model")
	}
	switch c := d.CodeConfiguration; {
	case c == nil:
		es.add("code_configuration", "is required: code (the folder of the scoring code) and scoring_script (the file in it that defines init() and run())")
	case strings.TrimSpace(c.ScoringScript) == "":
		es.add("code_configuration.scoring_script", "is required: the file, in code, that defines init() and run()")
	case strings.TrimSpace(c.Code) == "":
		es.add("code_configuration.code", "is required: the folder that holds %s", quote(c.ScoringScript))
	}
	if d.Environment != nil {
		d.Environment.validate(&es, "environment")
	}
	if d.InstanceCount < 0 || d.InstanceCount > maxReplicas {
		es.add("instance_count", "must be from 1 to %d, got %d", maxReplicas, d.InstanceCount)
	}
	checkEnvironmentVariables(&es, d.EnvironmentVariables)
	if r := d.RequestSettings; r != nil {
		if r.RequestTimeoutMS < 0 || r.RequestTimeoutMS > MaxRequestTimeoutMS {
			es.add("request_settings.request_timeout_ms", "must be from 1 to %d milliseconds, got %d", MaxRequestTimeoutMS, r.RequestTimeoutMS)
		}
		if r.MaxConcurrentRequestsPerInstance < 0 {
			es.add("request_settings.max_concurrent_requests_per_instance", "must be 1 or more, got %d", r.MaxConcurrentRequestsPerInstance)
		}
		if r.MaxQueueWaitMS < 0 || r.MaxQueueWaitMS > MaxRequestTimeoutMS {
			es.add("request_settings.max_queue_wait_ms", "must be from 0 to %d milliseconds, got %d", MaxRequestTimeoutMS, r.MaxQueueWaitMS)
		}
	}
	d.LivenessProbe.validate(&es, "liveness_probe")
	d.ReadinessProbe.validate(&es, "readiness_probe")
	if s := d.ScaleSettings; s != nil {
		oneOf(&es, "scale_settings.type", s.Type, true, []string{"default", "target_utilization"})
		if s.Type == "target_utilization" {
			lo := 1
			if s.MinInstances != nil {
				lo = *s.MinInstances
			}
			if lo < 0 || lo > maxReplicas {
				es.add("scale_settings.min_instances", "must be from 0 to %d, got %d", maxReplicas, lo)
			}
			if s.MaxInstances != 0 && (s.MaxInstances < max(lo, 1) || s.MaxInstances > maxReplicas) {
				es.add("scale_settings.max_instances", "must be from %d (min_instances, at least 1) to %d, got %d", max(lo, 1), maxReplicas, s.MaxInstances)
			}
			if p := s.TargetUtilizationPercentage; p < 0 || p > 100 {
				es.add("scale_settings.target_utilization_percentage", "must be a percent from 1 to 100, got %d", p)
			}
		} else if s.MinInstances != nil || s.MaxInstances != 0 || s.TargetUtilizationPercentage != 0 || s.PollingInterval != 0 || s.ScaleToZeroAfter != 0 {
			es.add("scale_settings", "min_instances, max_instances, polling_interval, target_utilization_percentage and scale_to_zero_after go with type: target_utilization; a default deployment runs instance_count replicas")
		}
		if s.PollingInterval < 0 || s.ScaleToZeroAfter < 0 {
			es.add("scale_settings", "polling_interval and scale_to_zero_after are seconds, 1 or more")
		}
	}
	oneOf(&es, "egress_public_network_access", d.EgressPublicNetworkAccess, true, []string{"enabled", "disabled"})
	return es
}

// RefParts splits a model reference (ParseModelRef's grammar) into its
// name and version, latest when it says @latest; ok is false when Ref is
// not one.
func (m *ModelRef) RefParts() (name, version string, latest, ok bool) {
	name, version, err := ParseModelRef(m.Ref)
	if err != nil {
		return "", "", false, false
	}
	if version == "latest" {
		return name, "", true, true
	}
	return name, version, false, true
}

func (m *ModelRef) validate(es *Errors, f string) {
	if m.Ref != "" {
		if m.Name != "" || m.Version != "" || m.Path != "" || m.Type != "" || m.Description != "" {
			es.add(f, "a reference (%s) stands alone; remove the other fields, or remove ref to give the model inline with path", quote(m.Ref))
		}
		if _, _, err := ParseModelRef(m.Ref); err != nil {
			es.add(f, "%v (or give the model inline, with path)", err)
		}
		return
	}
	if strings.TrimSpace(m.Path) == "" {
		es.add(f+".path", "an inline model needs path, the file or folder of the model")
	}
	oneOf(es, f+".type", m.Type, true, ModelTypes)
}

func (p *Probe) validate(es *Errors, f string) {
	if p == nil {
		return
	}
	if p.InitialDelay != nil && *p.InitialDelay < 0 {
		es.add(f+".initial_delay", "must be 0 or more, got %d", *p.InitialDelay)
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"period", p.Period}, {"timeout", p.Timeout}, {"success_threshold", p.SuccessThreshold}, {"failure_threshold", p.FailureThreshold}} {
		if v.n < 0 {
			es.add(f+"."+v.name, "must be 0 or more, got %d", v.n)
		}
	}
}

// ApplyDefaults fills in what Azure fills in for a deployment.
func (d *OnlineDeployment) ApplyDefaults() {
	if d.InstanceCount == 0 {
		d.InstanceCount = 1
	}
	if d.RequestSettings == nil {
		d.RequestSettings = &RequestSettings{}
	}
	r := d.RequestSettings
	if r.RequestTimeoutMS == 0 {
		r.RequestTimeoutMS = DefaultRequestTimeoutMS
	}
	if r.MaxConcurrentRequestsPerInstance == 0 {
		r.MaxConcurrentRequestsPerInstance = 1
	}
	if r.MaxQueueWaitMS == 0 {
		r.MaxQueueWaitMS = DefaultMaxQueueWaitMS
	}
	for _, p := range []**Probe{&d.LivenessProbe, &d.ReadinessProbe} {
		if *p == nil {
			*p = &Probe{}
		}
		q := *p
		if q.InitialDelay == nil {
			ten := 10
			q.InitialDelay = &ten
		}
		q.Period = cmp.Or(q.Period, 10)
		q.Timeout = cmp.Or(q.Timeout, 2)
		q.SuccessThreshold = cmp.Or(q.SuccessThreshold, 1)
		q.FailureThreshold = cmp.Or(q.FailureThreshold, 30)
	}
	if d.ScaleSettings == nil {
		d.ScaleSettings = &ScaleSettings{}
	}
	s := d.ScaleSettings
	if s.Type == "" {
		s.Type = "default"
	}
	if s.Type == "target_utilization" {
		if s.MinInstances == nil {
			one := 1
			s.MinInstances = &one
		}
		s.MaxInstances = cmp.Or(s.MaxInstances, max(*s.MinInstances, 1))
		s.PollingInterval = cmp.Or(s.PollingInterval, 1)
		s.TargetUtilizationPercentage = cmp.Or(s.TargetUtilizationPercentage, DefaultTargetPercent)
		if *s.MinInstances == 0 {
			s.ScaleToZeroAfter = cmp.Or(s.ScaleToZeroAfter, DefaultScaleToZeroAfter)
		}
	}
}

// UnmarshalYAML reads a model written as a reference (`model:
// azureml:name:1`) or as an inline mapping.
func (m *ModelRef) UnmarshalYAML(n *yaml.Node) error {
	type plain ModelRef
	var p plain
	if err := refOrMappingYAML(n, &p, &p.Ref, "a model must be a reference such as azureml:NAME:VERSION or a mapping with path"); err != nil {
		return err
	}
	*m = ModelRef(p)
	return nil
}

// MarshalYAML writes a reference as the plain string files use.
func (m ModelRef) MarshalYAML() (any, error) {
	if m.Ref != "" && m == (ModelRef{Ref: m.Ref}) {
		return m.Ref, nil
	}
	type plain ModelRef
	return plain(m), nil
}

// UnmarshalJSON reads a model as a JSON object or as a plain string, which
// is a reference. Unknown fields are errors.
func (m *ModelRef) UnmarshalJSON(data []byte) error {
	type plain ModelRef
	var p plain
	if err := refOrObjectJSON(data, &p, &p.Ref, "a model"); err != nil {
		return err
	}
	*m = ModelRef(p)
	return nil
}
