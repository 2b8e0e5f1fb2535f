package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/envimage"
	"github.com/ferry-ml/ferry/internal/imagereg"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/spec"
)

// The labels and annotations on every object Ferry makes. The job's name
// can be longer than a label value may be, so its label is shortened and
// the annotation holds it whole.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "ferry"
	labelCompute   = "ferry.compute"
	labelJob       = "ferry.job"
	labelAttempt   = "ferry.attempt"
	labelHandle    = "ferry.handle" // the Job's name, on the Job, its pods, Service and Secret
	annotationJob  = "ferry.job"
	// completionIndex is the annotation of an Indexed Job's pod that holds
	// its index.
	completionIndex = "batch.kubernetes.io/job-completion-index"
)

// Where things are inside a job's pod.
const (
	exeInPod     = "/opt/ferry/bin/ferry"
	exeDirInPod  = "/opt/ferry/bin"
	initName     = "ferry-runner"
	workInPod    = "/var/lib/ferry"
	tokenKey     = "FERRY_RUN_TOKEN"
	runnerName   = "runner"
	masterPort   = 29500
	runnerVolume = "ferry-bin"
	workVolume   = "ferry-work"
)

// finalizeSlack is added to limits.timeout for the Job's
// activeDeadlineSeconds: the runner enforces the timeout itself and then
// still uploads outputs and reports; the deadline is the backstop.
const finalizeSlack = 5 * time.Minute

// ttlAfterFinished is the Job's ttlSecondsAfterFinished: Ferry deletes
// an ended attempt's objects itself, and the TTL controller does when a
// server is gone for good.
const ttlAfterFinished = 600

// objectName is an attempt's Job name, its handle, also the name of its
// Service and Secret: a DNS label that its pods' host names (NAME-INDEX)
// still fit, unique by a hash of the job's name.
func objectName(job string, attempt int) string {
	sum := sha256.Sum256([]byte(job))
	var b strings.Builder
	for _, r := range strings.ToLower(job) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
		if b.Len() == 30 {
			break
		}
	}
	base := strings.Trim(b.String(), "-")
	if base != "" {
		base += "-"
	}
	return "ferry-" + base + hex.EncodeToString(sum[:3]) + "-" + strconv.Itoa(attempt)
}

// labelValue is s cut to what a label value may hold.
func labelValue(s string) string {
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "-_.")
}

// attemptObjects are the objects of one attempt.
type attemptObjects struct {
	secret  *corev1.Secret
	service *corev1.Service
	job     *batchv1.Job
}

// shape is the number of pods (resources.instance_count) of a job.
func podCount(j *spec.Job) int {
	if r := j.Resources; r != nil && r.InstanceCount > 1 {
		return r.InstanceCount
	}
	return 1
}

// podImages are the images of an attempt's pods.
type podImages struct {
	// job is the runner's container's image.
	job string
	// inPlace, when set, tells the runner that job is its environment's
	// image (EnvImageIsEnvironment's value): the image reference of an
	// image environment, environment.ImageTag of one Ferry built.
	inPlace string
	// runner is the runner's image in the compute's registry; "" mounts
	// the server's binary from the node instead.
	runner string
}

// dockerConfig is the .dockerconfigjson of an imagePullSecret that logs
// in to the compute's registry.
func (t *Target) dockerConfig() ([]byte, error) {
	if t.images == nil {
		return nil, nil
	}
	user, password := t.c.RegistryLogin()
	return envimage.DockerConfig(t.images.Registry().Host(), user, password)
}

// objects builds the Secret, headless Service and Indexed Job of an
// attempt on images img, with instance type it. With registry
// credentials the Secret is also the pods' imagePullSecret.
func (t *Target) objects(l compute.Launch, img podImages, it *spec.KubeInstanceType) (attemptObjects, error) {
	name := objectName(l.Job, l.Attempt)
	labels := map[string]string{
		labelManagedBy: managedBy, labelCompute: t.c.Name, labelJob: labelValue(l.Job),
		labelAttempt: strconv.Itoa(l.Attempt), labelHandle: name,
	}
	meta := metav1.ObjectMeta{Name: name, Namespace: t.cl.Namespace, Labels: labels,
		Annotations: map[string]string{annotationJob: l.Job}}
	n := podCount(l.Spec)

	secret := &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{tokenKey: []byte(l.RunToken)}}
	pull, err := t.dockerConfig()
	if err != nil {
		return attemptObjects{}, err
	}
	if pull != nil {
		secret.Type = corev1.SecretTypeDockerConfigJson
		secret.Data[corev1.DockerConfigJsonKey] = pull
	}
	service := &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{labelHandle: name},
		// Ranks look each other up before they are ready.
		PublishNotReadyAddresses: true,
	}}

	tmpl, err := t.podTemplate()
	if err != nil {
		return attemptObjects{}, err
	}
	tmpl.Labels = merged(tmpl.Labels, labels)
	tmpl.Annotations = merged(tmpl.Annotations, map[string]string{annotationJob: l.Job})
	ps := &tmpl.Spec
	ps.RestartPolicy = corev1.RestartPolicyNever
	ps.Subdomain = name
	if ps.EnableServiceLinks == nil {
		ps.EnableServiceLinks = new(false)
	}
	if ps.AutomountServiceAccountToken == nil {
		// A job has no business with the cluster's API unless the
		// template's service account says so.
		ps.AutomountServiceAccountToken = new(false)
	}
	c := corev1.Container{}
	if i := slices.IndexFunc(ps.Containers, func(c corev1.Container) bool { return c.Name == runnerName }); i >= 0 {
		c = ps.Containers[i]
		ps.Containers = slices.Delete(ps.Containers, i, i+1)
	}
	c.Name, c.Image = runnerName, img.job
	inv := invocation.Invocation{API: l.APIURL, Job: l.Job, Attempt: l.Attempt, Dir: workInPod + "/run",
		Cache: workInPod + "/cache", EnvCache: workInPod + "/envs", CancelGrace: t.cfg.CancelGrace}
	c.Command = []string{exeInPod}
	c.Args = inv.Args()
	env := []corev1.EnvVar{{Name: tokenKey, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: tokenKey}}}}
	if img.inPlace != "" {
		env = append(env, corev1.EnvVar{Name: EnvImageIsEnvironment, Value: img.inPlace})
	}
	if n > 1 {
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("%s-%d.%s", name, i, name)
		}
		env = append(env,
			corev1.EnvVar{Name: "FERRY_NODE_RANK", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.annotations['" + completionIndex + "']"}}},
			corev1.EnvVar{Name: "FERRY_NODE_COUNT", Value: strconv.Itoa(n)},
			corev1.EnvVar{Name: "FERRY_NODE_ADDRESSES", Value: strings.Join(addrs, ",")},
			corev1.EnvVar{Name: "MASTER_ADDR", Value: addrs[0]},
			corev1.EnvVar{Name: "MASTER_PORT", Value: strconv.Itoa(masterPort)},
		)
	}
	c.Env = append(c.Env, env...)
	binMount := corev1.VolumeMount{Name: runnerVolume, MountPath: exeInPod, ReadOnly: true}
	if img.runner != "" {
		binMount.MountPath = exeDirInPod
	}
	c.VolumeMounts = append(c.VolumeMounts, binMount,
		corev1.VolumeMount{Name: workVolume, MountPath: workInPod})
	if it != nil {
		if c.Resources.Requests == nil && c.Resources.Limits == nil {
			if c.Resources, err = resources(it.Resources); err != nil {
				return attemptObjects{}, err
			}
		}
		ps.NodeSelector = merged(ps.NodeSelector, it.NodeSelector)
		for _, tol := range it.Tolerations {
			ps.Tolerations = append(ps.Tolerations, corev1.Toleration{Key: tol.Key, Operator: corev1.TolerationOperator(tol.Operator),
				Value: tol.Value, Effect: corev1.TaintEffect(tol.Effect), TolerationSeconds: tol.TolerationSeconds})
		}
	}
	ps.Containers = append([]corev1.Container{c}, ps.Containers...)
	bin := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if img.runner != "" {
		// The runner's image has nothing but Ferry's binary, which copies
		// itself into the volume the runner's container runs it from.
		ps.InitContainers = append([]corev1.Container{{
			Name: initName, Image: img.runner,
			Command:      []string{imagereg.RunnerPath, "copy-self", exeInPod},
			VolumeMounts: []corev1.VolumeMount{{Name: runnerVolume, MountPath: exeDirInPod}},
			// The runner's own: a namespace whose LimitRange or quota
			// wants limits on every container takes it, and the pod asks
			// for no more than before (an init container's requests
			// count as the most of them, not on top).
			Resources: c.Resources,
		}}, ps.InitContainers...)
	} else {
		fileType := corev1.HostPathFile
		bin = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.cfg.Exe, Type: &fileType}}
	}
	if pull != nil {
		ps.ImagePullSecrets = append(ps.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	ps.Volumes = append(ps.Volumes,
		corev1.Volume{Name: runnerVolume, VolumeSource: bin},
		corev1.Volume{Name: workVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})

	count := int32(n)
	indexed := batchv1.IndexedCompletion
	job := &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{
		Completions: &count, Parallelism: &count, CompletionMode: &indexed,
		// A failed pod fails the attempt: Ferry makes a new attempt when
		// the job asks for one.
		BackoffLimit:            new(int32(0)),
		TTLSecondsAfterFinished: new(int32(ttlAfterFinished)),
		Template:                tmpl,
	}}
	if lim := l.Spec.Limits; lim != nil && lim.Timeout > 0 {
		job.Spec.ActiveDeadlineSeconds = new(lim.Timeout + int64(finalizeSlack/time.Second))
	}
	return attemptObjects{secret: secret, service: service, job: job}, nil
}

// podTemplate is the compute's pod_template, decoded afresh.
func (t *Target) podTemplate() (corev1.PodTemplateSpec, error) {
	var tmpl corev1.PodTemplateSpec
	if len(t.c.PodTemplate) == 0 {
		return tmpl, nil
	}
	raw, err := json.Marshal(t.c.PodTemplate)
	if err == nil {
		err = json.Unmarshal(raw, &tmpl)
	}
	if err != nil {
		return tmpl, &CheckError{Field: "pod_template", Msg: fmt.Sprintf("is not a pod template (metadata and spec as Kubernetes writes them): %v", err)}
	}
	return tmpl, nil
}

// resources are an instance type's requests and limits.
func resources(r spec.KubeResources) (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	conv := func(m map[string]string) (corev1.ResourceList, error) {
		if len(m) == 0 {
			return nil, nil
		}
		l := corev1.ResourceList{}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			q, err := resource.ParseQuantity(m[k])
			if err != nil {
				return nil, fmt.Errorf("instance type: %s %q: %w", k, m[k], err)
			}
			l[corev1.ResourceName(k)] = q
		}
		return l, nil
	}
	var err error
	if out.Requests, err = conv(r.Requests); err != nil {
		return out, err
	}
	out.Limits, err = conv(r.Limits)
	return out, err
}

func merged(a, b map[string]string) map[string]string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}
