package kubereplicas

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxConfigMapBytes bounds what NewHarness puts in its ConfigMap: the API
// server refuses a ConfigMap over 1 MiB.
const MaxConfigMapBytes = 1000 << 10

// Where the harness's ConfigMap is mounted in the pod, and its folders.
const (
	harnessMount = "/ferry"
	serverDir    = "server"
	codeDir      = "code"
	modelDir     = "model"
)

// HarnessOptions say what NewHarness builds.
type HarnessOptions struct {
	Endpoint, Deployment string
	// Image has the Python (3.8 or later) the server runs under and the
	// packages the scoring script imports; PullPolicy is how the
	// cluster gets it ("" is IfNotPresent).
	Image      string
	PullPolicy corev1.PullPolicy
	// Python is the interpreter's command in the image; "" is python3.
	Python string
	// Code is the code folder's files by slash-separated path;
	// ScoringScript is the scoring script's path in it.
	Code          map[string][]byte
	ScoringScript string
	// Model, when not nil, is the model's files by path:
	// AZUREML_MODEL_DIR points at them.
	Model map[string][]byte
	// Env is environment_variables; WORKER_COUNT is 1 unless it says.
	Env map[string]string
	// RequestTimeout is request_timeout_ms: how long the server finishes
	// requests under way after SIGTERM. 0 is 5 s.
	RequestTimeout time.Duration
	// Resources are the instance type's requests and limits.
	Resources corev1.ResourceRequirements
	// Secret, when set, is the replicas' secret: the server answers only
	// requests that carry it in inferenceserver.SecretHeader (401
	// without, 403 wrong) and does not start without it. The Harness's
	// Secret holds it and the container's environment takes it from
	// there, so that the pod template (which anyone who may read pods
	// or Deployments sees) never does; the probes are a command in the
	// container that sends it (Harness.Probe). Ferry's deployments
	// always have one; without one the pods answer whoever reaches them.
	Secret string
}

// Where the replicas' secret is: the key in the Harness's Secret.
const secretKey = "replica-secret"

// Harness is Ferry's inference server serving a deployment's code in a
// pod: a ConfigMap with the server, the code and the model, and a pod
// template that mounts it and runs the server on DefaultPort. Apply it
// with Spec.Template = Template and Spec.ConfigMaps = [ConfigMap].
type Harness struct {
	ConfigMap corev1.ConfigMap
	Template  corev1.PodTemplateSpec
	// Secret, with HarnessOptions.Secret, is the Secret the container's
	// $FERRY_REPLICA_SECRET comes from (named ObjectName-replica): put it
	// in Spec.Secrets, which Apply makes before the Deployment and
	// deletes with it. Nil without a secret.
	Secret *corev1.Secret
	// Probe, with HarnessOptions.Secret, is the command of the
	// readiness and liveness probes (Spec.ProbeCommand): GET / from
	// inside the container with the secret, which an HTTP probe could
	// send only by holding it in the pod's spec. Nil without a secret
	// (the probes are GET / on the port).
	Probe []string
}

// NewHarness builds the Harness for opt. The ConfigMap's name holds a
// hash of its content, so that a new version of the code is a new
// ConfigMap and pods of the old version keep theirs.
func NewHarness(opt HarnessOptions) (Harness, error) {
	id := opt.Endpoint + "/" + opt.Deployment
	switch {
	case opt.Image == "":
		return Harness{}, fmt.Errorf("deployment %s: no image to run the inference server in (the environment's image)", id)
	case opt.ScoringScript == "":
		return Harness{}, fmt.Errorf("deployment %s: code_configuration.scoring_script is empty", id)
	case !hasFile(opt.Code, opt.ScoringScript):
		return Harness{}, fmt.Errorf("deployment %s: code_configuration.scoring_script %s is not in the code folder", id, opt.ScoringScript)
	}
	cm := corev1.ConfigMap{Data: map[string]string{}, BinaryData: map[string][]byte{}}
	var items []corev1.KeyToPath
	h := sha256.New()
	size := 0
	add := func(dir string, files map[string][]byte) error {
		for _, p := range slices.Sorted(maps.Keys(files)) {
			clean := path.Clean(p)
			if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
				return fmt.Errorf("deployment %s: file %q is outside its folder", id, p)
			}
			key := fmt.Sprintf("f%d", len(items))
			b := files[p]
			if utf8.Valid(b) {
				cm.Data[key] = string(b)
			} else {
				cm.BinaryData[key] = b
			}
			items = append(items, corev1.KeyToPath{Key: key, Path: dir + "/" + clean})
			fmt.Fprintf(h, "%s/%s\x00%d\x00", dir, clean, len(b))
			h.Write(b)
			size += len(b) + len(clean)
		}
		return nil
	}
	if err := add(serverDir, inferenceserver.Files()); err != nil {
		return Harness{}, err
	}
	if err := add(codeDir, opt.Code); err != nil {
		return Harness{}, err
	}
	if opt.Model != nil {
		if err := add(modelDir, opt.Model); err != nil {
			return Harness{}, err
		}
	}
	if size > MaxConfigMapBytes {
		return Harness{}, fmt.Errorf("deployment %s: the code and model (%d bytes with the inference server) do not fit a ConfigMap (at most %d bytes): put them in the image instead", id, size, MaxConfigMapBytes)
	}
	cm.Name = ObjectName(opt.Endpoint, opt.Deployment) + "-" + hex.EncodeToString(h.Sum(nil))[:12]

	env := map[string]string{
		"AML_APP_ROOT":            harnessMount + "/" + codeDir,
		"AZUREML_ENTRY_SCRIPT":    opt.ScoringScript,
		"AZUREML_INFERENCE_PORT":  strconv.Itoa(DefaultPort),
		"PYTHONDONTWRITEBYTECODE": "1", // the mounted code is read-only
		"WORKER_COUNT":            "1",
	}
	if opt.Model != nil {
		env["AZUREML_MODEL_DIR"] = harnessMount + "/" + modelDir
	}
	maps.Copy(env, opt.Env)
	// The secret, if any, comes from its Secret alone: an
	// environment_variables entry does not replace it (nor, without
	// one, give the server a secret the gateway does not know).
	delete(env, inferenceserver.SecretEnv)
	var envVars []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envVars = append(envVars, corev1.EnvVar{Name: k, Value: env[k]})
	}
	python := cmp.Or(opt.Python, "python3")
	drain := cmp.Or(opt.RequestTimeout, defaultRequestTimeout)
	command := []string{python, "-u", harnessMount + "/" + serverDir + "/" + inferenceserver.Program,
		"--script", opt.ScoringScript, "--host", "0.0.0.0", "--port", strconv.Itoa(DefaultPort),
		"--drain-seconds", strconv.FormatFloat(drain.Seconds(), 'f', -1, 64)}
	var out Harness
	if opt.Secret != "" {
		name := ObjectName(opt.Endpoint, opt.Deployment) + "-replica"
		out.Secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{secretKey: []byte(opt.Secret)},
		}
		envVars = append(envVars, corev1.EnvVar{Name: inferenceserver.SecretEnv, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: secretKey},
		}})
		command = append(command, inferenceserver.RequireSecretFlag)
		// The probe's own timeout is the kubelet's (timeoutSeconds); its
		// --timeout only bounds a probe the kubelet failed to end.
		out.Probe = []string{python, harnessMount + "/" + serverDir + "/" + inferenceserver.ProbeProgram,
			"--port", strconv.Itoa(DefaultPort), "--timeout", "60"}
	}
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:            "inference-server",
				Image:           opt.Image,
				ImagePullPolicy: cmp.Or(opt.PullPolicy, corev1.PullIfNotPresent),
				Command:         command,
				WorkingDir:      harnessMount + "/" + codeDir,
				Env:             envVars,
				Resources:       opt.Resources,
				VolumeMounts:    []corev1.VolumeMount{{Name: "ferry", MountPath: harnessMount, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "ferry", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name},
				Items:                items,
			}}}},
			// The scoring script needs nothing of the Kubernetes API.
			AutomountServiceAccountToken: new(false),
		},
	}
	out.ConfigMap, out.Template = cm, t
	return out, nil
}

func hasFile(files map[string][]byte, p string) bool {
	_, ok := files[p]
	return ok
}
