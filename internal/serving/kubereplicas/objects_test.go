package kubereplicas

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestObjectName(t *testing.T) {
	for _, c := range []struct{ endpoint, deployment string }{
		{"my-endpoint", "blue"},
		{"My-Endpoint", "Blue"},
		{"e", "d_1"},
		{strings.Repeat("a", 32), strings.Repeat("b", 32)},
		{"1st", "x"},
	} {
		name := ObjectName(c.endpoint, c.deployment)
		if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
			t.Errorf("ObjectName(%q, %q) = %q: not a DNS-1035 label: %v", c.endpoint, c.deployment, name, errs)
		}
	}
	if got := ObjectName("my-endpoint", "blue"); got != "my-endpoint-blue" {
		t.Errorf("a name that is a valid label is kept: got %q", got)
	}
	// Two deployments whose names differ only where the name is changed
	// get different objects.
	if a, b := ObjectName("Ep", "x"), ObjectName("ep", "x"); a == b {
		t.Errorf("ObjectName(Ep, x) and ObjectName(ep, x) are both %q", a)
	}
}

func TestDeploymentObject(t *testing.T) {
	delay := 3
	s := Spec{
		Endpoint: "ep", Deployment: "blue", Generation: 4,
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "sidecar", Image: "busy:1"},
			{Name: "server", Image: "img:1"},
		}}},
		Container:      "server",
		Replicas:       new(int32(3)),
		Readiness:      spec.Probe{InitialDelay: &delay, Period: 2, Timeout: 1, SuccessThreshold: 2, FailureThreshold: 4},
		Liveness:       spec.Probe{Period: 7, SuccessThreshold: 3},
		DrainDelay:     2 * time.Second,
		RequestTimeout: 10 * time.Second,
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	d := s.deployment("ns", *s.Replicas)
	if *d.Spec.Replicas != 3 || d.Namespace != "ns" || d.Name != "ep-blue" {
		t.Errorf("deployment %s/%s with %d replicas", d.Namespace, d.Name, *d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != "RollingUpdate" || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("strategy %+v: want RollingUpdate, maxUnavailable 0, maxSurge 1", d.Spec.Strategy)
	}
	sel := d.Spec.Selector.MatchLabels
	for k, v := range sel {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template's labels %v", k, v, d.Spec.Template.Labels)
		}
	}
	if got := d.Spec.Template.Labels[LabelEndpoint] + "/" + d.Spec.Template.Labels[LabelDeployment]; got != "ep/blue" {
		t.Errorf("template labels name %s", got)
	}
	if d.Spec.Template.Annotations[AnnotationGeneration] != "4" {
		t.Errorf("generation annotation %q", d.Spec.Template.Annotations[AnnotationGeneration])
	}
	if g := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 2+10+5 {
		t.Errorf("grace %d s, want the drain delay, the request timeout and 5 s", g)
	}
	side, c := d.Spec.Template.Spec.Containers[0], d.Spec.Template.Spec.Containers[1]
	if side.ReadinessProbe != nil || side.Lifecycle != nil {
		t.Errorf("the sidecar got probes or a lifecycle")
	}
	get := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(DefaultPort), Scheme: "HTTP"}}
	want := &corev1.Probe{ProbeHandler: get, InitialDelaySeconds: 3, PeriodSeconds: 2, TimeoutSeconds: 1, SuccessThreshold: 2, FailureThreshold: 4}
	if diff := cmp.Diff(want, c.ReadinessProbe); diff != "" {
		t.Errorf("readiness probe (-want +got):\n%s", diff)
	}
	// Azure's defaults; a liveness success_threshold is 1 for Kubernetes.
	want = &corev1.Probe{ProbeHandler: get, InitialDelaySeconds: 10, PeriodSeconds: 7, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: 30}
	if diff := cmp.Diff(want, c.LivenessProbe); diff != "" {
		t.Errorf("liveness probe (-want +got):\n%s", diff)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 2 {
		t.Errorf("preStop %+v: want a 2 s sleep", c.Lifecycle)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != portName || c.Ports[0].ContainerPort != DefaultPort {
		t.Errorf("ports %+v", c.Ports)
	}
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("terminationMessagePolicy %q", c.TerminationMessagePolicy)
	}
	// The caller's template is not changed.
	if s.Template.Spec.Containers[1].ReadinessProbe != nil || s.Template.Labels != nil {
		t.Errorf("the caller's template was changed")
	}
	svc := s.service("ns")
	if diff := cmp.Diff(sel, svc.Spec.Selector); diff != "" {
		t.Errorf("service selector (-deployment's +service's):\n%s", diff)
	}
	if svc.Spec.Ports[0].TargetPort.StrVal != portName {
		t.Errorf("service targets %v", svc.Spec.Ports[0].TargetPort)
	}
}

func TestSpecCheck(t *testing.T) {
	ok := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Deployment: "d", Template: ok}, "endpoint name is empty"},
		{Spec{Endpoint: "e", Deployment: "d/x", Template: ok}, "deployment name \"d/x\" cannot be a label value"},
		{Spec{Endpoint: "e", Deployment: "d"}, "no container"},
		{Spec{Endpoint: "e", Deployment: "d", Template: ok, Container: "x"}, `no container "x"`},
		{Spec{Endpoint: "e", Deployment: "d", Template: ok, Replicas: new(int32(-1))}, "instance_count must be at least 0"},
	} {
		err := c.spec.check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check() = %v, want an error with %q", err, c.want)
		}
	}
}

func TestNewHarness(t *testing.T) {
	code := map[string][]byte{"score.py": []byte("def init(): pass\n"), "lib/w.bin": {0xff, 0xfe, 0}}
	opt := HarnessOptions{Endpoint: "ep", Deployment: "d", Image: "img:1", Code: code, ScoringScript: "score.py",
		Env: map[string]string{"WORKER_COUNT": "2"}, RequestTimeout: 1500 * time.Millisecond}
	h, err := NewHarness(opt)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, it := range h.Template.Spec.Volumes[0].ConfigMap.Items {
		paths[it.Path] = it.Key
	}
	if h.ConfigMap.Data[paths["code/score.py"]] != "def init(): pass\n" {
		t.Errorf("score.py is not in the ConfigMap at code/score.py: %v", paths)
	}
	if string(h.ConfigMap.BinaryData[paths["code/lib/w.bin"]]) != "\xff\xfe\x00" {
		t.Errorf("a binary file is not kept whole")
	}
	if _, ok := paths["server/inference_server.py"]; !ok {
		t.Errorf("the inference server is not in the ConfigMap: %v", paths)
	}
	c := h.Template.Spec.Containers[0]
	if got := strings.Join(c.Command, " "); !strings.Contains(got, "--drain-seconds 1.5") || !strings.Contains(got, "/ferry/server/inference_server.py") {
		t.Errorf("command %q", got)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["WORKER_COUNT"] != "2" || env["AZUREML_ENTRY_SCRIPT"] != "score.py" || env["AML_APP_ROOT"] != "/ferry/code" {
		t.Errorf("env %v", env)
	}
	if _, ok := env["AZUREML_MODEL_DIR"]; ok {
		t.Errorf("AZUREML_MODEL_DIR set without a model")
	}

	// The name follows the content: new code, new ConfigMap.
	same, _ := NewHarness(opt)
	opt.Code = map[string][]byte{"score.py": []byte("def init(): pass\n# v2\n")}
	other, _ := NewHarness(opt)
	if same.ConfigMap.Name != h.ConfigMap.Name || other.ConfigMap.Name == h.ConfigMap.Name {
		t.Errorf("names %s, %s (same code), %s (other code)", h.ConfigMap.Name, same.ConfigMap.Name, other.ConfigMap.Name)
	}
	for _, c := range []struct {
		mod  func(*HarnessOptions)
		want string
	}{
		{func(o *HarnessOptions) { o.Image = "" }, "no image"},
		{func(o *HarnessOptions) { o.ScoringScript = "nope.py" }, "scoring_script nope.py is not in the code folder"},
		{func(o *HarnessOptions) { o.Code = map[string][]byte{"score.py": nil, "../x": nil} }, "outside its folder"},
		{func(o *HarnessOptions) { o.Model = map[string][]byte{"big": make([]byte, MaxConfigMapBytes)} }, "do not fit a ConfigMap"},
	} {
		o := opt
		o.Code = map[string][]byte{"score.py": []byte("x")}
		c.mod(&o)
		if _, err := NewHarness(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewHarness: %v, want an error with %q", err, c.want)
		}
	}
}

// A harness with the replicas' secret keeps it out of the pod template:
// the container takes it from the harness's Secret (an environment
// variable of the deployment's own does not replace it), the server
// requires it, and the probes are a command in the container that sends
// it, not an HTTP GET that could only carry it in the spec.
func TestHarnessSecret(t *testing.T) {
	const secret = "the-replicas-secret-0123456789"
	opt := HarnessOptions{Endpoint: "ep", Deployment: "d", Image: "img:1", ScoringScript: "score.py",
		Code: map[string][]byte{"score.py": []byte("def init(): pass\n")},
		Env:  map[string]string{inferenceserver.SecretEnv: "chosen-by-the-file", "A": "1"}, Secret: secret}
	h, err := NewHarness(opt)
	if err != nil {
		t.Fatal(err)
	}
	if h.Secret == nil || h.Secret.Name != "ep-d-replica" || string(h.Secret.Data[secretKey]) != secret {
		t.Fatalf("the harness's Secret: %+v", h.Secret)
	}
	s := Spec{Endpoint: "ep", Deployment: "d", Template: h.Template, ProbeCommand: h.Probe, Secrets: []corev1.Secret{*h.Secret}}
	d := s.deployment("ns", 1)
	spec, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(spec), secret) || strings.Contains(string(spec), "chosen-by-the-file") {
		t.Errorf("the Deployment holds the secret or the file's own: %s", spec)
	}
	c := d.Spec.Template.Spec.Containers[0]
	var from []corev1.EnvVar
	for _, e := range c.Env {
		if e.Name == inferenceserver.SecretEnv {
			from = append(from, e)
		}
	}
	want := []corev1.EnvVar{{Name: inferenceserver.SecretEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "ep-d-replica"}, Key: secretKey}}}}
	if diff := cmp.Diff(want, from); diff != "" {
		t.Errorf("$%s in the container (-want +got):\n%s", inferenceserver.SecretEnv, diff)
	}
	if !slices.Contains(c.Command, inferenceserver.RequireSecretFlag) {
		t.Errorf("command %q: the server does not require the secret", c.Command)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p.HTTPGet != nil || p.Exec == nil || !strings.HasSuffix(p.Exec.Command[1], "/ferry/server/"+inferenceserver.ProbeProgram) ||
			!strings.Contains(strings.Join(p.Exec.Command, " "), "--port 5001") {
			t.Errorf("%s probe %+v: want the probe program on port 5001", name, p.ProbeHandler)
		}
	}
	if _, ok := h.ConfigMap.Data[configMapKey(t, h, "server/"+inferenceserver.ProbeProgram)]; !ok {
		t.Errorf("the probe program is not in the ConfigMap")
	}

	// Without a secret: no Secret, GET / probes, no --require-secret,
	// and the file's variable is still not the server's secret.
	opt.Secret = ""
	h, err = NewHarness(opt)
	if err != nil {
		t.Fatal(err)
	}
	s = Spec{Endpoint: "ep", Deployment: "d", Template: h.Template, ProbeCommand: h.Probe}
	c = s.deployment("ns", 1).Spec.Template.Spec.Containers[0]
	if h.Secret != nil || h.Probe != nil || c.ReadinessProbe.HTTPGet == nil || slices.Contains(c.Command, inferenceserver.RequireSecretFlag) {
		t.Errorf("without a secret: Secret %v, probe %+v, command %q", h.Secret, c.ReadinessProbe.ProbeHandler, c.Command)
	}
	for _, e := range c.Env {
		if e.Name == inferenceserver.SecretEnv {
			t.Errorf("without a secret, the container has $%s: %+v", e.Name, e)
		}
	}
}

// configMapKey is the ConfigMap key of the harness's file at path.
func configMapKey(t *testing.T, h Harness, path string) string {
	t.Helper()
	for _, it := range h.Template.Spec.Volumes[0].ConfigMap.Items {
		if it.Path == path {
			return it.Key
		}
	}
	t.Fatalf("%s is not in the ConfigMap", path)
	return ""
}
