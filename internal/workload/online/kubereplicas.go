package online

import (
	"context"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
)

// KubeReplicas runs the replicas of an online deployment on a Kubernetes
// compute (Azure's kubernetesOnlineDeployment) instead of as replica jobs
// on pool nodes: a Deployment and a Service in the compute's namespace,
// which the cluster keeps running, rolls and replaces. The server gives
// the implementation (package internal/serving/kubereplicas behind it;
// the online endpoints link no Kubernetes client); docs/kubernetes.md says how
// a deployment maps to the cluster's objects.
//
// Config.KubeReplicas gives it to the deployment controller, whose
// branch for deployments on a Kubernetes compute is kubedeploy.go. The
// server's implementation is internal/server's kubeReplicas.
//
// Methods are safe for concurrent use.
type KubeReplicas interface {
	// Apply creates or updates the deployment's objects; a changed
	// generation is a rolling update that never drops capacity.
	Apply(ctx context.Context, d KubeDeployment) error
	// Scale sets the replica count (autoscale's target, through the
	// Deployment's scale subresource).
	Scale(ctx context.Context, at KubeTarget, endpoint, deployment string, replicas int) error
	// Status is the deployment's state as Azure names it, with the
	// reason (a crashed replica's traceback, an image error, the
	// scheduler's message).
	Status(ctx context.Context, at KubeTarget, endpoint, deployment string) (KubeState, error)
	// WatchReady calls onChange with the base URLs of the ready replicas
	// whenever they change (first with what is there), until stop.
	WatchReady(ctx context.Context, at KubeTarget, endpoint, deployment string, onChange func(replicas []string)) (stop func(), err error)
	// Delete deletes the deployment's objects (foreground); Remaining
	// lists what is left of them ("kind/name"), empty once all are gone.
	Delete(ctx context.Context, at KubeTarget, endpoint, deployment string) error
	Remaining(ctx context.Context, at KubeTarget, endpoint, deployment string) ([]string, error)
}

// KubeImageBuilder is the optional power of a KubeReplicas to build the
// image of an environment Ferry builds (a Dockerfile, or a conda file on
// an image: environment.NeedsImageBuild) and push it to a Kubernetes
// compute's registry, as the kubernetes target does for training jobs
// (the server's implementation shares its code and its cache of what was
// pushed). Without it, deployments on a Kubernetes compute take only
// images the cluster pulls as they are.
//
// EnvImage returns the reference, by digest, of env's image in reg,
// built on the server's Docker engine and pushed unless reg has it
// already (a restarted server finds its tag and pushes nothing). It can
// take minutes: the controller calls it outside its lock. Concurrent
// calls for one environment and registry build once. A failed build's
// error ends with the build's last output; no error holds the password.
type KubeImageBuilder interface {
	EnvImage(ctx context.Context, reg KubeRegistry, env *environment.Spec) (string, error)
}

// KubeRegistry is a Kubernetes compute's registry: where the images
// Ferry builds go and the cluster pulls them from. Password is a
// secret: never logged, shown or put in an error.
type KubeRegistry struct {
	Address            string // HOST[:PORT][/PREFIX]
	Username, Password string // "" for a registry without a login
}

// KubeTarget is where a Kubernetes compute's deployments run. Kubeconfig
// is a secret: never logged, shown or put in an error.
type KubeTarget struct {
	Kubeconfig []byte
	Namespace  string
}

// KubeDeployment is what KubeReplicas.Apply runs: the deployment's file
// (instance_count, probes, environment variables, request settings), its
// files and where its pods go.
type KubeDeployment struct {
	Target               KubeTarget
	Endpoint, Deployment string
	Generation           int
	Spec                 *spec.OnlineDeployment
	// Replicas is how many to run; nil keeps the cluster's count (a
	// deployment autoscale sizes with Scale).
	Replicas *int
	// Image runs the inference server (the environment's image, which
	// has python3 and what the scoring script imports).
	Image string
	// Registry is the compute's registry, nil when it has none: with a
	// login, the pods pull with it (an image pull Secret of the
	// deployment's).
	Registry *KubeRegistry
	// Code and Model are the code folder's and the model's files by
	// slash-separated path; a model that is a folder is under its
	// folder's name, as AZUREML_MODEL_DIR holds it on Azure.
	Code, Model map[string][]byte
	// InstanceType is the Kubernetes compute's instance type the
	// deployment's instance_type names.
	InstanceType KubeInstanceType
	// ReplicaSecret is the replicas' secret (Service.kubeReplicaSecret):
	// the pods answer only requests that carry it, which the gateway's
	// do. The implementation gives it to them through a Kubernetes
	// Secret of the deployment's (never the pod template, which anyone
	// who may read pods sees) and probes them with it; it never logs
	// it nor puts it in an error.
	ReplicaSecret secrets.Secret
}

// KubeInstanceType is a named pod shape of a Kubernetes compute, as
// Azure's InstanceType resource has it.
type KubeInstanceType struct {
	NodeSelector map[string]string
	// Requests and Limits map a resource name (cpu, memory,
	// nvidia.com/gpu) to a quantity ("500m", "2Gi", "1").
	Requests, Limits map[string]string
	Tolerations      []KubeToleration
}

// KubeToleration lets a pod on nodes with a matching taint.
type KubeToleration struct {
	Key, Operator, Value, Effect string
}

// KubeState is a deployment's state on the cluster.
type KubeState struct {
	State      string // DeploymentCreating, DeploymentUpdating, DeploymentSucceeded or DeploymentFailed
	Reason     string
	Desired    int
	Ready      int
	Updated    int // replicas of the current generation
	Generation int // the generation of the current template
}
