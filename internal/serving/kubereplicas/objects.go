package kubereplicas

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The labels every object of a deployment carries.
const (
	LabelEndpoint   = "ferry.ml/endpoint"
	LabelDeployment = "ferry.ml/deployment"
	// LabelReplicasOf is ObjectName(endpoint, deployment): the
	// Deployment's selector and the one label that finds everything.
	LabelReplicasOf = "ferry.ml/replicas-of"
	labelManagedBy  = "app.kubernetes.io/managed-by"
	// AnnotationGeneration is, on the pod template, the caller's
	// generation of the deployment: a new one rolls the pods.
	AnnotationGeneration = "ferry.ml/generation"
)

// revisionHistory is how many old ReplicaSets a Deployment keeps.
const revisionHistory = 2

// DefaultPort is the inference server's port in a pod, Azure's
// AZUREML_INFERENCE_PORT default.
const DefaultPort = 5001

// portName names the server's port on the container, the Service and in
// the EndpointSlices.
const portName = "http"

const (
	defaultDrainDelay     = 5 * time.Second
	defaultRequestTimeout = 5 * time.Second
	// graceMargin is what the grace period gives beyond the drain delay
	// and the request timeout: the server's own exit.
	graceMargin = 5 * time.Second
)

// Spec is one online deployment as Kubernetes runs it.
type Spec struct {
	Endpoint   string
	Deployment string
	// Template is the replicas' pod template: the caller's containers,
	// image, command, volumes and resources. Apply adds the labels, the
	// probes, the port, the preStop drain, the grace period and
	// terminationMessagePolicy FallbackToLogsOnError (so that a server
	// that exits leaves the end of its log, an init() traceback, in the
	// pod's status) to the container named Container.
	Template corev1.PodTemplateSpec
	// Container names the container that runs the inference server; ""
	// is the template's first.
	Container string
	// Port is the inference server's port in the pod; 0 is DefaultPort.
	Port int32
	// Replicas is instance_count. Nil keeps the count the Deployment has
	// (Scale's, for a deployment the caller autoscales), or 1 when Apply
	// creates it.
	Replicas *int32
	// Readiness and Liveness are Azure's probe settings (times in
	// seconds; zero fields take Azure's defaults). Kubernetes wants a
	// liveness success_threshold of 1: a liveness probe's other values
	// are not Kubernetes', so 1 is used whatever it says.
	Readiness, Liveness spec.Probe
	// ProbeCommand, when set, is what both probes run in the container
	// (an exec probe: exit 0 passes) in place of GET / on the port: a
	// server that requires the replicas' secret is probed by a command
	// that reads it from the container's environment (Harness.Probe),
	// as an HTTP probe could send it only from the pod's spec.
	ProbeCommand []string
	// DrainDelay is how long a pod that is going away keeps serving
	// before it is told to stop: the time for the gateway, told by the
	// EndpointSlice, to stop sending it requests. 0 is 5 s.
	DrainDelay time.Duration
	// RequestTimeout is request_timeout_ms: after SIGTERM the server
	// finishes the requests under way for this long (the caller's command
	// gives the server the same figure). 0 is 5 s.
	RequestTimeout time.Duration
	// Generation is the caller's generation of the deployment, on the pod
	// template: a new generation rolls the pods even when nothing else in
	// the template changed.
	Generation int
	// ConfigMaps live and die with the deployment (the inference server
	// and the scoring code, HarnessConfigMap): Apply creates those that
	// are not there, owned by the Deployment, so that deleting it deletes
	// them. A ConfigMap's content is expected never to change under its
	// name (HarnessConfigMap names it by its content): a pod of an older
	// generation keeps what it mounted.
	ConfigMaps []corev1.ConfigMap
	// Secrets live and die with the deployment too (an image pull
	// Secret for the registry its image comes from; the template names
	// it): Apply creates or updates each before the Deployment, so that
	// its pods find it, then makes the Deployment their owner. Unlike a
	// ConfigMap's, a Secret's content may change under its name (a new
	// password): the pods' next pull uses it.
	Secrets []corev1.Secret
}

// ObjectName is the name of a deployment's Deployment and Service: a
// DNS-1035 label made of the endpoint's and the deployment's names, with
// a hash of both in place of what does not fit or is not allowed.
func ObjectName(endpoint, deployment string) string {
	name := endpoint + "-" + deployment
	if len(validation.IsDNS1035Label(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(endpoint + "\x00" + deployment))
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	base := strings.Trim(b.String(), "-")
	if base == "" || base[0] < 'a' {
		base = "d-" + base
	}
	base = strings.TrimRight(base[:min(len(base), 50)], "-")
	return base + "-" + hex.EncodeToString(sum[:])[:10]
}

// labels are the labels of every object of (endpoint, deployment).
func labels(endpoint, deployment string) map[string]string {
	return map[string]string{
		LabelEndpoint:   endpoint,
		LabelDeployment: deployment,
		LabelReplicasOf: ObjectName(endpoint, deployment),
		labelManagedBy:  "ferry",
	}
}

// selector finds the objects of (endpoint, deployment).
func selector(endpoint, deployment string) string {
	return LabelReplicasOf + "=" + ObjectName(endpoint, deployment)
}

// check says what in s cannot be applied, naming the field.
func (s *Spec) check() error {
	for field, v := range map[string]string{"endpoint": s.Endpoint, "deployment": s.Deployment} {
		if v == "" {
			return fmt.Errorf("kubernetes deployment: %s name is empty", field)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("kubernetes deployment: %s name %q cannot be a label value: %s", field, v, strings.Join(errs, "; "))
		}
	}
	if len(s.Template.Spec.Containers) == 0 {
		return fmt.Errorf("deployment %s/%s: the pod template has no container", s.Endpoint, s.Deployment)
	}
	if s.Container != "" && s.container(&s.Template.Spec) == nil {
		return fmt.Errorf("deployment %s/%s: the pod template has no container %q (Spec.Container)", s.Endpoint, s.Deployment, s.Container)
	}
	if s.Replicas != nil && *s.Replicas < 0 {
		return fmt.Errorf("deployment %s/%s: instance_count must be at least 0 (got %d)", s.Endpoint, s.Deployment, *s.Replicas)
	}
	for i, cm := range s.ConfigMaps {
		if cm.Name == "" {
			return fmt.Errorf("deployment %s/%s: ConfigMaps[%d] has no name", s.Endpoint, s.Deployment, i)
		}
	}
	for i, sec := range s.Secrets {
		if sec.Name == "" {
			return fmt.Errorf("deployment %s/%s: Secrets[%d] has no name", s.Endpoint, s.Deployment, i)
		}
	}
	return nil
}

func (s *Spec) container(ps *corev1.PodSpec) *corev1.Container {
	for i := range ps.Containers {
		if s.Container == "" || ps.Containers[i].Name == s.Container {
			return &ps.Containers[i]
		}
	}
	return nil
}

func (s *Spec) port() int32 { return cmp.Or(s.Port, DefaultPort) }

// podTemplate is s.Template with what Apply adds.
func (s *Spec) podTemplate() corev1.PodTemplateSpec {
	t := *s.Template.DeepCopy()
	t.Labels = merge(t.Labels, labels(s.Endpoint, s.Deployment))
	t.Annotations = merge(t.Annotations, map[string]string{AnnotationGeneration: fmt.Sprint(s.Generation)})
	drain := cmp.Or(s.DrainDelay, defaultDrainDelay)
	grace := int64((drain + cmp.Or(s.RequestTimeout, defaultRequestTimeout) + graceMargin + time.Second - 1) / time.Second)
	t.Spec.TerminationGracePeriodSeconds = &grace
	c := s.container(&t.Spec)
	port := s.port()
	found := false
	for i := range c.Ports {
		if c.Ports[i].ContainerPort == port {
			c.Ports[i].Name, found = portName, true
		}
	}
	if !found {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP})
	}
	c.ReadinessProbe = probe(s.Readiness, port, s.ProbeCommand, false)
	c.LivenessProbe = probe(s.Liveness, port, s.ProbeCommand, true)
	// The preStop sleep keeps the pod serving while the EndpointSlice
	// says it is terminating and the gateway stops routing to it; only
	// then does SIGTERM come, on which the server finishes what is under
	// way. Kubernetes' own sleep action: no sleep binary needed in the
	// image.
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Sleep: &corev1.SleepAction{Seconds: int64((drain + time.Second - 1) / time.Second)},
	}}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	}
	return t
}

// probe maps Azure's probe settings (defaults as Azure has them) to
// Kubernetes' GET / on the server's port, or to command run in the
// container when there is one.
func probe(p spec.Probe, port int32, command []string, liveness bool) *corev1.Probe {
	delay := 10
	if p.InitialDelay != nil {
		delay = *p.InitialDelay
	}
	success := int32(cmp.Or(p.SuccessThreshold, 1))
	if liveness {
		success = 1
	}
	handler := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/", Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP,
	}}
	if len(command) > 0 {
		handler = corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: slices.Clone(command)}}
	}
	return &corev1.Probe{
		ProbeHandler:        handler,
		InitialDelaySeconds: int32(delay),
		PeriodSeconds:       int32(cmp.Or(p.Period, 10)),
		TimeoutSeconds:      int32(cmp.Or(p.Timeout, 2)),
		SuccessThreshold:    success,
		FailureThreshold:    int32(cmp.Or(p.FailureThreshold, 30)),
	}
}

// deployment is the Deployment for s with replicas replicas.
func (s *Spec) deployment(namespace string, replicas int32) *appsv1.Deployment {
	name := ObjectName(s.Endpoint, s.Deployment)
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(s.Endpoint, s.Deployment)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelReplicasOf: name}},
			Template: s.podTemplate(),
			// Ferry rolls back by rolling forward (an update to the old
			// file), so it needs few old ReplicaSets; each one keeps its
			// ConfigMap alive.
			RevisionHistoryLimit: new(int32(revisionHistory)),
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				// A new pod is ready before an old one goes: a rolling
				// update never has fewer ready replicas than it started
				// with.
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one},
			},
		},
	}
}

// service is the Service whose EndpointSlices list the replicas.
func (s *Spec) service(namespace string) *corev1.Service {
	name := ObjectName(s.Endpoint, s.Deployment)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(s.Endpoint, s.Deployment)},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{LabelReplicasOf: name},
			Ports: []corev1.ServicePort{{
				Name: portName, Port: 80, TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
