package spec

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

const computeEmptyHint = "a compute needs at least name and type, e.g. name: cpu-cluster and type: amlcompute"

// ParseCompute reads an Azure ML CLI v2 compute file strictly (see
// ParseJob), validates it and fills in the defaults of its type.
func ParseCompute(data []byte) (*Compute, error) {
	return ParseComputeWithSet(data, nil)
}

// ParseComputeWithSet is ParseCompute with `--set path=value` overrides
// applied to the file before it is decoded, as ParseJobWithSet does
// (max_instances=4, tags.team=vision).
func ParseComputeWithSet(data []byte, sets []string) (*Compute, error) {
	c, root, err := parseYAML[Compute](data, sets, "compute", computeEmptyHint, nil)
	if err != nil {
		noteSets(err, sets)
		return nil, err
	}
	return finishCompute(c, root, sets)
}

// DecodeComputeJSON reads a compute from strict JSON (the REST API's form,
// with the fields of the YAML file), validates it and fills in the defaults
// of its type.
func DecodeComputeJSON(data []byte) (*Compute, error) {
	c, root, err := decodeJSON[Compute](data, "compute")
	if err != nil {
		return nil, err
	}
	return finishCompute(c, root, nil)
}

// finishCompute validates a decoded compute, placing its problems on the
// lines of root (or at the --set that gave them), and fills in the
// defaults of its type.
func finishCompute(c *Compute, root *yaml.Node, sets []string) (*Compute, error) {
	if es := c.validate(); len(es) > 0 {
		addLines(es, root)
		noteSets(es, sets)
		return nil, c.wrap(es)
	}
	c.ApplyDefaults()
	return c, nil
}

// computeTypes are the compute types Ferry knows.
var computeTypes = []string{"local", "amlcompute", "computeinstance", "virtualmachine", "kubernetes", "slurm"}

// computeFields says which types each type-specific field (by YAML name)
// belongs to; the fields not listed belong to every type.
var computeFields = map[string][]string{
	"capacity":                          {"local", "kubernetes"},
	"size":                              {"amlcompute", "computeinstance"},
	"tier":                              {"amlcompute"},
	"min_instances":                     {"amlcompute"},
	"max_instances":                     {"amlcompute"},
	"idle_time_before_scale_down":       {"amlcompute"},
	"ssh_public_access_enabled":         {"amlcompute", "computeinstance"},
	"ssh_settings":                      {"amlcompute", "computeinstance", "virtualmachine", "slurm"},
	"network_settings":                  {"amlcompute", "computeinstance"},
	"identity":                          {"amlcompute", "computeinstance", "kubernetes"},
	"enable_node_public_ip":             {"amlcompute", "computeinstance"},
	"idle_time_before_shutdown_minutes": {"computeinstance"},
	"create_on_behalf_of":               {"computeinstance"},
	"schedules":                         {"computeinstance"},
	"setup_scripts":                     {"computeinstance"},
	"enable_root_access":                {"computeinstance"},
	"release_quota_on_stop":             {"computeinstance"},
	"provider":                          {"amlcompute", "computeinstance"},
	"resource_id":                       {"virtualmachine", "kubernetes"},
	"address":                           {"virtualmachine", "slurm"},
	"host_key":                          {"virtualmachine", "slurm"},
	"namespace":                         {"kubernetes"},
	"properties":                        {"virtualmachine", "kubernetes"},
	"partition":                         {"slurm"},
	"account":                           {"slurm"},
	"qos":                               {"slurm"},
	"constraint":                        {"slurm"},
	"reservation":                       {"slurm"},
	"default_time_limit":                {"slurm"},
	"job_tier_qos":                      {"slurm"},
	"priority_nice":                     {"slurm"},
	"work_dir":                          {"slurm"},
	"kubeconfig":                        {"kubernetes"},
	"kubeconfig_content":                {"kubernetes"},
	"api_url":                           {"kubernetes"},
	"image":                             {"kubernetes"},
	"registry":                          {"kubernetes"},
	"registry_credentials":              {"kubernetes"},
	"instance_types":                    {"kubernetes"},
	"default_instance_type":             {"kubernetes"},
	"pod_template":                      {"kubernetes"},
}

// sshFields says which types each field of ssh_settings belongs to.
var sshFields = map[string][]string{
	"admin_username":             {"amlcompute", "computeinstance", "virtualmachine", "slurm"},
	"admin_password":             {"amlcompute", "virtualmachine", "slurm"},
	"ssh_key_value":              {"amlcompute", "computeinstance"},
	"ssh_private_key_file":       {"virtualmachine", "slurm"},
	"ssh_port":                   {"virtualmachine", "slurm"},
	"ssh_private_key_passphrase": {"virtualmachine", "slurm"},
	"ssh_private_key":            {"virtualmachine", "slurm"},
}

var (
	computeNameRe = lazyRegexp(`^[A-Za-z][A-Za-z0-9-]*$`)
	k8sNameRe     = lazyRegexp(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// Validate checks the compute and returns all its problems, or nil. The
// error wraps an Errors (errors.As finds it) and starts with the compute's
// name when it has a valid one: "compute gpu-cluster: max_instances: ...".
func (c *Compute) Validate() error {
	if c == nil {
		return Errors{{Message: "the compute is missing"}}
	}
	if es := c.validate(); len(es) > 0 {
		return c.wrap(es)
	}
	return nil
}

// wrap puts the compute's name in front of its problems.
func (c *Compute) wrap(es Errors) error {
	if c.Name == "" || !computeNameRe().MatchString(c.Name) || len(c.Name) > 32 {
		return es
	}
	return fmt.Errorf("compute %s: %w", c.Name, es)
}

func (c *Compute) validate() Errors {
	var es Errors
	lo, hi := 2, 32
	if c.Type == "amlcompute" {
		lo, hi = 3, 24
	}
	switch {
	case c.Name == "":
		es.add("name", "is required: the name jobs use in compute:, e.g. cpu-cluster")
	case len(c.Name) < lo || len(c.Name) > hi || !computeNameRe().MatchString(c.Name):
		es.add("name", "%s is not a valid name: use %d to %d letters, digits or '-', starting with a letter", quote(c.Name), lo, hi)
	}
	oneOf(&es, "type", c.Type, false, computeTypes)
	if !slices.Contains(computeTypes, c.Type) {
		return es // which fields belong depends on the type
	}
	c.validateFieldsOfType(&es)
	c.checkBounds(&es)
	switch c.Type {
	case "amlcompute":
		c.validateCluster(&es)
	case "computeinstance":
		c.validateInstance(&es)
	case "virtualmachine":
		c.validateVM(&es)
	case "slurm":
		c.validateSlurm(&es)
	case "kubernetes":
		c.validateKube(&es)
	}
	return es
}

// validateFieldsOfType rejects the fields that do not belong to c's type.
func (c *Compute) validateFieldsOfType(es *Errors) {
	v := reflect.ValueOf(c).Elem()
	for i := 0; i < v.NumField(); i++ {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		types, specific := computeFields[name]
		if specific && !v.Field(i).IsZero() && !slices.Contains(types, c.Type) {
			es.add(name, "applies only to %s, not %s; remove it", typesWord(types), c.Type)
		}
	}
	if s := c.SSHSettings; s != nil && slices.Contains(computeFields["ssh_settings"], c.Type) {
		v := reflect.ValueOf(s).Elem()
		for i := 0; i < v.NumField(); i++ {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			if types := sshFields[name]; !v.Field(i).IsZero() && !slices.Contains(types, c.Type) {
				es.add("ssh_settings."+name, "applies only to %s, not %s; remove it", typesWord(types), c.Type)
			}
		}
	}
}

func typesWord(types []string) string {
	if len(types) == 1 {
		return "type " + types[0]
	}
	return "types " + joinNames(types)
}

func (c *Compute) validateCluster(es *Errors) {
	lo, hi := 0, 1
	if c.MinInstances != nil {
		lo = *c.MinInstances
	}
	if c.MaxInstances != nil {
		hi = *c.MaxInstances
	}
	switch {
	case hi < lo:
		es.add("max_instances", "must be ≥ min_instances (got %d < %d)", hi, lo)
	case hi < 1:
		es.add("max_instances", "must be ≥ 1, got %d", hi)
	}
	oneOf(es, "tier", c.Tier, true, []string{"dedicated", "low_priority"})
	if strings.ContainsAny(c.Size, " \t/") {
		es.add("size", "%s is not a size name such as Standard_DS3_v2", quote(c.Size))
	}
}

func (c *Compute) validateInstance(es *Errors) {
	if m := c.IdleTimeBeforeShutdownMins; m != nil && (*m < 15 || *m > 4320) {
		es.add("idle_time_before_shutdown_minutes", "must be from 15 to 4320 minutes (3 days), got %d", *m)
	}
	if strings.ContainsAny(c.Size, " \t/") {
		es.add("size", "%s is not a size name such as Standard_DS3_v2", quote(c.Size))
	}
	for _, k := range slices.Sorted(maps.Keys(c.Schedules)) {
		if k != "compute_start_stop" {
			es.add("schedules."+k, "unknown field %q; schedules has compute_start_stop", k)
			continue
		}
		list, ok := c.Schedules[k].([]any)
		if !ok {
			es.add("schedules.compute_start_stop", "must be a list of schedules, each with action and trigger")
			continue
		}
		if len(list) > 4 {
			es.add("schedules.compute_start_stop", "has %d schedules; at most 4 are allowed", len(list))
		}
		for i, item := range list {
			validateSchedule(es, fmt.Sprintf("schedules.compute_start_stop[%d]", i), item)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.CreateOnBehalfOf)) {
		switch k {
		case "user_object_id", "user_tenant_id":
			if s, ok := c.CreateOnBehalfOf[k].(string); !ok || strings.TrimSpace(s) == "" {
				es.add("create_on_behalf_of."+k, "must be a non-empty string (the user the instance is made for)")
			}
		default:
			es.add("create_on_behalf_of."+k, "unknown field %q; create_on_behalf_of has user_object_id and user_tenant_id", k)
		}
	}
	if c.CreateOnBehalfOf != nil && c.CreateOnBehalfOf["user_object_id"] == nil {
		es.add("create_on_behalf_of.user_object_id", "is required: the user the instance is made for")
	}
	for _, k := range slices.Sorted(maps.Keys(c.SetupScripts)) {
		f := "setup_scripts." + k
		if k != "creation_script" && k != "startup_script" {
			es.add(f, "unknown field %q; setup_scripts has creation_script and startup_script", k)
			continue
		}
		m, ok := c.SetupScripts[k].(map[string]any)
		if !ok {
			es.add(f, "must be a mapping with path (a script in the code folder) or command")
			continue
		}
		if str(m["path"]) == "" && str(m["command"]) == "" {
			es.add(f, "give path (a script) or command")
		}
	}
}

// validateSchedule checks one compute_start_stop entry.
func validateSchedule(es *Errors, f string, item any) {
	m, ok := item.(map[string]any)
	if !ok {
		es.add(f, "must be a mapping with action (start or stop) and trigger")
		return
	}
	oneOf(es, f+".action", str(m["action"]), false, []string{"start", "stop"})
	oneOf(es, f+".state", str(m["state"]), true, []string{"enabled", "disabled"})
	trig, ok := m["trigger"].(map[string]any)
	if !ok {
		es.add(f+".trigger", "is required: {type: cron, expression: \"0 18 * * *\"} or {type: recurrence, frequency: day, interval: 1}")
		return
	}
	switch typ := str(trig["type"]); typ {
	case "cron":
		if len(strings.Fields(str(trig["expression"]))) != 5 {
			es.add(f+".trigger.expression", "a cron trigger needs a five-field cron expression, e.g. \"0 18 * * *\"")
		}
	case "recurrence":
		oneOf(es, f+".trigger.frequency", str(trig["frequency"]), false, []string{"minute", "hour", "day", "week", "month"})
		if n, ok := trig["interval"].(float64); !ok || n < 1 || n != float64(int64(n)) {
			es.add(f+".trigger.interval", "must be a whole number ≥ 1")
		}
	default:
		oneOf(es, f+".trigger.type", typ, false, []string{"cron", "recurrence"})
	}
}

func (c *Compute) validateVM(es *Errors) {
	if c.Address == "" && c.ResourceID == "" {
		es.add("address", "is required: the host name or IP address of the machine (or give resource_id)")
	}
	c.validateSSHLogin(es)
}

// validateSSHLogin checks the SSH login of an attached machine or a Slurm
// login node: address, host_key and ssh_settings.
func (c *Compute) validateSSHLogin(es *Errors) {
	if strings.ContainsAny(c.Address, " \t/") {
		es.add("address", "%s is not a host name, IP address or host:port", quote(c.Address))
	}
	s := c.SSHSettings
	if s == nil {
		s = &SSHSettings{}
	}
	if s.AdminUsername == "" {
		es.add("ssh_settings.admin_username", "is required: the user Ferry logs in as over SSH")
	}
	key := s.SSHPrivateKeyFile != "" || s.SSHPrivateKey != ""
	switch {
	case s.AdminPassword == "" && !key:
		es.add("ssh_settings", "give ssh_private_key_file (recommended) or admin_password to log in with")
	case s.AdminPassword != "" && key:
		es.add("ssh_settings", "give one of ssh_private_key_file and admin_password, not both")
	}
	if s.SSHPrivateKeyPassphrase != "" && !key {
		es.add("ssh_settings.ssh_private_key_passphrase", "applies only with ssh_private_key_file; remove it")
	}
	if hk := strings.TrimSpace(c.HostKey); hk != "" && hk != HostKeyTOFU && !strings.HasPrefix(hk, "SHA256:") && len(strings.Fields(hk)) < 2 {
		es.add("host_key", "%s is not a host key: give a known_hosts line (as ssh-keyscan prints), a SHA256:... fingerprint (as ssh-keygen -lf prints) or %s", quote(shorten(hk)), HostKeyTOFU)
	}
	if s.SSHPort < 0 || s.SSHPort > 65535 {
		es.add("ssh_settings.ssh_port", "must be a port number from 1 to 65535, got %d", s.SSHPort)
	}
}

// HostKeyTOFU is the host_key value that trusts the machine's key the
// first time Ferry connects and pins it from then on.
const HostKeyTOFU = "trust-on-first-use"

// shorten keeps messages readable when a value is long.
func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// str is v if it is a string, else "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

// ApplyDefaults fills in what Azure ML assumes when a field of the
// compute's type is left out: for amlcompute size Standard_DS3_v2, tier
// dedicated, min_instances 0, max_instances 1 and
// idle_time_before_scale_down 120 seconds; for computeinstance size
// Standard_DS3_v2 and enable_root_access true; for virtualmachine SSH port
// 22 (and for slurm, when it has ssh_settings); for kubernetes namespace
// "default". It is idempotent.
func (c *Compute) ApplyDefaults() {
	intp := func(v int) *int { return &v }
	switch c.Type {
	case "amlcompute":
		if c.Size == "" {
			c.Size = "Standard_DS3_v2"
		}
		if c.Tier == "" {
			c.Tier = "dedicated"
		}
		if c.MinInstances == nil {
			c.MinInstances = intp(0)
		}
		if c.MaxInstances == nil {
			c.MaxInstances = intp(1)
		}
		if c.IdleTimeBeforeScaleDown == nil {
			c.IdleTimeBeforeScaleDown = intp(120)
		}
	case "computeinstance":
		if c.Size == "" {
			c.Size = "Standard_DS3_v2"
		}
		if c.EnableRootAccess == nil {
			t := true
			c.EnableRootAccess = &t
		}
	case "virtualmachine", "slurm":
		if c.SSHSettings != nil && c.SSHSettings.SSHPort == 0 {
			c.SSHSettings.SSHPort = 22
		}
	case "kubernetes":
		if c.Namespace == "" {
			c.Namespace = "default"
		}
	}
}
