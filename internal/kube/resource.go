package kube

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Resource is one resource of an API group in one namespace ("" for a
// cluster-scoped resource, or all namespaces), with the typed clientset's
// methods: T is its object type (*corev1.Pod), L its list (*corev1.PodList).
type Resource[T, L runtime.Object] struct {
	c         rest.Interface
	ns        string
	resource  string
	newObject func() T
	newList   func() L
}

func newResource[T, L runtime.Object](c rest.Interface, ns, resource string, newObject func() T, newList func() L) Resource[T, L] {
	return Resource[T, L]{c: c, ns: ns, resource: resource, newObject: newObject, newList: newList}
}

func (r Resource[T, L]) params() runtime.ParameterCodec { return theCodecs().params }

// Get returns the object called name.
func (r Resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObject()
	err := r.c.Get().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).Name(name).
		VersionedParams(&opts, r.params()).Do(ctx).Into(out)
	return out, err
}

// List returns the objects opts selects.
func (r Resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.c.Get().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).
		VersionedParams(&opts, r.params()).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

// Watch watches the objects opts selects.
func (r Resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.c.Get().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).
		VersionedParams(&opts, r.params()).Timeout(timeout(opts)).Watch(ctx)
}

// Create creates obj and returns it as the server made it.
func (r Resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObject()
	err := r.c.Post().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).
		VersionedParams(&opts, r.params()).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj (named by its metadata) and returns it as the
// server kept it.
func (r Resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := r.newObject()
	m, err := metaOf(obj)
	if err != nil {
		return out, err
	}
	err = r.c.Put().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).Name(m.GetName()).
		VersionedParams(&opts, r.params()).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the object called name.
func (r Resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.c.Delete().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).Name(name).Body(&opts).Do(ctx).Error()
}

// DeleteCollection deletes the objects listOpts selects.
func (r Resource[T, L]) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error {
	return r.c.Delete().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).
		VersionedParams(&listOpts, r.params()).Timeout(timeout(listOpts)).Body(&opts).Do(ctx).Error()
}

// getSub reads a subresource of the object called name into out.
func (r Resource[T, L]) getSub(ctx context.Context, name, sub string, opts metav1.GetOptions, out runtime.Object) error {
	return r.c.Get().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).Name(name).SubResource(sub).
		VersionedParams(&opts, r.params()).Do(ctx).Into(out)
}

// putSub replaces a subresource of the object called name.
func (r Resource[T, L]) putSub(ctx context.Context, name, sub string, body runtime.Object, opts metav1.UpdateOptions, out runtime.Object) error {
	return r.c.Put().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource).Name(name).SubResource(sub).
		VersionedParams(&opts, r.params()).Body(body).Do(ctx).Into(out)
}

func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, &notAnObject{obj}
	}
	return m, nil
}

type notAnObject struct{ obj runtime.Object }

func (e *notAnObject) Error() string {
	return "kube: " + e.obj.GetObjectKind().GroupVersionKind().String() + " has no object metadata"
}
