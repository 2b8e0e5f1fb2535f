package kube

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// CoreV1 is the core/v1 API group: the resources of it Ferry uses.
type CoreV1 struct{ c rest.Interface }

// Pods are the pods of namespace ns.
func (g CoreV1) Pods(ns string) Pods {
	return Pods{newResource(g.c, ns, "pods", func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })}
}

// Services are the Services of namespace ns.
func (g CoreV1) Services(ns string) Resource[*corev1.Service, *corev1.ServiceList] {
	return newResource(g.c, ns, "services", func() *corev1.Service { return &corev1.Service{} }, func() *corev1.ServiceList { return &corev1.ServiceList{} })
}

// Secrets are the Secrets of namespace ns.
func (g CoreV1) Secrets(ns string) Resource[*corev1.Secret, *corev1.SecretList] {
	return newResource(g.c, ns, "secrets", func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} })
}

// ConfigMaps are the ConfigMaps of namespace ns.
func (g CoreV1) ConfigMaps(ns string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return newResource(g.c, ns, "configmaps", func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

// Namespaces are the cluster's namespaces.
func (g CoreV1) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return newResource(g.c, "", "namespaces", func() *corev1.Namespace { return &corev1.Namespace{} }, func() *corev1.NamespaceList { return &corev1.NamespaceList{} })
}

// Pods are pods, whose logs can be read too.
type Pods struct {
	Resource[*corev1.Pod, *corev1.PodList]
}

// GetLogs is the request for the log of pod name.
func (p Pods) GetLogs(name string, opts *corev1.PodLogOptions) *rest.Request {
	return p.c.Get().NamespaceIfScoped(p.ns, p.ns != "").Resource(p.resource).Name(name).SubResource("log").VersionedParams(opts, p.params())
}

// BatchV1 is the batch/v1 API group.
type BatchV1 struct{ c rest.Interface }

// Jobs are the Jobs of namespace ns.
func (g BatchV1) Jobs(ns string) Resource[*batchv1.Job, *batchv1.JobList] {
	return newResource(g.c, ns, "jobs", func() *batchv1.Job { return &batchv1.Job{} }, func() *batchv1.JobList { return &batchv1.JobList{} })
}

// AppsV1 is the apps/v1 API group.
type AppsV1 struct{ c rest.Interface }

// Deployments are the Deployments of namespace ns.
func (g AppsV1) Deployments(ns string) Deployments {
	return Deployments{newResource(g.c, ns, "deployments", func() *appsv1.Deployment { return &appsv1.Deployment{} }, func() *appsv1.DeploymentList { return &appsv1.DeploymentList{} })}
}

// ReplicaSets are the ReplicaSets of namespace ns.
func (g AppsV1) ReplicaSets(ns string) Resource[*appsv1.ReplicaSet, *appsv1.ReplicaSetList] {
	return newResource(g.c, ns, "replicasets", func() *appsv1.ReplicaSet { return &appsv1.ReplicaSet{} }, func() *appsv1.ReplicaSetList { return &appsv1.ReplicaSetList{} })
}

// Deployments are Deployments, with their scale subresource.
type Deployments struct {
	Resource[*appsv1.Deployment, *appsv1.DeploymentList]
}

// GetScale reads the scale subresource of Deployment name.
func (d Deployments) GetScale(ctx context.Context, name string, opts metav1.GetOptions) (*autoscalingv1.Scale, error) {
	out := &autoscalingv1.Scale{}
	return out, d.getSub(ctx, name, "scale", opts, out)
}

// UpdateScale replaces the scale subresource of Deployment name.
func (d Deployments) UpdateScale(ctx context.Context, name string, scale *autoscalingv1.Scale, opts metav1.UpdateOptions) (*autoscalingv1.Scale, error) {
	out := &autoscalingv1.Scale{}
	return out, d.putSub(ctx, name, "scale", scale, opts, out)
}

// DiscoveryV1 is the discovery.k8s.io/v1 API group.
type DiscoveryV1 struct{ c rest.Interface }

// EndpointSlices are the EndpointSlices of namespace ns.
func (g DiscoveryV1) EndpointSlices(ns string) Resource[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList] {
	return newResource(g.c, ns, "endpointslices", func() *discoveryv1.EndpointSlice { return &discoveryv1.EndpointSlice{} }, func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} })
}

// AuthorizationV1 is the authorization.k8s.io/v1 API group.
type AuthorizationV1 struct{ c rest.Interface }

// SelfSubjectAccessReviews asks what the client's own credentials may do.
func (g AuthorizationV1) SelfSubjectAccessReviews() SelfSubjectAccessReviews {
	return SelfSubjectAccessReviews{g.c}
}

// SelfSubjectAccessReviews can only be created: the answer comes back.
type SelfSubjectAccessReviews struct{ c rest.Interface }

// Create asks the review and returns it with its status.
func (s SelfSubjectAccessReviews) Create(ctx context.Context, r *authorizationv1.SelfSubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SelfSubjectAccessReview, error) {
	out := &authorizationv1.SelfSubjectAccessReview{}
	err := s.c.Post().Resource("selfsubjectaccessreviews").VersionedParams(&opts, theCodecs().params).Body(r).Do(ctx).Into(out)
	return out, err
}
