package apitypes

import (
	"cmp"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// OnlineEndpoint is an online endpoint as the API shows it: never its
// keys (GetEndpointCredentials is the one place they are given).
type OnlineEndpoint struct {
	Name                string            `json:"name"`
	Description         string            `json:"description,omitempty"`
	Tags                map[string]string `json:"tags,omitempty"`
	Properties          map[string]string `json:"properties,omitempty"`
	AuthMode            string            `json:"auth_mode"`
	Traffic             map[string]int    `json:"traffic"`
	MirrorTraffic       map[string]int    `json:"mirror_traffic"`
	ScoringURI          string            `json:"scoring_uri"`
	ProvisioningState   string            `json:"provisioning_state"`
	PublicNetworkAccess string            `json:"public_network_access,omitempty"`
	Identity            *spec.Identity    `json:"identity,omitempty"`
	// Compute is the kubernetes compute the endpoint's deployments run on
	// (azureml:NAME), but for managedOnlineDeployments; "" for a managed
	// endpoint.
	Compute string `json:"compute,omitempty"`
	// Deployments are the gateway's counts of each deployment's requests
	// since the server started; those that had none are left out.
	Deployments map[string]*DeploymentStats `json:"deployment_stats,omitempty"`
	Created     time.Time                   `json:"created"`
	Updated     time.Time                   `json:"updated"`
}

// EndpointKeys are an endpoint's credentials, named as `az ml
// online-endpoint get-credentials` prints them: the two keys of an
// endpoint with auth_mode key, or a token (and when it expires) of one
// with auth_mode aml_token.
type EndpointKeys struct {
	PrimaryKey          string `json:"primaryKey,omitempty"`
	SecondaryKey        string `json:"secondaryKey,omitempty"`
	AccessToken         string `json:"accessToken,omitempty"`
	TokenType           string `json:"tokenType,omitempty"`
	ExpiryTimeUTC       int64  `json:"expiryTimeUtc,omitempty"`
	RefreshAfterTimeUTC int64  `json:"refreshAfterTimeUtc,omitempty"`
}

// Credential is what a client sends: the primary key, or the token.
func (k *EndpointKeys) Credential() string { return cmp.Or(k.PrimaryKey, k.AccessToken) }

// EndpointUpdate changes an endpoint: a nil field keeps what the endpoint
// has; an empty, non-nil map clears it. AuthMode, when given, must be the
// endpoint's (it cannot change).
type EndpointUpdate struct {
	Description   *string           `json:"description,omitempty"`
	Tags          map[string]string `json:"tags"`
	Traffic       map[string]int    `json:"traffic"`
	MirrorTraffic map[string]int    `json:"mirror_traffic"`
	AuthMode      string            `json:"auth_mode,omitempty"`
}

// Provisioning states of a deployment, as Azure names them.
const (
	DeploymentCreating  = "Creating"
	DeploymentUpdating  = "Updating"
	DeploymentSucceeded = "Succeeded"
	DeploymentFailed    = "Failed"
	DeploymentDeleting  = "Deleting"
)

// DeploymentUploads are the snapshots the CLI uploaded for a deployment:
// its code folder, an inline model's files, and the files an inline
// environment refers to.
type DeploymentUploads struct {
	CodeSnapshot        string `json:"code_snapshot"`
	ModelSnapshot       string `json:"model_snapshot,omitempty"`
	EnvironmentSnapshot string `json:"environment_snapshot,omitempty"`
}

// OnlineDeployment is a deployment as the API shows it: its file, where
// its replicas run, its state and its replicas.
type OnlineDeployment struct {
	*spec.OnlineDeployment
	// ModelID is the registered model it serves (azureml:NAME:VERSION);
	// empty for an inline model.
	ModelID           string `json:"model_id,omitempty"`
	Compute           string `json:"compute"`
	Local             bool   `json:"local,omitempty"`
	ProvisioningState string `json:"provisioning_state"`
	// Reason says why the deployment failed (for example the traceback
	// of the scoring script's init()).
	Reason   string              `json:"reason,omitempty"`
	Replicas []DeploymentReplica `json:"replicas"`
	Stats    *DeploymentStats    `json:"stats,omitempty"`
	Created  time.Time           `json:"created"`
	Updated  time.Time           `json:"updated"`
}

// The states of a replica.
const (
	// ReplicaPreparing: its job is queued or preparing, or its server
	// has not answered yet.
	ReplicaPreparing = "Preparing"
	// ReplicaReady: it takes requests.
	ReplicaReady = "Ready"
	// ReplicaNotReady: it was ready, and its readiness probe now fails;
	// it takes no requests until it passes again.
	ReplicaNotReady = "NotReady"
	// ReplicaDraining: it takes no new requests, finishes those it has,
	// then stops (scaled down, replaced by an update, or deleted).
	ReplicaDraining = "Draining"
)

// DeploymentReplica is one replica: its job and where it stands.
type DeploymentReplica struct {
	Job        string `json:"job"`
	Generation int    `json:"generation"`
	State      string `json:"state"` // Replica*
	Address    string `json:"address,omitempty"`
	// Socket is the Unix socket the gateway reaches the replica at, when
	// the replica runs on the server's host; otherwise it uses Address.
	Socket string `json:"socket,omitempty"`
	// WorkerSockets are its workers' own sockets, where the gateway sends
	// its requests when it has them (balancing across the workers
	// itself); otherwise requests go to Socket or Address.
	WorkerSockets []string `json:"worker_sockets,omitempty"`
	// JobStatus is its job's status and, while it waits, why.
	JobStatus string `json:"job_status"`
	Reason    string `json:"reason,omitempty"`
}

// DeploymentStats are a deployment's request counts and latencies at the
// gateway since the server started.
type DeploymentStats struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
}

// BatchEndpoint is a batch endpoint as the API shows it.
type BatchEndpoint struct {
	*spec.BatchEndpoint
	ProvisioningState string    `json:"provisioning_state"`
	Deployments       []string  `json:"deployments"`
	Created           time.Time `json:"created"`
	Updated           time.Time `json:"updated"`
}

// BatchDeployment is a batch deployment as the API shows it.
type BatchDeployment struct {
	*spec.BatchDeployment
	// ModelID is the registered model it scores with; empty for an
	// inline model.
	ModelID           string    `json:"model_id,omitempty"`
	Default           bool      `json:"default"`
	ProvisioningState string    `json:"provisioning_state"`
	Created           time.Time `json:"created"`
	Updated           time.Time `json:"updated"`
}

// BatchInvocation is what an invocation scores: Path (a registered data
// asset azureml:NAME:VERSION or NAME@latest, a URL) or Snapshot (a local
// file or folder the CLI uploaded), of Type uri_folder or uri_file.
type BatchInvocation struct {
	Deployment string `json:"deployment_name,omitempty"`
	Type       string `json:"type,omitempty"`
	Path       string `json:"path,omitempty"`
	Snapshot   string `json:"snapshot,omitempty"`
	// JobName names the job; made up when empty.
	JobName string `json:"job_name,omitempty"`
}
