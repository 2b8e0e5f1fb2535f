package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Informer returns an informer (not started) over r's objects that
// selector (a label selector; "" for all) selects, indexed by namespace.
func (r Resource[T, L]) Informer(selector string) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return r.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, r.newObject(), 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// Lister reads objects of type T from an informer's cache.
type Lister[T runtime.Object] struct {
	indexer cache.Indexer
}

// NewLister reads inf's cache, whose objects are Ts.
func NewLister[T runtime.Object](inf cache.SharedIndexInformer) Lister[T] {
	return Lister[T]{indexer: inf.GetIndexer()}
}

// Get returns the cached object name of namespace ns; false when there
// is none.
func (l Lister[T]) Get(ns, name string) (T, bool) {
	var zero T
	obj, ok, err := l.indexer.GetByKey(cache.ObjectName{Namespace: ns, Name: name}.String())
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// List returns the cached objects of namespace ns that sel selects.
func (l Lister[T]) List(ns string, sel labels.Selector) []T {
	var out []T
	_ = cache.ListAllByNamespace(l.indexer, ns, sel, func(obj any) {
		if t, ok := obj.(T); ok {
			out = append(out, t)
		}
	})
	return out
}
