package spec

import (
	"math"
	"strconv"
	"strings"
)

// Job is an Azure ML CLI v2 command job file (type: command). Field names
// follow the Azure schema; JSON uses the same names as YAML so that the API
// accepts exactly what the YAML file says.
type Job struct {
	Schema               string             `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Type                 string             `yaml:"type,omitempty" json:"type,omitempty"`
	Name                 string             `yaml:"name,omitempty" json:"name,omitempty"`
	DisplayName          string             `yaml:"display_name,omitempty" json:"display_name,omitempty"`
	ExperimentName       string             `yaml:"experiment_name,omitempty" json:"experiment_name,omitempty"`
	Description          string             `yaml:"description,omitempty" json:"description,omitempty"`
	Tags                 map[string]string  `yaml:"tags,omitempty" json:"tags,omitempty"`
	Properties           map[string]string  `yaml:"properties,omitempty" json:"properties,omitempty"`
	Code                 string             `yaml:"code,omitempty" json:"code,omitempty"`
	Command              string             `yaml:"command,omitempty" json:"command,omitempty"`
	Environment          *Environment       `yaml:"environment,omitempty" json:"environment,omitempty"`
	EnvironmentVariables map[string]string  `yaml:"environment_variables,omitempty" json:"environment_variables,omitempty"`
	Compute              string             `yaml:"compute,omitempty" json:"compute,omitempty"`
	Inputs               map[string]Input   `yaml:"inputs,omitempty" json:"inputs,omitempty"`
	Outputs              map[string]Output  `yaml:"outputs,omitempty" json:"outputs,omitempty"`
	Limits               *Limits            `yaml:"limits,omitempty" json:"limits,omitempty"`
	Resources            *Resources         `yaml:"resources,omitempty" json:"resources,omitempty"`
	Distribution         *Distribution      `yaml:"distribution,omitempty" json:"distribution,omitempty"`
	Services             map[string]Service `yaml:"services,omitempty" json:"services,omitempty"`
	QueueSettings        *QueueSettings     `yaml:"queue_settings,omitempty" json:"queue_settings,omitempty"`
	Identity             *Identity          `yaml:"identity,omitempty" json:"identity,omitempty"`
	// NotificationSetting (Azure's e-mails and webhooks on job events) is
	// kept and not used: follow a job with ferry job stream or the studio.
	NotificationSetting map[string]any `yaml:"notification_setting,omitempty" json:"notification_setting,omitempty"`

	// A sweep job's own fields (type: sweep; sweep.go).
	Trial             *Trial                 `yaml:"trial,omitempty" json:"trial,omitempty"`
	SearchSpace       map[string]SearchParam `yaml:"search_space,omitempty" json:"search_space,omitempty"`
	SamplingAlgorithm *SamplingAlgorithm     `yaml:"sampling_algorithm,omitempty" json:"sampling_algorithm,omitempty"`
	Objective         *Objective             `yaml:"objective,omitempty" json:"objective,omitempty"`
	EarlyTermination  *EarlyTermination      `yaml:"early_termination,omitempty" json:"early_termination,omitempty"`
}

// Input is a job input: either a literal (Value set; written in YAML as a
// plain scalar such as `epochs: 5`) or a data input with a type and a path.
type Input struct {
	Value *string `yaml:"value,omitempty" json:"value,omitempty"`
	Type  string  `yaml:"type,omitempty" json:"type,omitempty"` // uri_file | uri_folder | mltable | mlflow_model | custom_model
	Path  string  `yaml:"path,omitempty" json:"path,omitempty"`
	Mode  string  `yaml:"mode,omitempty" json:"mode,omitempty"` // ro_mount | download | direct
}

// Output is a job output: a folder or file the command writes.
type Output struct {
	Type string `yaml:"type,omitempty" json:"type,omitempty"` // uri_folder (default) | uri_file | mlflow_model | custom_model
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"` // rw_mount | upload | direct
	// Description is kept with the job.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Name and Version register the output as a data asset (version
	// "": the next number) when the job completes, as Azure ML does.
	Name    string `yaml:"name,omitempty" json:"name,omitempty"`
	Version string `yaml:"version,omitempty" json:"version,omitempty"`
}

// Environment is a job's software: a reference to a registered environment
// (Ref, written in YAML as a plain string such as `azureml:name:1`) or an
// inline definition.
type Environment struct {
	Ref             string            `yaml:"ref,omitempty" json:"ref,omitempty"`
	Name            string            `yaml:"name,omitempty" json:"name,omitempty"`
	Version         string            `yaml:"version,omitempty" json:"version,omitempty"`
	Description     string            `yaml:"description,omitempty" json:"description,omitempty"`
	Image           string            `yaml:"image,omitempty" json:"image,omitempty"`
	CondaFile       string            `yaml:"conda_file,omitempty" json:"conda_file,omitempty"`
	Build           *Build            `yaml:"build,omitempty" json:"build,omitempty"`
	Python          *Python           `yaml:"python,omitempty" json:"python,omitempty"`
	UserManaged     bool              `yaml:"user_managed,omitempty" json:"user_managed,omitempty"`
	InterpreterPath string            `yaml:"interpreter_path,omitempty" json:"interpreter_path,omitempty"`
	Tags            map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	// InferenceConfig (a custom inference server's routes) is taken and
	// kept, as a registered environment's is; deployments serve their
	// code_configuration's scoring script.
	InferenceConfig map[string]any `yaml:"inference_config,omitempty" json:"inference_config,omitempty"`
}

// Build is a Docker build context for an image environment.
type Build struct {
	Path           string `yaml:"path,omitempty" json:"path,omitempty"`
	DockerfilePath string `yaml:"dockerfile_path,omitempty" json:"dockerfile_path,omitempty"`
}

// Python is a virtualenv environment from a requirements file.
type Python struct {
	Requirements string `yaml:"requirements,omitempty" json:"requirements,omitempty"`
	Version      string `yaml:"version,omitempty" json:"version,omitempty"`
}

// Limits bounds a job. Timeout is in seconds; 0 means none. The trial
// fields apply to sweep jobs only: Timeout is then the whole sweep's.
type Limits struct {
	Timeout             int64 `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	MaxTotalTrials      int   `yaml:"max_total_trials,omitempty" json:"max_total_trials,omitempty"`
	MaxConcurrentTrials int   `yaml:"max_concurrent_trials,omitempty" json:"max_concurrent_trials,omitempty"`
	TrialTimeout        int64 `yaml:"trial_timeout,omitempty" json:"trial_timeout,omitempty"`
}

// Resources asks for nodes of a size.
type Resources struct {
	InstanceCount int            `yaml:"instance_count,omitempty" json:"instance_count,omitempty"`
	InstanceType  string         `yaml:"instance_type,omitempty" json:"instance_type,omitempty"`
	ShmSize       string         `yaml:"shm_size,omitempty" json:"shm_size,omitempty"`
	DockerArgs    string         `yaml:"docker_args,omitempty" json:"docker_args,omitempty"`
	Properties    map[string]any `yaml:"properties,omitempty" json:"properties,omitempty"`
	// Locations (Azure regions a serverless job may run in) is kept and
	// not used: a Ferry workspace is one place.
	Locations []string `yaml:"locations,omitempty" json:"locations,omitempty"`
}

// GPUs returns how many GPUs per instance a job asks for, 0 when it asks
// for none: a gpu count in resources.properties (gpus, gpu_count or gpu),
// as some Azure files carry, and the field it was read from.
func (r *Resources) GPUs() (n int, field string) {
	if r == nil {
		return 0, ""
	}
	for _, k := range []string{"gpus", "gpu_count", "gpu"} {
		field = "resources.properties." + k
		switch v := r.Properties[k].(type) {
		case int:
			return v, field
		case int64:
			return int(v), field
		case float64:
			return int(math.Ceil(v)), field
		case string:
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n, field
		}
	}
	return 0, ""
}

// Distribution says how a multi-process job is wired together.
type Distribution struct {
	Type                    string `yaml:"type" json:"type"` // pytorch | mpi | tensorflow
	ProcessCountPerInstance int    `yaml:"process_count_per_instance,omitempty" json:"process_count_per_instance,omitempty"`
	ParameterServerCount    int    `yaml:"parameter_server_count,omitempty" json:"parameter_server_count,omitempty"`
	WorkerCount             int    `yaml:"worker_count,omitempty" json:"worker_count,omitempty"`
}

// Service is an interactive service on the job's nodes.
type Service struct {
	Type       string         `yaml:"type" json:"type"` // jupyter_lab | ssh | tensor_board | vs_code | custom
	Port       int            `yaml:"port,omitempty" json:"port,omitempty"`
	Nodes      string         `yaml:"nodes,omitempty" json:"nodes,omitempty"`
	Properties map[string]any `yaml:"properties,omitempty" json:"properties,omitempty"`
	// LogDir (tensor_board) and SSHPublicKeys (ssh) are Azure's fields
	// for what the older files wrote as properties.logDir and
	// properties.sshPublicKeys.
	LogDir        string `yaml:"log_dir,omitempty" json:"log_dir,omitempty"`
	SSHPublicKeys string `yaml:"ssh_public_keys,omitempty" json:"ssh_public_keys,omitempty"`
}

// QueueSettings is the job tier and priority of serverless jobs.
type QueueSettings struct {
	JobTier  string `yaml:"job_tier,omitempty" json:"job_tier,omitempty"` // spot | basic | standard | premium
	Priority string `yaml:"priority,omitempty" json:"priority,omitempty"` // low | medium | high
}

// Identity is the identity a job runs under.
type Identity struct {
	Type string `yaml:"type" json:"type"` // user_identity | managed | aml_token

	// A user-assigned managed identity (type managed only).
	ClientID      string `yaml:"client_id,omitempty" json:"client_id,omitempty"`
	ObjectID      string `yaml:"object_id,omitempty" json:"object_id,omitempty"`
	MSIResourceID string `yaml:"msi_resource_id,omitempty" json:"msi_resource_id,omitempty"`

	// An endpoint's identity (type system_assigned | user_assigned |
	// none), as Azure writes it. Ferry records it; a job refuses it.
	PrincipalID            string                 `yaml:"principal_id,omitempty" json:"principal_id,omitempty"`
	TenantID               string                 `yaml:"tenant_id,omitempty" json:"tenant_id,omitempty"`
	UserAssignedIdentities []UserAssignedIdentity `yaml:"user_assigned_identities,omitempty" json:"user_assigned_identities,omitempty"`
}

// UserAssignedIdentity is one user-assigned managed identity of an
// endpoint.
type UserAssignedIdentity struct {
	ResourceID  string `yaml:"resource_id,omitempty" json:"resource_id,omitempty"`
	ClientID    string `yaml:"client_id,omitempty" json:"client_id,omitempty"`
	PrincipalID string `yaml:"principal_id,omitempty" json:"principal_id,omitempty"`
}

// Compute is an Azure ML CLI v2 compute file. Which fields apply depends on
// Type; Validate rejects fields that do not belong to the type.
type Compute struct {
	Schema      string            `yaml:"$schema,omitempty" json:"$schema,omitempty"`
	Name        string            `yaml:"name" json:"name"`
	Type        string            `yaml:"type" json:"type"` // local | amlcompute | computeinstance | virtualmachine | kubernetes | slurm
	Description string            `yaml:"description,omitempty" json:"description,omitempty"`
	Tags        map[string]string `yaml:"tags,omitempty" json:"tags,omitempty"`
	Location    string            `yaml:"location,omitempty" json:"location,omitempty"`

	// local (Ferry's own type): how many jobs run at once; 0 = CPUs of the
	// machine. kubernetes: how many attempts Ferry hands to the cluster
	// at once; 0 = 100.
	Capacity int `yaml:"capacity,omitempty" json:"capacity,omitempty"`

	// amlcompute and computeinstance
	Size                       string         `yaml:"size,omitempty" json:"size,omitempty"`
	Tier                       string         `yaml:"tier,omitempty" json:"tier,omitempty"`
	MinInstances               *int           `yaml:"min_instances,omitempty" json:"min_instances,omitempty"`
	MaxInstances               *int           `yaml:"max_instances,omitempty" json:"max_instances,omitempty"`
	IdleTimeBeforeScaleDown    *int           `yaml:"idle_time_before_scale_down,omitempty" json:"idle_time_before_scale_down,omitempty"`
	SSHPublicAccessEnabled     *bool          `yaml:"ssh_public_access_enabled,omitempty" json:"ssh_public_access_enabled,omitempty"`
	SSHSettings                *SSHSettings   `yaml:"ssh_settings,omitempty" json:"ssh_settings,omitempty"`
	NetworkSettings            map[string]any `yaml:"network_settings,omitempty" json:"network_settings,omitempty"`
	Identity                   map[string]any `yaml:"identity,omitempty" json:"identity,omitempty"`
	EnableNodePublicIP         *bool          `yaml:"enable_node_public_ip,omitempty" json:"enable_node_public_ip,omitempty"`
	IdleTimeBeforeShutdownMins *int           `yaml:"idle_time_before_shutdown_minutes,omitempty" json:"idle_time_before_shutdown_minutes,omitempty"`
	CreateOnBehalfOf           map[string]any `yaml:"create_on_behalf_of,omitempty" json:"create_on_behalf_of,omitempty"`
	Schedules                  map[string]any `yaml:"schedules,omitempty" json:"schedules,omitempty"`
	SetupScripts               map[string]any `yaml:"setup_scripts,omitempty" json:"setup_scripts,omitempty"`
	EnableRootAccess           *bool          `yaml:"enable_root_access,omitempty" json:"enable_root_access,omitempty"`
	ReleaseQuotaOnStop         *bool          `yaml:"release_quota_on_stop,omitempty" json:"release_quota_on_stop,omitempty"`
	Provider                   map[string]any `yaml:"provider,omitempty" json:"provider,omitempty"`

	// virtualmachine and kubernetes (attached); address, host_key and
	// ssh_settings are also a slurm compute's login node.
	ResourceID string         `yaml:"resource_id,omitempty" json:"resource_id,omitempty"`
	Address    string         `yaml:"address,omitempty" json:"address,omitempty"`
	HostKey    string         `yaml:"host_key,omitempty" json:"host_key,omitempty"`
	Namespace  string         `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Properties map[string]any `yaml:"properties,omitempty" json:"properties,omitempty"`

	// kubernetes (Ferry's fields; Azure reaches its clusters through
	// resource_id and the Azure Arc extension). docs/kubernetes.md has
	// what maps to what.
	//
	// Kubeconfig is a kubeconfig file on the user's machine: the CLI
	// reads it and sends its content as KubeconfigContent, which the
	// server seals at rest and never shows. Neither: the server's own
	// in-cluster service account.
	Kubeconfig        string `yaml:"kubeconfig,omitempty" json:"kubeconfig,omitempty"`
	KubeconfigContent string `yaml:"kubeconfig_content,omitempty" json:"kubeconfig_content,omitempty"`
	// KubeAPIURL replaces the kubeconfig's server URL (a cluster whose
	// kubeconfig names an address the Ferry server cannot reach).
	KubeAPIURL string `yaml:"api_url,omitempty" json:"api_url,omitempty"`
	// Image is the image of jobs whose environment names none.
	Image string `yaml:"image,omitempty" json:"image,omitempty"`
	// Registry is where Ferry pushes the images it builds for the
	// cluster (HOST[:PORT][/PREFIX], no scheme): environments built from a
	// Dockerfile or a conda file, and the runner's own image, which then
	// replaces the hostPath mount of the server's binary. The cluster's
	// nodes must pull from the same address. RegistryCredentials, when
	// the registry asks for them, are sealed at rest like the kubeconfig.
	Registry            string               `yaml:"registry,omitempty" json:"registry,omitempty"`
	RegistryCredentials *RegistryCredentials `yaml:"registry_credentials,omitempty" json:"registry_credentials,omitempty"`
	// InstanceTypes are the shapes a job picks with
	// resources.instance_type, as Azure's InstanceType custom resource
	// has them; the cluster's own InstanceType resources, when it has
	// them, are picked from beside these (these win where both name one).
	// DefaultInstanceType is the shape of a job that names none.
	InstanceTypes       map[string]KubeInstanceType `yaml:"instance_types,omitempty" json:"instance_types,omitempty"`
	DefaultInstanceType string                      `yaml:"default_instance_type,omitempty" json:"default_instance_type,omitempty"`
	// ClusterInstanceTypes are the cluster's InstanceType resources as
	// the server read them at attach, but for those InstanceTypes names
	// (what `compute show` lists and deployments pick from; jobs read the
	// cluster afresh). The server sets them; a file does not.
	ClusterInstanceTypes map[string]KubeInstanceType `yaml:"-" json:"cluster_instance_types,omitempty"`
	// PodTemplate is a Kubernetes PodTemplateSpec (metadata and spec) that
	// every pod of a job starts from: volumes, a service account, a
	// security context; a container named "runner" in it is the base of
	// the job's container (imagePullPolicy, volumeMounts, ...).
	PodTemplate map[string]any `yaml:"pod_template,omitempty" json:"pod_template,omitempty"`

	// slurm (Ferry's own type; Azure has none): an existing Slurm cluster,
	// submitted to on this host, or over SSH to the login node at address
	// when address is given. docs/slurm.md has what maps to what.
	Partition   string `yaml:"partition,omitempty" json:"partition,omitempty"`
	Account     string `yaml:"account,omitempty" json:"account,omitempty"`
	QOS         string `yaml:"qos,omitempty" json:"qos,omitempty"`
	Constraint  string `yaml:"constraint,omitempty" json:"constraint,omitempty"`
	Reservation string `yaml:"reservation,omitempty" json:"reservation,omitempty"`
	// DefaultTimeLimit is the time limit, in seconds, of a job without
	// limits.timeout; 0 leaves it to the partition's default.
	DefaultTimeLimit int64 `yaml:"default_time_limit,omitempty" json:"default_time_limit,omitempty"`
	// JobTierQOS maps queue_settings.job_tier to the QOS a job of that tier
	// is submitted with; PriorityNice maps queue_settings.priority to a
	// --nice value. A job naming a tier or priority the map lacks is
	// refused at submit.
	JobTierQOS   map[string]string `yaml:"job_tier_qos,omitempty" json:"job_tier_qos,omitempty"`
	PriorityNice map[string]int    `yaml:"priority_nice,omitempty" json:"priority_nice,omitempty"`
	// WorkDir is a directory that the submitting host and every compute
	// node see at the same path: job scripts, Slurm's output and the
	// runners' attempt folders live under it.
	WorkDir string `yaml:"work_dir,omitempty" json:"work_dir,omitempty"`
}

// RegistryCredentials log in to a kubernetes compute's registry, to push
// (the server) and to pull (the pods, through an imagePullSecret).
// Password is a secret: sealed at rest, never shown.
type RegistryCredentials struct {
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	Password string `yaml:"password,omitempty" json:"password,omitempty"`
}

// RegistryLogin is the username and password of the compute's
// registry_credentials, "" and "" when it has none.
func (c *Compute) RegistryLogin() (username, password string) {
	if rc := c.RegistryCredentials; rc != nil {
		return rc.Username, rc.Password
	}
	return "", ""
}

// KubeInstanceType is one named shape of pod on a Kubernetes compute, as
// the spec of Azure's InstanceType custom resource
// (amlarc.azureml.com/v1alpha1) has it. Quantities are Kubernetes'
// ("500m", "4Gi", "1").
type KubeInstanceType struct {
	NodeSelector map[string]string `yaml:"nodeSelector,omitempty" json:"nodeSelector,omitempty"`
	Resources    KubeResources     `yaml:"resources,omitempty" json:"resources,omitempty"`
	Tolerations  []KubeToleration  `yaml:"tolerations,omitempty" json:"tolerations,omitempty"`
}

// KubeResources are a container's resource requests and limits, by
// resource name (cpu, memory, nvidia.com/gpu).
type KubeResources struct {
	Requests map[string]string `yaml:"requests,omitempty" json:"requests,omitempty"`
	Limits   map[string]string `yaml:"limits,omitempty" json:"limits,omitempty"`
}

// KubeToleration is a pod toleration, as Kubernetes writes it.
type KubeToleration struct {
	Key               string `yaml:"key,omitempty" json:"key,omitempty"`
	Operator          string `yaml:"operator,omitempty" json:"operator,omitempty"`
	Value             string `yaml:"value,omitempty" json:"value,omitempty"`
	Effect            string `yaml:"effect,omitempty" json:"effect,omitempty"`
	TolerationSeconds *int64 `yaml:"tolerationSeconds,omitempty" json:"tolerationSeconds,omitempty"`
}

// SSHSettings are the SSH login of a compute.
type SSHSettings struct {
	AdminUsername     string `yaml:"admin_username,omitempty" json:"admin_username,omitempty"`
	AdminPassword     string `yaml:"admin_password,omitempty" json:"admin_password,omitempty"`
	SSHKeyValue       string `yaml:"ssh_key_value,omitempty" json:"ssh_key_value,omitempty"`
	SSHPrivateKeyFile string `yaml:"ssh_private_key_file,omitempty" json:"ssh_private_key_file,omitempty"`
	SSHPort           int    `yaml:"ssh_port,omitempty" json:"ssh_port,omitempty"`
	// SSHPrivateKeyPassphrase unlocks an encrypted ssh_private_key_file
	// (Ferry's addition; Azure has none).
	SSHPrivateKeyPassphrase string `yaml:"ssh_private_key_passphrase,omitempty" json:"ssh_private_key_passphrase,omitempty"`
	// SSHPrivateKey is the content of a private key (Ferry's addition).
	// The CLI reads ssh_private_key_file on the user's machine and sends
	// the key here, since the server does not read files named by a
	// request.
	SSHPrivateKey string `yaml:"ssh_private_key,omitempty" json:"ssh_private_key,omitempty"`
}
