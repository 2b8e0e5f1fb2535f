package spec

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

var (
	// kubeQuantityRe is a Kubernetes resource quantity as people write
	// them: a number and an optional suffix ("500m", "4Gi", "1.5", "2e3").
	kubeQuantityRe = lazyRegexp(`^[0-9]+(\.[0-9]+)?([eE][0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)
	// kubeInstanceTypeRe is an instance type's name: a Kubernetes object
	// name, as Azure's InstanceType resources are named.
	kubeInstanceTypeRe = lazyRegexp(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)
	// kubeResourceRe is a resource name (cpu, memory, nvidia.com/gpu).
	kubeResourceRe = lazyRegexp(`^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	// registryHostRe is a registry's host and optional port, as image
	// references name it (registry.example.com, 127.0.0.1:5000).
	registryHostRe = lazyRegexp(`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$`)
	// registryPathRe is one component of a repository path.
	registryPathRe = lazyRegexp(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)
)

// validateRegistry checks a kubernetes compute's registry and its
// credentials.
func (c *Compute) validateRegistry(es *Errors) {
	if c.Registry == "" {
		if c.RegistryCredentials != nil {
			es.add("registry_credentials", "are given without a registry; set registry: HOST[:PORT][/PREFIX] too, or leave them out")
		}
		return
	}
	how := "give it as HOST[:PORT][/PREFIX], such as registry.example.com/ml or 127.0.0.1:5000"
	if strings.Contains(c.Registry, "://") {
		es.add("registry", "%s has a scheme; %s (a registry on a loopback or private address is spoken to over plain HTTP, others over HTTPS)", quote(c.Registry), how)
		return
	}
	host, prefix, _ := strings.Cut(c.Registry, "/")
	if !registryHostRe().MatchString(host) {
		es.add("registry", "%s is not a registry host: %s", quote(c.Registry), how)
		return
	}
	if prefix != "" {
		for _, part := range strings.Split(prefix, "/") {
			if !registryPathRe().MatchString(part) {
				es.add("registry", "%s: the path %s is not a repository prefix (lowercase letters, digits and . _ - between them, parts separated by /); %s", quote(c.Registry), quote(prefix), how)
				return
			}
		}
	}
	if rc := c.RegistryCredentials; rc != nil && (rc.Username == "") != (rc.Password == "") {
		es.add("registry_credentials", "need both username and password (or neither, for a registry that lets anyone push and pull)")
	}
}

// validateKube checks the fields of a kubernetes compute.
func (c *Compute) validateKube(es *Errors) {
	if c.Namespace != "" && !k8sNameRe().MatchString(c.Namespace) {
		es.add("namespace", "%s is not a Kubernetes namespace name (lowercase letters, digits and '-', at most 63)", quote(c.Namespace))
	}
	if c.KubeAPIURL != "" {
		u, err := url.Parse(c.KubeAPIURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			es.add("api_url", "%s is not the URL of a Kubernetes API server, such as https://10.0.0.1:6443", quote(c.KubeAPIURL))
		}
	}
	if strings.ContainsAny(c.Image, " \t\n") {
		es.add("image", "%s is not an image reference such as python:3.12-slim", quote(c.Image))
	}
	for _, name := range slices.Sorted(maps.Keys(c.InstanceTypes)) {
		f := "instance_types." + name
		if !kubeInstanceTypeRe().MatchString(name) {
			es.add(f, "%s is not an instance type name: use lowercase letters, digits, '-' and '.', at most 63", quote(name))
		}
		it := c.InstanceTypes[name]
		for _, part := range []struct {
			field string
			m     map[string]string
		}{{"resources.requests", it.Resources.Requests}, {"resources.limits", it.Resources.Limits}} {
			for _, r := range slices.Sorted(maps.Keys(part.m)) {
				if !kubeResourceRe().MatchString(r) {
					es.add(f+"."+part.field, "%s is not a resource name such as cpu, memory or nvidia.com/gpu", quote(r))
				}
				if !kubeQuantityRe().MatchString(part.m[r]) {
					es.add(f+"."+part.field+"."+r, "%s is not a quantity such as 500m, 2, 4Gi", quote(part.m[r]))
				}
			}
		}
		for i, tol := range it.Tolerations {
			tf := fmt.Sprintf("%s.tolerations[%d]", f, i)
			oneOf(es, tf+".operator", tol.Operator, true, []string{"Equal", "Exists"})
			oneOf(es, tf+".effect", tol.Effect, true, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"})
			if tol.Operator == "Exists" && tol.Value != "" {
				es.add(tf+".value", "must be empty with operator Exists")
			}
		}
	}
	if d := c.DefaultInstanceType; d != "" && len(c.InstanceTypes) > 0 {
		if _, ok := c.InstanceTypes[d]; !ok {
			es.add("default_instance_type", "%s is none of instance_types (%s)", quote(d), joinNames(slices.Sorted(maps.Keys(c.InstanceTypes))))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.PodTemplate)) {
		if k != "metadata" && k != "spec" {
			es.add("pod_template."+k, "unknown field %q; a pod template has metadata and spec", k)
		}
	}
	if c.Kubeconfig != "" && c.KubeconfigContent == "" && strings.ContainsRune(c.Kubeconfig, 0) {
		es.add("kubeconfig", "is not a file path")
	}
	c.validateRegistry(es)
}

// AllInstanceTypes are the instance types a job or deployment on c may
// pick: InstanceTypes and, beside them, ClusterInstanceTypes.
func (c *Compute) AllInstanceTypes() map[string]KubeInstanceType {
	out := maps.Clone(c.ClusterInstanceTypes)
	if out == nil {
		out = map[string]KubeInstanceType{}
	}
	maps.Copy(out, c.InstanceTypes)
	return out
}
