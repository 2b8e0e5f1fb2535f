package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferry-ml/ferry/internal/imagereg"
	"github.com/ferry-ml/ferry/internal/spec"
)

// CheckError says which field of the compute to fix, and why. It never
// holds a secret.
type CheckError struct {
	Field string // kubeconfig, namespace, instance_types.NAME, ...
	Msg   string
}

func (e *CheckError) Error() string { return e.Field + ": " + e.Msg }

// Permission is one thing Ferry must be allowed to do in the namespace.
type Permission struct {
	Verb, Group, Resource string
}

func (p Permission) String() string {
	if p.Group == "" {
		return p.Verb + " " + p.Resource
	}
	return p.Verb + " " + p.Resource + "." + p.Group
}

// Permissions are what Ferry asks the cluster, at attach, whether its
// credentials may do in the namespace: what training jobs create (Jobs,
// and the Secret and headless Service beside each), what they watch and
// delete, and the Deployments of online deployments.
var Permissions = []Permission{
	{"create", "batch", "jobs"}, {"delete", "batch", "jobs"}, {"watch", "batch", "jobs"},
	{"create", "", "pods"}, {"watch", "", "pods"},
	{"create", "", "services"}, {"delete", "", "services"},
	{"create", "", "secrets"}, {"delete", "", "secrets"},
	{"create", "apps", "deployments"},
}

// CheckCompute implements compute.Checker: the API answers, the namespace
// exists, the credentials may do every one of Permissions there (one
// SelfSubjectAccessReview each), the instance types are sound and the
// default one exists.
// The cluster's InstanceType resources, when it has them, are kept in c
// as ClusterInstanceTypes (what `compute show` lists, and what
// deployments pick from); jobs still read them afresh.
//
// With a registry, the server's binary must be static (it goes to the
// pods in an image of its own). The registry itself is not asked: it is
// asked at each launch that needs it, and a job fails then with its
// answer.
func (t *Target) CheckCompute(ctx context.Context, c *spec.Compute) error {
	if err := Check(ctx, t.cl, t.c); err != nil {
		return err
	}
	if t.images != nil {
		if _, err := imagereg.RunnerTag(t.cfg.Exe); err != nil {
			return &CheckError{Field: "registry", Msg: fmt.Sprintf("with a registry, this server sends its own binary to the pods in an image, and cannot: %v", err)}
		}
	}
	types, fromCluster, err := t.cl.InstanceTypes(ctx, t.c)
	c.ClusterInstanceTypes = nil
	if err == nil {
		for name := range fromCluster {
			if c.ClusterInstanceTypes == nil {
				c.ClusterInstanceTypes = map[string]spec.KubeInstanceType{}
			}
			c.ClusterInstanceTypes[name] = types[name]
		}
	}
	return nil
}

// Check is CheckCompute for any user of a Cluster.
func Check(ctx context.Context, cl *Cluster, c *spec.Compute) error {
	if _, err := cl.Client.ServerVersion(ctx); err != nil {
		return &CheckError{Field: "kubeconfig", Msg: fmt.Sprintf("the Kubernetes API at %s does not answer: %v; check the kubeconfig's server (or api_url) and that the Ferry server reaches it", cl.Host, apiProblem(err))}
	}
	if _, err := cl.Client.CoreV1().Namespaces().Get(ctx, cl.Namespace, metav1.GetOptions{}); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return &CheckError{Field: "namespace", Msg: fmt.Sprintf("the cluster has no namespace %q; create it (kubectl create namespace %s) or name another", cl.Namespace, cl.Namespace)}
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
			// Reading namespaces is not needed when a Role grants the rest:
			// the access reviews below say what is missing.
		default:
			return &CheckError{Field: "namespace", Msg: fmt.Sprintf("cannot read namespace %q: %v", cl.Namespace, apiProblem(err))}
		}
	}
	var missing []string
	for _, p := range Permissions {
		r, err := cl.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: cl.Namespace, Verb: p.Verb, Group: p.Group, Resource: p.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return &CheckError{Field: "kubeconfig", Msg: fmt.Sprintf("cannot ask the cluster what these credentials may do (a SelfSubjectAccessReview): %v", apiProblem(err))}
		}
		if !r.Status.Allowed {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		return &CheckError{Field: "kubeconfig", Msg: fmt.Sprintf("the credentials may not %s in namespace %s; grant them (docs/kubernetes.md has a Role to copy)", strings.Join(missing, ", "), cl.Namespace)}
	}
	types, fromCluster, err := cl.InstanceTypes(ctx, c)
	if err != nil {
		return &CheckError{Field: "instance_types", Msg: fmt.Sprintf("cannot read the cluster's InstanceType resources: %v", apiProblem(err))}
	}
	for _, name := range slices.Sorted(maps.Keys(types)) {
		if err := checkQuantities(types[name]); err != nil {
			where := "instance_types." + name
			if fromCluster[name] {
				where = "instance_types (the cluster's InstanceType " + name + ")"
			}
			return &CheckError{Field: where, Msg: err.Error()}
		}
	}
	if d := c.DefaultInstanceType; d != "" {
		if _, ok := types[d]; !ok {
			return &CheckError{Field: "default_instance_type", Msg: fmt.Sprintf("%q is no instance type of the compute; it has %s", d, orNone(slices.Sorted(maps.Keys(types))))}
		}
	}
	return nil
}

// checkQuantities parses an instance type's quantities as Kubernetes will.
func checkQuantities(it spec.KubeInstanceType) error {
	for _, part := range []struct {
		name string
		m    map[string]string
	}{{"requests", it.Resources.Requests}, {"limits", it.Resources.Limits}} {
		for _, r := range slices.Sorted(maps.Keys(part.m)) {
			if _, err := resource.ParseQuantity(part.m[r]); err != nil {
				return fmt.Errorf("resources.%s.%s: %q is not a quantity: %v", part.name, r, part.m[r], err)
			}
		}
	}
	return nil
}

// apiProblem is an API error for a message: its status message, which
// names the object and never the credentials.
func apiProblem(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Message != "" {
		return s.Status().Message
	}
	return err.Error()
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
