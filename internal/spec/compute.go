package spec

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// ParseCompute reads a compute file strictly, validates it and fills defaults.
func ParseCompute(data []byte) (*Compute, error) {
	root, err := parseNode(data)
	if err != nil {
		return nil, err
	}
	var c Compute
	if err := decodeYAML(root, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.ApplyDefaults()
	return &c, nil
}

// DecodeComputeJSON reads a compute spec from strict JSON, validates it and
// fills defaults.
func DecodeComputeJSON(data []byte) (*Compute, error) {
	var c Compute
	if err := decodeJSON(data, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.ApplyDefaults()
	return &c, nil
}

var (
	computeNameRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*$`)
	computeTypes  = set("local", "amlcompute", "computeinstance", "virtualmachine", "kubernetes")
)

// typeFields says which type-specific fields belong to which types.
var typeFields = map[string]func(c *Compute) bool{
	"capacity":                          func(c *Compute) bool { return c.Capacity != 0 },
	"size":                              func(c *Compute) bool { return c.Size != "" },
	"tier":                              func(c *Compute) bool { return c.Tier != "" },
	"min_instances":                     func(c *Compute) bool { return c.MinInstances != nil },
	"max_instances":                     func(c *Compute) bool { return c.MaxInstances != nil },
	"idle_time_before_scale_down":       func(c *Compute) bool { return c.IdleTimeBeforeScaleDown != nil },
	"idle_time_before_shutdown_minutes": func(c *Compute) bool { return c.IdleTimeBeforeShutdownMins != nil },
	"schedules":                         func(c *Compute) bool { return c.Schedules != nil },
	"setup_scripts":                     func(c *Compute) bool { return c.SetupScripts != nil },
	"create_on_behalf_of":               func(c *Compute) bool { return c.CreateOnBehalfOf != nil },
	"enable_root_access":                func(c *Compute) bool { return c.EnableRootAccess != nil },
	"release_quota_on_stop":             func(c *Compute) bool { return c.ReleaseQuotaOnStop != nil },
	"ssh_public_access_enabled":         func(c *Compute) bool { return c.SSHPublicAccessEnabled != nil },
	"enable_node_public_ip":             func(c *Compute) bool { return c.EnableNodePublicIP != nil },
	"network_settings":                  func(c *Compute) bool { return c.NetworkSettings != nil },
	"provider":                          func(c *Compute) bool { return c.Provider != nil },
	"ssh_settings":                      func(c *Compute) bool { return c.SSHSettings != nil },
	"resource_id":                       func(c *Compute) bool { return c.ResourceID != "" },
	"address":                           func(c *Compute) bool { return c.Address != "" },
	"host_key":                          func(c *Compute) bool { return c.HostKey != "" },
	"namespace":                         func(c *Compute) bool { return c.Namespace != "" },
}

var allowedFields = map[string]map[string]bool{
	"local": set("capacity"),
	"amlcompute": set("size", "tier", "min_instances", "max_instances", "idle_time_before_scale_down",
		"ssh_public_access_enabled", "ssh_settings", "network_settings", "enable_node_public_ip", "provider"),
	"computeinstance": set("size", "idle_time_before_shutdown_minutes", "schedules", "setup_scripts",
		"create_on_behalf_of", "enable_root_access", "release_quota_on_stop", "ssh_settings", "ssh_public_access_enabled",
		"network_settings", "enable_node_public_ip", "provider"),
	"virtualmachine": set("resource_id", "address", "host_key", "ssh_settings"),
	"kubernetes":     set("resource_id", "namespace"),
}

// Validate checks the compute spec and returns every problem as Errors.
func (c *Compute) Validate() error {
	var e errs
	name := strings.TrimSpace(c.Name)
	minLen, maxLen := 2, 32
	if c.Type == "amlcompute" {
		minLen, maxLen = 3, 24
	}
	switch {
	case name == "":
		e.add("name", 0, "is required")
	case len(name) < minLen || len(name) > maxLen || !computeNameRe.MatchString(name):
		e.add("name", 0, "%q: a %s compute name has %d-%d letters, digits or '-', starting with a letter", c.Name, orType(c.Type), minLen, maxLen)
	}
	if !computeTypes[c.Type] {
		e.add("type", 0, "must be one of %s, got %q", oneOf(computeTypes), c.Type)
		return e.err()
	}
	allowed := allowedFields[c.Type]
	for _, f := range slices.Sorted(maps.Keys(typeFields)) {
		if typeFields[f](c) && !allowed[f] {
			e.add(f, 0, "does not apply to compute type %s", c.Type)
		}
	}
	if c.Capacity < 0 {
		e.add("capacity", 0, "must be ≥ 0 (0 means the number of CPUs), got %d", c.Capacity)
	}
	if c.Type == "amlcompute" {
		lo, hi := 0, 1
		if c.MinInstances != nil {
			lo = *c.MinInstances
		}
		if c.MaxInstances != nil {
			hi = *c.MaxInstances
		}
		if lo < 0 {
			e.add("min_instances", 0, "must be ≥ 0, got %d", lo)
		}
		if hi < 1 {
			e.add("max_instances", 0, "must be ≥ 1, got %d", hi)
		}
		if hi < lo {
			e.add("max_instances", 0, "compute %s: max_instances must be ≥ min_instances (got %d < %d)", c.Name, hi, lo)
		}
		if c.IdleTimeBeforeScaleDown != nil && *c.IdleTimeBeforeScaleDown < 0 {
			e.add("idle_time_before_scale_down", 0, "must be a number of seconds ≥ 0")
		}
		if c.Tier != "" && c.Tier != "dedicated" && c.Tier != "low_priority" {
			e.add("tier", 0, "must be dedicated or low_priority, got %q", c.Tier)
		}
	}
	if m := c.IdleTimeBeforeShutdownMins; m != nil && (*m < 15 || *m > 4320) {
		e.add("idle_time_before_shutdown_minutes", 0, "must be between 15 and 4320 (3 days), got %d", *m)
	}
	if c.Type == "virtualmachine" {
		if c.Address == "" && c.ResourceID == "" {
			e.add("address", 0, "an attached machine needs address (or resource_id)")
		}
		s := c.SSHSettings
		if s == nil || s.AdminUsername == "" {
			e.add("ssh_settings.admin_username", 0, "is required to log in to the machine")
		}
		if s != nil && s.AdminPassword == "" && s.SSHPrivateKeyFile == "" {
			e.add("ssh_settings", 0, "give admin_password or ssh_private_key_file")
		}
		if s != nil && (s.SSHPort < 0 || s.SSHPort > 65535) {
			e.add("ssh_settings.ssh_port", 0, "must be a port number, got %d", s.SSHPort)
		}
	}
	return e.err()
}

func orType(t string) string {
	if t == "" {
		return "the"
	}
	return t
}

// ApplyDefaults fills the Azure defaults of the compute's type.
func (c *Compute) ApplyDefaults() {
	if c.Type != "amlcompute" {
		return
	}
	intp := func(v int) *int { return &v }
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
}
