package kube

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// codecs is the scheme of the groups Ferry uses, made on first use (not
// in an init: a process that never talks to a cluster pays nothing).
type codecs struct {
	scheme     *runtime.Scheme
	serializer runtime.NegotiatedSerializer
	params     runtime.ParameterCodec
}

var theCodecs = sync.OnceValue(func() codecs {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, batchv1.AddToScheme, appsv1.AddToScheme,
		discoveryv1.AddToScheme, authorizationv1.AddToScheme, autoscalingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic("kube: register an API group: " + err.Error()) // a programming error: the groups are fixed
		}
	}
	// Status, the body of every error, comes as apiVersion v1 from any group.
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return codecs{
		scheme:     s,
		serializer: serializer.NewCodecFactory(s).WithoutConversion(),
		params:     runtime.NewParameterCodec(s),
	}
})
