package kubernetes

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

func TestObjectNameIsADNSLabelPerAttempt(t *testing.T) {
	long := strings.Repeat("Very_Long-Job", 20)
	seen := map[string]bool{}
	for _, job := range []string{"train", "Train", "a_b", "--x", long, long + "2"} {
		for _, attempt := range []int{1, 12345} {
			n := objectName(job, attempt)
			// Pods of an Indexed Job are named NAME-INDEX: that must be a
			// DNS label too, for their host names.
			if errs := validation.IsDNS1123Label(n + "-99"); len(errs) > 0 {
				t.Errorf("objectName(%q, %d) = %q: %v", job, attempt, n, errs)
			}
			if seen[n] {
				t.Errorf("objectName(%q, %d) = %q twice", job, attempt, n)
			}
			seen[n] = true
		}
	}
}

func testTarget(t *testing.T, c *spec.Compute) *Target {
	t.Helper()
	c.ApplyDefaults()
	// A kubeconfig of a cluster that is never asked: nothing here makes a
	// request.
	c.KubeconfigContent = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	tg, err := New(Config{Compute: c, Exe: "/usr/local/bin/ferry"})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestObjectsOfATwoNodeJob(t *testing.T) {
	tg := testTarget(t, &spec.Compute{Name: "k8s", Type: "kubernetes", Namespace: "ml", Image: "img:1",
		PodTemplate: map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "runner", "imagePullPolicy": "Never"}}}}})
	j := &spec.Job{Command: "python train.py", Resources: &spec.Resources{InstanceCount: 2}, Limits: &spec.Limits{Timeout: 60}}
	it := &spec.KubeInstanceType{NodeSelector: map[string]string{"gpu": "yes"},
		Resources:   spec.KubeResources{Limits: map[string]string{"nvidia.com/gpu": "1", "memory": "2Gi"}},
		Tolerations: []spec.KubeToleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}}}
	objs, err := tg.objects(compute.Launch{Job: "train", Attempt: 2, APIURL: "http://10.0.0.1:8080", RunToken: "secret-token", Spec: j}, podImages{job: "img:1"}, it)
	if err != nil {
		t.Fatal(err)
	}
	name := objectName("train", 2)
	js := objs.job.Spec
	if *js.Completions != 2 || *js.Parallelism != 2 || *js.CompletionMode != batchv1.IndexedCompletion || *js.BackoffLimit != 0 {
		t.Errorf("job spec: completions %d parallelism %d mode %s backoff %d", *js.Completions, *js.Parallelism, *js.CompletionMode, *js.BackoffLimit)
	}
	if *js.ActiveDeadlineSeconds != 60+300 || *js.TTLSecondsAfterFinished != ttlAfterFinished {
		t.Errorf("deadline %d ttl %d", *js.ActiveDeadlineSeconds, *js.TTLSecondsAfterFinished)
	}
	ps := js.Template.Spec
	if ps.Subdomain != name || objs.service.Name != name || objs.service.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("subdomain %q, service %q %q; want the headless service %q", ps.Subdomain, objs.service.Name, objs.service.Spec.ClusterIP, name)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("containers: %+v", ps.Containers)
	}
	c := ps.Containers[0]
	if c.ImagePullPolicy != corev1.PullNever || c.Image != "img:1" {
		t.Errorf("container from the template: pull policy %q image %q", c.ImagePullPolicy, c.Image)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.Name == tokenKey && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != name) {
			t.Errorf("the run token does not come from the secret: %+v", e)
		}
	}
	want := map[string]string{tokenKey: "", "FERRY_NODE_RANK": "", "FERRY_NODE_COUNT": "2",
		"FERRY_NODE_ADDRESSES": name + "-0." + name + "," + name + "-1." + name, "MASTER_ADDR": name + "-0." + name, "MASTER_PORT": "29500"}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if strings.Contains(strings.Join(append(c.Command, c.Args...), " "), "secret-token") {
		t.Errorf("the run token is on the command line")
	}
	if string(objs.secret.Data[tokenKey]) != "secret-token" {
		t.Errorf("secret holds %q", objs.secret.Data[tokenKey])
	}
	if q := c.Resources.Limits["nvidia.com/gpu"]; q.String() != "1" || ps.NodeSelector["gpu"] != "yes" || len(ps.Tolerations) != 1 {
		t.Errorf("instance type not applied: limits %v selector %v tolerations %v", c.Resources.Limits, ps.NodeSelector, ps.Tolerations)
	}
	for _, o := range []map[string]string{objs.job.Labels, objs.secret.Labels, objs.service.Labels, js.Template.Labels} {
		if o[labelJob] != "train" || o[labelAttempt] != "2" || o[labelCompute] != "k8s" || o[labelHandle] != name {
			t.Errorf("labels %v", o)
		}
	}
}

func TestAdmit(t *testing.T) {
	tg := testTarget(t, &spec.Compute{Name: "k8s", Type: "kubernetes", InstanceTypes: map[string]spec.KubeInstanceType{"small": {}}})
	img := &environment.Spec{Kind: environment.KindImage, Image: "python:3.12"}
	for _, tc := range []struct {
		job   *spec.Job
		env   *environment.Spec
		field string
	}{
		{&spec.Job{Command: "x"}, nil, "environment"}, // no image anywhere
		{&spec.Job{Command: "x"}, &environment.Spec{Kind: environment.KindBuild}, "environment"},
		{&spec.Job{Command: "x", Resources: &spec.Resources{InstanceType: "huge"}}, img, "resources.instance_type"},
	} {
		err := tg.Admit(tc.job, tc.env)
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
			t.Errorf("Admit(%+v) = %v, want an error naming %s", tc.job, err, tc.field)
		}
	}
	if err := tg.Admit(&spec.Job{Command: "x", Resources: &spec.Resources{InstanceType: "small"}}, img); err != nil {
		t.Errorf("Admit of a job on an image and a known instance type: %v", err)
	}
}

// Without a registry an environment Ferry would build is refused with
// what to set; with one it is admitted (built and pushed at launch).
func TestAdmitBuiltEnvironmentsNeedARegistry(t *testing.T) {
	build := &environment.Spec{Kind: environment.KindBuild, DockerfilePath: "Dockerfile", Context: "abc"}
	conda := &environment.Spec{Kind: environment.KindImage, Image: "python:3.12", CondaFile: "conda.yml", Context: "abc"}
	plain := testTarget(t, &spec.Compute{Name: "k8s", Type: "kubernetes"})
	for _, env := range []*environment.Spec{build, conda} {
		err := plain.Admit(&spec.Job{Command: "x"}, env)
		if err == nil || !strings.Contains(err.Error(), "registry:") || !strings.HasPrefix(err.Error(), "environment") {
			t.Errorf("Admit(%s) without a registry = %v, want a refusal that says to set registry:", env.Describe(), err)
		}
	}
	withReg := testTarget(t, &spec.Compute{Name: "k8s", Type: "kubernetes", Registry: "127.0.0.1:5000/ml"})
	for _, env := range []*environment.Spec{build, conda} {
		if err := withReg.Admit(&spec.Job{Command: "x"}, env); err != nil {
			t.Errorf("Admit(%s) with a registry: %v", env.Describe(), err)
		}
	}
}

// With a registry the runner's binary comes from an init container of
// the runner's image into an emptyDir (no hostPath), and with registry
// credentials the attempt's Secret is also the pods' imagePullSecret.
func TestObjectsWithARegistry(t *testing.T) {
	tg := testTarget(t, &spec.Compute{Name: "k8s", Type: "kubernetes", Image: "img:1", Registry: "reg.example:5000/ml",
		RegistryCredentials: &spec.RegistryCredentials{Username: "ferry", Password: "s3cret"}})
	img := podImages{job: "reg.example:5000/ml/ferry-env@sha256:ab", inPlace: "ferry-env:hash", runner: "reg.example:5000/ml/ferry-runner@sha256:cd"}
	objs, err := tg.objects(compute.Launch{Job: "train", Attempt: 1, APIURL: "http://10.0.0.1:8080", RunToken: "tok", Spec: &spec.Job{Command: "x"}}, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := objs.job.Spec.Template.Spec
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath", v.Name)
		}
	}
	if len(ps.InitContainers) != 1 || ps.InitContainers[0].Image != img.runner ||
		!slices.Equal(ps.InitContainers[0].Command, []string{"/ferry", "copy-self", exeInPod}) {
		t.Fatalf("init containers: %+v", ps.InitContainers)
	}
	c := ps.Containers[0]
	if c.Image != img.job || c.Command[0] != exeInPod {
		t.Errorf("runner container: image %q command %v", c.Image, c.Command)
	}
	if i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == runnerVolume }); i < 0 || c.VolumeMounts[i].MountPath != exeDirInPod {
		t.Errorf("runner container mounts: %+v", c.VolumeMounts)
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvImageIsEnvironment }); i < 0 || c.Env[i].Value != "ferry-env:hash" {
		t.Errorf("env: %+v", c.Env)
	}
	name := objectName("train", 1)
	if len(ps.ImagePullSecrets) != 1 || ps.ImagePullSecrets[0].Name != name || objs.secret.Type != corev1.SecretTypeDockerConfigJson {
		t.Errorf("pull secrets %+v, secret type %s", ps.ImagePullSecrets, objs.secret.Type)
	}
	var dc struct {
		Auths map[string]struct{ Username, Password, Auth string }
	}
	if err := json.Unmarshal(objs.secret.Data[corev1.DockerConfigJsonKey], &dc); err != nil {
		t.Fatal(err)
	}
	if a := dc.Auths["reg.example:5000"]; a.Username != "ferry" || a.Password != "s3cret" || string(objs.secret.Data[tokenKey]) != "tok" {
		t.Errorf("secret: %s", objs.secret.Data)
	}
}

func TestPodStates(t *testing.T) {
	unsched := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}}}}
	if got := pendingReason(unsched); !strings.Contains(got, "Insufficient nvidia.com/gpu") {
		t.Errorf("unschedulable: %q", got)
	}
	if _, _, fatal := podFatal(unsched); fatal {
		t.Errorf("an unschedulable pod is fatal")
	}
	pull := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image x is not present"}}}}}}
	if why, _, fatal := podFatal(pull); !fatal || !strings.Contains(why, "ErrImageNeverPull") || !strings.Contains(why, "preparing") {
		t.Errorf("image pull: %q %v", why, fatal)
	}
	oom := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}}
	if why, exit, fatal := podFatal(oom); !fatal || !strings.Contains(why, "OOMKilled (exit 137)") || exit == nil || *exit != 137 {
		t.Errorf("oom: %q %v %v", why, exit, fatal)
	}
	evicted := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}}
	if why, _, fatal := podFatal(evicted); !fatal || !strings.HasPrefix(why, "Evicted: The node was low") {
		t.Errorf("evicted: %q %v", why, fatal)
	}
}

// An InstanceType resource's spec, as the dynamic client decodes it
// (numbers as int64), reads as the compute file's instance types do.
func TestInstanceTypeFromTheCustomResource(t *testing.T) {
	got := instanceTypeFromCR(map[string]any{
		"nodeSelector": map[string]any{"mylabel": "mylabelvalue"},
		"resources": map[string]any{
			"limits":   map[string]any{"cpu": "1", "nvidia.com/gpu": int64(1), "memory": "2Gi"},
			"requests": map[string]any{"cpu": "700m", "memory": "1500Mi"},
		},
		"tolerations": []any{map[string]any{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": int64(30)}},
	})
	secs := int64(30)
	want := spec.KubeInstanceType{
		NodeSelector: map[string]string{"mylabel": "mylabelvalue"},
		Resources: spec.KubeResources{
			Limits:   map[string]string{"cpu": "1", "nvidia.com/gpu": "1", "memory": "2Gi"},
			Requests: map[string]string{"cpu": "700m", "memory": "1500Mi"},
		},
		Tolerations: []spec.KubeToleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule", TolerationSeconds: &secs}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instance type (-want +got):\n%s", diff)
	}
	if err := checkQuantities(got); err != nil {
		t.Errorf("its quantities: %v", err)
	}
}

// The target's client is not held to client-go's default of 5 requests
// a second: at about ten requests an attempt, a burst of 100 jobs waited
// 1 to 3 s a request on it (bench/kubernetes).
func TestRestConfigIsNotThrottledToKubectlRates(t *testing.T) {
	c := &spec.Compute{Name: "k", Type: Type, Namespace: "ns", KubeconfigContent: `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`}
	cfg, err := restConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS < 50 || cfg.Burst < 100 {
		t.Errorf("the target's client allows %v requests/s with bursts of %d; want at least 50 and 100 (client-go's default 5 and 10 throttle a burst of launches)", cfg.QPS, cfg.Burst)
	}
}
