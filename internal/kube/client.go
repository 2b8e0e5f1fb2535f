package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Clients talks to one cluster's API: one rest client per API group
// version, sharing one HTTP client and one rate limiter (as client-go's
// clientset does). Safe for concurrent use.
type Clients struct {
	core, batch, apps, discovery, authorization rest.Interface
}

// NewForConfig returns Clients for cfg. It makes no request.
func NewForConfig(cfg *rest.Config) (*Clients, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	// As client-go's clientset: one limiter for all groups when a QPS
	// is set, else each rest client its own default one.
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, errors.New("kube: a rate limit (QPS) needs a burst greater than 0")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, err
	}
	client := func(gv schema.GroupVersion) (rest.Interface, error) {
		g := c
		g.GroupVersion = &gv
		g.APIPath = "/apis"
		if gv.Group == "" {
			g.APIPath = "/api"
		}
		g.NegotiatedSerializer = theCodecs().serializer
		return rest.RESTClientForConfigAndClient(&g, httpClient)
	}
	out := &Clients{}
	for _, x := range []struct {
		to *rest.Interface
		gv schema.GroupVersion
	}{
		{&out.core, corev1.SchemeGroupVersion},
		{&out.batch, batchv1.SchemeGroupVersion},
		{&out.apps, appsv1.SchemeGroupVersion},
		{&out.discovery, discoveryv1.SchemeGroupVersion},
		{&out.authorization, authorizationv1.SchemeGroupVersion},
	} {
		rc, err := client(x.gv)
		if err != nil {
			return nil, fmt.Errorf("kube: client for %s: %w", x.gv, err)
		}
		*x.to = rc
	}
	return out, nil
}

// ServerVersion is what the API server says of its version (GET /version).
func (c *Clients) ServerVersion(ctx context.Context) (*version.Info, error) {
	body, err := c.core.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("kube: the API server's /version is not JSON: %w", err)
	}
	return &info, nil
}

// CoreV1 is the core/v1 API group.
func (c *Clients) CoreV1() CoreV1 { return CoreV1{c.core} }

// BatchV1 is the batch/v1 API group.
func (c *Clients) BatchV1() BatchV1 { return BatchV1{c.batch} }

// AppsV1 is the apps/v1 API group.
func (c *Clients) AppsV1() AppsV1 { return AppsV1{c.apps} }

// DiscoveryV1 is the discovery.k8s.io/v1 API group.
func (c *Clients) DiscoveryV1() DiscoveryV1 { return DiscoveryV1{c.discovery} }

// AuthorizationV1 is the authorization.k8s.io/v1 API group.
func (c *Clients) AuthorizationV1() AuthorizationV1 { return AuthorizationV1{c.authorization} }
