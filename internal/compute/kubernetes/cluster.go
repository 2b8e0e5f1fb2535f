package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferry-ml/ferry/internal/kube"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Cluster is a connection to the cluster of one kubernetes compute: what
// any part of Ferry that puts objects there (training jobs here, online
// deployments elsewhere) needs. Connect makes one.
type Cluster struct {
	// Client and Dynamic talk to the cluster's API with the compute's
	// credentials.
	Client  *kube.Clients
	Dynamic dynamic.Interface
	// Namespace is where Ferry's objects go.
	Namespace string
	// Host is the API server's URL (no credentials in it), for messages.
	Host string
}

// requestTimeout bounds one API request, so that a cluster that stopped
// answering fails a launch or a check instead of hanging it.
const requestTimeout = 30 * time.Second

// clientQPS and clientBurst are the client-side rate limit of the
// target's requests to the cluster's API (restConfig).
const (
	clientQPS   = 50
	clientBurst = 100
)

// Connect returns a client for the cluster of c, a kubernetes compute whose
// kubeconfig_content is open (workspace.OpenCompute): its kubeconfig's
// current context, with api_url in place of its server when given; the
// server's in-cluster service account when c has no kubeconfig. It makes
// no request. Its errors name the field to fix and never hold the
// kubeconfig.
func Connect(c *spec.Compute) (*Cluster, error) {
	cfg, err := restConfig(c)
	if err != nil {
		return nil, err
	}
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, &CheckError{Field: "kubeconfig", Msg: fmt.Sprintf("cannot make a client: %v", err)}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, &CheckError{Field: "kubeconfig", Msg: fmt.Sprintf("cannot make a client: %v", err)}
	}
	return &Cluster{Client: cs, Dynamic: dyn, Namespace: c.Namespace, Host: cfg.Host}, nil
}

func restConfig(c *spec.Compute) (*rest.Config, error) {
	var cfg *rest.Config
	if c.KubeconfigContent == "" {
		in, err := rest.InClusterConfig()
		if err != nil {
			return nil, &CheckError{Field: "kubeconfig", Msg: "is required: give kubeconfig: PATH (a kubeconfig file whose current context reaches the cluster), or run the Ferry server inside the cluster with a service account"}
		}
		cfg = in
	} else {
		// The content is a secret: a parse error is reported without it.
		kc, err := clientcmd.RESTConfigFromKubeConfig([]byte(c.KubeconfigContent))
		if err != nil {
			return nil, &CheckError{Field: "kubeconfig", Msg: "is not a kubeconfig whose current context names a cluster and a user: " + kubeconfigProblem(err)}
		}
		cfg = kc
	}
	if c.KubeAPIURL != "" {
		cfg.Host = c.KubeAPIURL
	}
	cfg.Timeout = requestTimeout
	cfg.UserAgent = "ferry"
	// client-go's default, 5 requests/s with bursts of 10, is a command
	// line tool's. The target makes about ten requests per attempt (its
	// Secret, Service and Job, their owner references, their deletes):
	// in a burst of 100 jobs (bench/kubernetes) its requests waited 1 to
	// 3 s each on that limit. The cluster's own scheduler allows itself
	// 50/s with bursts of 100, as the target now does.
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	return cfg, nil
}

// kubeconfigProblem is what clientcmd said of a kubeconfig, cut to its
// first line: its messages name contexts and fields, not the credentials,
// but a YAML error could quote a line, so a long one is not shown.
func kubeconfigProblem(err error) string {
	msg := err.Error()
	if len(msg) > 160 {
		return "it does not parse"
	}
	return msg
}

// InstanceTypeGVR is Azure's InstanceType custom resource, which Azure's
// Kubernetes extension installs.
var InstanceTypeGVR = schema.GroupVersionResource{Group: "amlarc.azureml.com", Version: "v1alpha1", Resource: "instancetypes"}

// InstanceTypes are the instance types jobs on the cluster may pick: the
// cluster's InstanceType resources (when it has the custom resource and
// the credentials may list it) and c's instance_types beside them, with
// c's winning where both name one. The file wins because it is this
// compute's own setting, where a resource is the whole cluster's: several
// computes (namespaces, teams, Ferry servers) share one cluster, and an
// InstanceType someone adds must not change the shape of a type a compute
// already names. fromCluster are the names read from the cluster.
func (cl *Cluster) InstanceTypes(ctx context.Context, c *spec.Compute) (types map[string]spec.KubeInstanceType, fromCluster map[string]bool, err error) {
	types = maps.Clone(c.InstanceTypes)
	if types == nil {
		types = map[string]spec.KubeInstanceType{}
	}
	list, err := cl.Dynamic.Resource(InstanceTypeGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		var status apierrors.APIStatus
		if apierrors.IsNotFound(err) || (errors.As(err, &status) && status.Status().Code == 404) {
			return types, nil, nil // the cluster has no such resource
		}
		if apierrors.IsForbidden(err) {
			return types, nil, nil // not ours to read; the file's
		}
		return nil, nil, err
	}
	for _, item := range list.Items {
		name := item.GetName()
		if _, ok := types[name]; ok {
			continue
		}
		s, _ := item.Object["spec"].(map[string]any)
		types[name] = instanceTypeFromCR(s)
		if fromCluster == nil {
			fromCluster = map[string]bool{}
		}
		fromCluster[name] = true
	}
	return types, fromCluster, nil
}

// instanceTypeFromCR reads the spec of an InstanceType resource; numbers
// (nvidia.com/gpu: 1) become quantities.
func instanceTypeFromCR(s map[string]any) spec.KubeInstanceType {
	var it spec.KubeInstanceType
	it.NodeSelector = stringMap(s["nodeSelector"])
	res, _ := s["resources"].(map[string]any)
	it.Resources.Requests = stringMap(res["requests"])
	it.Resources.Limits = stringMap(res["limits"])
	tols, _ := s["tolerations"].([]any)
	for _, t := range tols {
		m, _ := t.(map[string]any)
		tol := spec.KubeToleration{Key: str(m["key"]), Operator: str(m["operator"]), Value: str(m["value"]), Effect: str(m["effect"])}
		if n, ok := m["tolerationSeconds"].(int64); ok {
			tol.TolerationSeconds = &n
		}
		it.Tolerations = append(it.Tolerations, tol)
	}
	return it
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
