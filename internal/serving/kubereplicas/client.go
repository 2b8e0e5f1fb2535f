package kubereplicas

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/ferry-ml/ferry/internal/kube"
)

// ErrNotFound is wrapped by the errors of Scale and Status for a
// deployment that has no Deployment in the namespace.
var ErrNotFound = errors.New("no such deployment on the cluster")

// Client runs online deployments' replicas in one namespace. Its methods
// are safe for concurrent use; two calls for the same deployment race as
// two kubectl commands would (an update that loses retries on the newer
// object).
type Client struct {
	cs  *kube.Clients
	ns  string
	log *slog.Logger
}

// New returns a Client for namespace through cs. A nil log discards.
func New(cs *kube.Clients, namespace string, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{cs: cs, ns: namespace, log: log}
}

// NewFromKubeconfig returns a Client for namespace with the credentials
// of a kubeconfig file's content (its current context). The content is a
// secret: errors never quote it.
func NewFromKubeconfig(kubeconfig []byte, namespace string, log *slog.Logger) (*Client, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, errors.New("kubeconfig: not a usable kubeconfig (its current context needs a cluster and credentials)")
	}
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return New(cs, namespace, log), nil
}

// Namespace is the namespace the Client works in.
func (c *Client) Namespace() string { return c.ns }

// Apply creates or updates the Deployment, the Service and the
// ConfigMaps of s. An update that changes the pod template (or the
// generation) is a rolling update by the Deployment's strategy.
func (c *Client) Apply(ctx context.Context, s Spec) error {
	if err := s.check(); err != nil {
		return err
	}
	name := ObjectName(s.Endpoint, s.Deployment)
	for _, sec := range s.Secrets {
		if err := c.applySecret(ctx, s, sec); err != nil {
			return err
		}
	}
	deps := c.cs.AppsV1().Deployments(c.ns)
	var applied *appsv1.Deployment
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := deps.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			replicas := int32(1)
			if s.Replicas != nil {
				replicas = *s.Replicas
			}
			applied, err = deps.Create(ctx, s.deployment(c.ns, replicas), metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if err := owned(cur.ObjectMeta, s); err != nil {
			return err
		}
		replicas := *cur.Spec.Replicas
		if s.Replicas != nil {
			replicas = *s.Replicas
		}
		want := s.deployment(c.ns, replicas)
		cur.Labels = merge(cur.Labels, want.Labels)
		cur.Spec.Replicas = want.Spec.Replicas
		cur.Spec.Template = want.Spec.Template
		cur.Spec.Strategy = want.Spec.Strategy
		cur.Spec.RevisionHistoryLimit = want.Spec.RevisionHistoryLimit
		applied, err = deps.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("deployment %s/%s: apply Deployment %s in namespace %s: %w", s.Endpoint, s.Deployment, name, c.ns, err)
	}
	if err := c.applyService(ctx, s); err != nil {
		return err
	}
	for _, cm := range s.ConfigMaps {
		if err := c.applyConfigMap(ctx, s, cm, applied); err != nil {
			return err
		}
	}
	if err := c.ownSecrets(ctx, s, applied); err != nil {
		return err
	}
	if err := c.pruneConfigMaps(ctx, s); err != nil {
		return err
	}
	c.log.Info("kubernetes deployment applied", "endpoint", s.Endpoint, "deployment", s.Deployment, "namespace", c.ns,
		"name", name, "generation", s.Generation)
	return nil
}

// owned refuses to take over an object of the same name that is not
// Ferry's for this deployment.
func owned(m metav1.ObjectMeta, s Spec) error {
	if m.Labels[LabelEndpoint] != s.Endpoint || m.Labels[LabelDeployment] != s.Deployment {
		return fmt.Errorf("deployment %s/%s: %s %s exists and is not Ferry's for this deployment (its labels %s=%q, %s=%q); delete it or use another namespace",
			s.Endpoint, s.Deployment, "object", m.Name, LabelEndpoint, m.Labels[LabelEndpoint], LabelDeployment, m.Labels[LabelDeployment])
	}
	return nil
}

func (c *Client) applyService(ctx context.Context, s Spec) error {
	svcs := c.cs.CoreV1().Services(c.ns)
	want := s.service(c.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := svcs.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = svcs.Create(ctx, want, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if err := owned(cur.ObjectMeta, s); err != nil {
			return err
		}
		cur.Labels = merge(cur.Labels, want.Labels)
		cur.Spec.Selector = want.Spec.Selector
		cur.Spec.Ports = want.Spec.Ports
		_, err = svcs.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("deployment %s/%s: apply Service %s in namespace %s: %w", s.Endpoint, s.Deployment, want.Name, c.ns, err)
	}
	return nil
}

// applyConfigMap creates cm, owned by the Deployment, unless it exists.
func (c *Client) applyConfigMap(ctx context.Context, s Spec, cm corev1.ConfigMap, owner *appsv1.Deployment) error {
	cm.Namespace = c.ns
	cm.Labels = merge(cm.Labels, labels(s.Endpoint, s.Deployment))
	cm.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "Deployment", Name: owner.Name, UID: owner.UID,
	}}
	_, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, &cm, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("deployment %s/%s: create ConfigMap %s in namespace %s: %w", s.Endpoint, s.Deployment, cm.Name, c.ns, err)
	}
	return nil
}

// applySecret creates sec, or updates the deployment's Secret of its
// name to it.
func (c *Client) applySecret(ctx context.Context, s Spec, sec corev1.Secret) error {
	secrets := c.cs.CoreV1().Secrets(c.ns)
	sec.Namespace = c.ns
	sec.Labels = merge(sec.Labels, labels(s.Endpoint, s.Deployment))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := secrets.Get(ctx, sec.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = secrets.Create(ctx, &sec, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if err := owned(cur.ObjectMeta, s); err != nil {
			return err
		}
		cur.Labels = merge(cur.Labels, sec.Labels)
		cur.Type, cur.Data, cur.StringData = sec.Type, sec.Data, nil
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		// The API server's words name the Secret, never its data.
		return fmt.Errorf("deployment %s/%s: apply Secret %s in namespace %s: %w", s.Endpoint, s.Deployment, sec.Name, c.ns, err)
	}
	return nil
}

// ownSecrets makes the Deployment the owner of s's Secrets, so that the
// cluster deletes them with it. The other Secrets of the deployment (an
// image pull Secret it no longer needs) are deleted.
func (c *Client) ownSecrets(ctx context.Context, s Spec, owner *appsv1.Deployment) error {
	secrets := c.cs.CoreV1().Secrets(c.ns)
	list, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: selector(s.Endpoint, s.Deployment)})
	if err != nil {
		return fmt.Errorf("deployment %s/%s: list Secrets: %w", s.Endpoint, s.Deployment, err)
	}
	want := map[string]bool{}
	for _, sec := range s.Secrets {
		want[sec.Name] = true
	}
	ref := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: owner.Name, UID: owner.UID}
	for _, cur := range list.Items {
		if !want[cur.Name] {
			if err := secrets.Delete(ctx, cur.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deployment %s/%s: delete Secret %s it no longer uses: %w", s.Endpoint, s.Deployment, cur.Name, err)
			}
			continue
		}
		if len(cur.OwnerReferences) == 1 && cur.OwnerReferences[0].UID == owner.UID {
			continue
		}
		cur.OwnerReferences = []metav1.OwnerReference{ref}
		if _, err := secrets.Update(ctx, &cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("deployment %s/%s: make Deployment %s the owner of Secret %s: %w", s.Endpoint, s.Deployment, owner.Name, cur.Name, err)
		}
	}
	return nil
}

// pruneConfigMaps deletes the deployment's ConfigMaps that neither s nor
// any of its ReplicaSets (old ones that still drain, or kept as history)
// mounts: those of versions the Deployment no longer keeps.
func (c *Client) pruneConfigMaps(ctx context.Context, s Spec) error {
	sel := metav1.ListOptions{LabelSelector: selector(s.Endpoint, s.Deployment)}
	cms, err := c.cs.CoreV1().ConfigMaps(c.ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("deployment %s/%s: list ConfigMaps: %w", s.Endpoint, s.Deployment, err)
	}
	used := map[string]bool{}
	for _, cm := range s.ConfigMaps {
		used[cm.Name] = true
	}
	sets, err := c.cs.AppsV1().ReplicaSets(c.ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("deployment %s/%s: list ReplicaSets: %w", s.Endpoint, s.Deployment, err)
	}
	for _, rs := range sets.Items {
		for _, v := range rs.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				used[v.ConfigMap.Name] = true
			}
		}
	}
	for _, cm := range cms.Items {
		if used[cm.Name] {
			continue
		}
		err := c.cs.CoreV1().ConfigMaps(c.ns).Delete(ctx, cm.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deployment %s/%s: delete ConfigMap %s of an old version: %w", s.Endpoint, s.Deployment, cm.Name, err)
		}
	}
	return nil
}

// Scale sets the deployment's replica count through the Deployment's
// scale subresource (what `kubectl scale` and an autoscaler use), leaving
// its template alone.
func (c *Client) Scale(ctx context.Context, endpoint, deployment string, replicas int32) error {
	if replicas < 0 {
		return fmt.Errorf("deployment %s/%s: replicas must be at least 0 (got %d)", endpoint, deployment, replicas)
	}
	name := ObjectName(endpoint, deployment)
	deps := c.cs.AppsV1().Deployments(c.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := deps.GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if sc.Spec.Replicas == replicas {
			return nil
		}
		sc.Spec = autoscalingv1.ScaleSpec{Replicas: replicas}
		_, err = deps.UpdateScale(ctx, name, sc, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("deployment %s/%s: scale Deployment %s in namespace %s: %w", endpoint, deployment, name, c.ns, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("deployment %s/%s: scale Deployment %s in namespace %s: %w", endpoint, deployment, name, c.ns, err)
	}
	c.log.Info("kubernetes deployment scaled", "endpoint", endpoint, "deployment", deployment, "namespace", c.ns, "replicas", replicas)
	return nil
}

// Delete deletes the deployment's Deployment (foreground: its
// ReplicaSets, pods, ConfigMaps and Secrets go first) and Service. It returns once
// the deletions are asked; Remaining says when everything is gone. A
// deployment with nothing on the cluster is no error.
func (c *Client) Delete(ctx context.Context, endpoint, deployment string) error {
	name := ObjectName(endpoint, deployment)
	fg := metav1.DeletePropagationForeground
	opts := metav1.DeleteOptions{PropagationPolicy: &fg}
	var errs []error
	if err := c.cs.AppsV1().Deployments(c.ns).Delete(ctx, name, opts); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete Deployment %s: %w", name, err))
	}
	if err := c.cs.CoreV1().Services(c.ns).Delete(ctx, name, opts); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete Service %s: %w", name, err))
	}
	// ConfigMaps of an Apply that failed before its Deployment existed
	// have no owner to go with.
	sel := metav1.ListOptions{LabelSelector: selector(endpoint, deployment)}
	if err := c.cs.CoreV1().ConfigMaps(c.ns).DeleteCollection(ctx, opts, sel); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete ConfigMaps: %w", err))
	}
	if err := c.cs.CoreV1().Secrets(c.ns).DeleteCollection(ctx, opts, sel); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete Secrets: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deployment %s/%s in namespace %s: %w", endpoint, deployment, c.ns, err)
	}
	c.log.Info("kubernetes deployment deleted", "endpoint", endpoint, "deployment", deployment, "namespace", c.ns)
	return nil
}

// Remaining lists what of the deployment is still on the cluster, as
// "kind/name": its Deployment, ReplicaSets, pods, Service,
// EndpointSlices, ConfigMaps and Secrets. Empty after Delete has
// finished.
func (c *Client) Remaining(ctx context.Context, endpoint, deployment string) ([]string, error) {
	name := ObjectName(endpoint, deployment)
	own := metav1.ListOptions{LabelSelector: selector(endpoint, deployment)}
	lists := []struct {
		kind string
		list func() (runtime.Object, error)
	}{
		{"deployment", func() (runtime.Object, error) {
			return c.cs.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		}},
		{"replicaset", func() (runtime.Object, error) { return c.cs.AppsV1().ReplicaSets(c.ns).List(ctx, own) }},
		{"pod", func() (runtime.Object, error) { return c.cs.CoreV1().Pods(c.ns).List(ctx, own) }},
		{"service", func() (runtime.Object, error) {
			return c.cs.CoreV1().Services(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		}},
		{"endpointslice", func() (runtime.Object, error) {
			return c.cs.DiscoveryV1().EndpointSlices(c.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		}},
		{"configmap", func() (runtime.Object, error) { return c.cs.CoreV1().ConfigMaps(c.ns).List(ctx, own) }},
		{"secret", func() (runtime.Object, error) { return c.cs.CoreV1().Secrets(c.ns).List(ctx, own) }},
	}
	var out []string
	for _, l := range lists {
		list, err := l.list()
		if err != nil {
			return nil, fmt.Errorf("deployment %s/%s: list %ss in namespace %s: %w", endpoint, deployment, l.kind, c.ns, err)
		}
		err = meta.EachListItem(list, func(o runtime.Object) error {
			m, err := meta.Accessor(o)
			if err != nil {
				return err
			}
			out = append(out, l.kind+"/"+m.GetName())
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
