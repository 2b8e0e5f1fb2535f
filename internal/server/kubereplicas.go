package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/envimage"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/imagereg"
	"github.com/ferry-ml/ferry/internal/serving/kubereplicas"
	"github.com/ferry-ml/ferry/internal/workload/online"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeReplicas is the online endpoints' KubeReplicas on package kubereplicas:
// one client per cluster and namespace, made on first use. It builds the
// images of environments Ferry builds with the pushers the kubernetes
// target's jobs use (one per registry and login), so that a job and a
// deployment of one environment build it once.
type kubeReplicas struct {
	log     *slog.Logger
	images  *envimage.Pushers
	mu      sync.Mutex
	clients map[[32]byte]*kubereplicas.Client // by sha256 of namespace and kubeconfig
}

var (
	_ online.KubeReplicas     = (*kubeReplicas)(nil)
	_ online.KubeImageBuilder = (*kubeReplicas)(nil)
)

func newKubeReplicas(log *slog.Logger, images *envimage.Pushers) *kubeReplicas {
	return &kubeReplicas{log: log, images: images, clients: map[[32]byte]*kubereplicas.Client{}}
}

// EnvImage implements online.KubeImageBuilder.
func (k *kubeReplicas) EnvImage(ctx context.Context, reg online.KubeRegistry, env *environment.Spec) (string, error) {
	p, err := k.images.For(reg.Address, reg.Username, reg.Password)
	if err != nil {
		return "", err
	}
	return p.EnvImage(ctx, env)
}

func (k *kubeReplicas) client(at online.KubeTarget) (*kubereplicas.Client, error) {
	if at.Namespace == "" {
		return nil, fmt.Errorf("kubernetes compute: namespace is empty")
	}
	key := sha256.Sum256(append([]byte(at.Namespace+"\x00"), at.Kubeconfig...))
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.clients[key]; c != nil {
		return c, nil
	}
	c, err := kubereplicas.NewFromKubeconfig(at.Kubeconfig, at.Namespace, k.log)
	if err != nil {
		return nil, err
	}
	k.clients[key] = c
	return c, nil
}

// Apply builds the inference server's pod for d and applies it, with
// the Secret its replicas' secret comes from.
func (k *kubeReplicas) Apply(ctx context.Context, d online.KubeDeployment) error {
	c, err := k.client(d.Target)
	if err != nil {
		return err
	}
	s, err := kubeSpec(d)
	if err != nil {
		return err
	}
	return c.Apply(ctx, s)
}

// kubeSpec is d as package kubereplicas takes it.
func kubeSpec(d online.KubeDeployment) (kubereplicas.Spec, error) {
	if d.Spec == nil {
		return kubereplicas.Spec{}, fmt.Errorf("deployment %s/%s: no deployment file", d.Endpoint, d.Deployment)
	}
	f := d.Spec
	id := d.Endpoint + "/" + d.Deployment
	res, err := kubeResources(id, d.InstanceType)
	if err != nil {
		return kubereplicas.Spec{}, err
	}
	var timeout time.Duration
	if f.RequestSettings != nil {
		timeout = time.Duration(f.RequestSettings.RequestTimeoutMS) * time.Millisecond
	}
	script := ""
	if f.CodeConfiguration != nil {
		script = f.CodeConfiguration.ScoringScript
	}
	// The pods answer only the gateway, as every replica of Ferry's does.
	if d.ReplicaSecret == "" {
		return kubereplicas.Spec{}, fmt.Errorf("deployment %s: no replica secret: its pods would answer whoever reaches them", id)
	}
	h, err := kubereplicas.NewHarness(kubereplicas.HarnessOptions{
		Endpoint: d.Endpoint, Deployment: d.Deployment, Image: d.Image,
		Code: d.Code, ScoringScript: script, Model: d.Model,
		Env: f.EnvironmentVariables, RequestTimeout: timeout, Resources: res,
		Secret: d.ReplicaSecret.Reveal(),
	})
	if err != nil {
		return kubereplicas.Spec{}, err
	}
	ps := &h.Template.Spec
	secrets := []corev1.Secret{*h.Secret}
	if pull, err := pullSecret(d); err != nil {
		return kubereplicas.Spec{}, err
	} else if pull != nil {
		secrets = append(secrets, *pull)
		ps.ImagePullSecrets = []corev1.LocalObjectReference{{Name: pull.Name}}
	}
	ps.NodeSelector = maps.Clone(d.InstanceType.NodeSelector)
	for _, t := range d.InstanceType.Tolerations {
		ps.Tolerations = append(ps.Tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator),
			Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	s := kubereplicas.Spec{
		Endpoint: d.Endpoint, Deployment: d.Deployment, Generation: d.Generation,
		Template: h.Template, ConfigMaps: []corev1.ConfigMap{h.ConfigMap}, Secrets: secrets,
		ProbeCommand: h.Probe, RequestTimeout: timeout,
	}
	if f.ReadinessProbe != nil {
		s.Readiness = *f.ReadinessProbe
	}
	if f.LivenessProbe != nil {
		s.Liveness = *f.LivenessProbe
	}
	if d.Replicas != nil {
		s.Replicas = new(int32(*d.Replicas))
	}
	return s, nil
}

// pullSecret is the image pull Secret of a deployment on a compute whose
// registry has a login (a .dockerconfigjson, as the kubernetes target's
// jobs get), or nil.
func pullSecret(d online.KubeDeployment) (*corev1.Secret, error) {
	r := d.Registry
	if r == nil || r.Username == "" {
		return nil, nil
	}
	reg, err := imagereg.New(r.Address, r.Username, r.Password)
	if err != nil {
		return nil, err
	}
	cfg, err := envimage.DockerConfig(reg.Host(), r.Username, r.Password)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: kubereplicas.ObjectName(d.Endpoint, d.Deployment) + "-pull"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}, nil
}

// kubeResources reads an instance type's quantities, naming the one that
// is not a quantity.
func kubeResources(id string, it online.KubeInstanceType) (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	for _, part := range []struct {
		field string
		in    map[string]string
		out   *corev1.ResourceList
	}{{"requests", it.Requests, &out.Requests}, {"limits", it.Limits, &out.Limits}} {
		for _, name := range slices.Sorted(maps.Keys(part.in)) {
			q, err := resource.ParseQuantity(part.in[name])
			if err != nil {
				return out, fmt.Errorf("deployment %s: instance type resources.%s.%s: %q is not a quantity (like 500m, 2Gi or 1)", id, part.field, name, part.in[name])
			}
			if *part.out == nil {
				*part.out = corev1.ResourceList{}
			}
			(*part.out)[corev1.ResourceName(name)] = q
		}
	}
	return out, nil
}

func (k *kubeReplicas) Scale(ctx context.Context, at online.KubeTarget, endpoint, deployment string, replicas int) error {
	c, err := k.client(at)
	if err != nil {
		return err
	}
	return c.Scale(ctx, endpoint, deployment, int32(replicas))
}

func (k *kubeReplicas) Status(ctx context.Context, at online.KubeTarget, endpoint, deployment string) (online.KubeState, error) {
	c, err := k.client(at)
	if err != nil {
		return online.KubeState{}, err
	}
	st, err := c.Status(ctx, endpoint, deployment)
	if err != nil {
		return online.KubeState{}, err
	}
	return online.KubeState{State: st.State, Reason: st.Reason, Desired: int(st.Desired), Ready: int(st.Ready),
		Updated: int(st.Updated), Generation: st.Generation}, nil
}

func (k *kubeReplicas) WatchReady(ctx context.Context, at online.KubeTarget, endpoint, deployment string, onChange func([]string)) (func(), error) {
	c, err := k.client(at)
	if err != nil {
		return nil, err
	}
	return c.WatchReady(ctx, endpoint, deployment, onChange)
}

func (k *kubeReplicas) Delete(ctx context.Context, at online.KubeTarget, endpoint, deployment string) error {
	c, err := k.client(at)
	if err != nil {
		return err
	}
	return c.Delete(ctx, endpoint, deployment)
}

func (k *kubeReplicas) Remaining(ctx context.Context, at online.KubeTarget, endpoint, deployment string) ([]string, error) {
	c, err := k.client(at)
	if err != nil {
		return nil, err
	}
	return c.Remaining(ctx, endpoint, deployment)
}
