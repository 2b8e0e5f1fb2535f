package workspace

import (
	"context"

	"github.com/ferry-ml/ferry/internal/spec"
)

// KubeReplicas runs the replicas of an online deployment on a Kubernetes
// compute (Azure's kubernetesOnlineDeployment) instead of as replica jobs
// on pool nodes: a Deployment and a Service in the compute's namespace,
// which the cluster keeps running, rolls and replaces. The server gives
// the implementation (package internal/serving/kubereplicas behind it;
// the workspace links no Kubernetes client); docs/kubernetes.md says how
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
	// Code and Model are the code folder's and the model's files by
	// slash-separated path; a model that is a folder is under its
	// folder's name, as AZUREML_MODEL_DIR holds it on Azure.
	Code, Model map[string][]byte
	// InstanceType is the Kubernetes compute's instance type the
	// deployment's instance_type names.
	InstanceType KubeInstanceType
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
