package server

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ferry-ml/ferry/internal/envimage"
	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/online"
)

// TestKubeSpec: a deployment file's instance_count, probes and
// environment, and the instance type's shape, reach the pod; the
// replicas' secret reaches it through a Secret of the deployment's, with
// the probes that send it, and a deployment without one is refused.
func TestKubeSpec(t *testing.T) {
	delay := 2
	d := online.KubeDeployment{
		Endpoint: "ep", Deployment: "blue", Generation: 3, Image: "img:1", Replicas: new(2), ReplicaSecret: "the-replicas-secret",
		Spec: &spec.OnlineDeployment{
			Name:                 "blue",
			CodeConfiguration:    &spec.CodeConfiguration{Code: "./src", ScoringScript: "score.py"},
			EnvironmentVariables: map[string]string{"WORKER_COUNT": "3"},
			RequestSettings:      &spec.RequestSettings{RequestTimeoutMS: 7000},
			ReadinessProbe:       &spec.Probe{InitialDelay: &delay, Period: 3},
			LivenessProbe:        &spec.Probe{InitialDelay: &delay, FailureThreshold: 4},
		},
		Code: map[string][]byte{"score.py": []byte("def init(): pass\n")},
		InstanceType: online.KubeInstanceType{
			NodeSelector: map[string]string{"pool": "gpu"},
			Requests:     map[string]string{"cpu": "500m", "memory": "1Gi"},
			Limits:       map[string]string{"nvidia.com/gpu": "1"},
			Tolerations:  []online.KubeToleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}},
		},
	}
	s, err := kubeSpec(d)
	if err != nil {
		t.Fatal(err)
	}
	if *s.Replicas != 2 || s.Generation != 3 || s.Readiness.Period != 3 || s.Liveness.FailureThreshold != 4 || s.RequestTimeout.Seconds() != 7 {
		t.Errorf("spec %+v", s)
	}
	ps := s.Template.Spec
	c := ps.Containers[0]
	if c.Image != "img:1" || c.Resources.Requests.Cpu().String() != "500m" || c.Resources.Limits.Name("nvidia.com/gpu", "").String() != "1" {
		t.Errorf("container %s, resources %+v", c.Image, c.Resources)
	}
	if ps.NodeSelector["pool"] != "gpu" || len(ps.Tolerations) != 1 || ps.Tolerations[0].Key != "gpu" {
		t.Errorf("placement: %v %v", ps.NodeSelector, ps.Tolerations)
	}
	if !strings.Contains(strings.Join(c.Command, " "), "--drain-seconds 7") || !slices.Contains(c.Command, inferenceserver.RequireSecretFlag) {
		t.Errorf("command %v", c.Command)
	}
	if len(s.Secrets) != 1 || string(s.Secrets[0].Data["replica-secret"]) != "the-replicas-secret" || len(s.ProbeCommand) == 0 {
		t.Errorf("secrets %v, probe %v: want the replicas' Secret and the probe command", s.Secrets, s.ProbeCommand)
	}
	if tmpl, _ := json.Marshal(s.Template); strings.Contains(string(tmpl), "the-replicas-secret") {
		t.Errorf("the pod template holds the replicas' secret: %s", tmpl)
	}
	none := d
	none.ReplicaSecret = ""
	if _, err := kubeSpec(none); err == nil || !strings.Contains(err.Error(), "no replica secret") {
		t.Errorf("a deployment without a replica secret: %v", err)
	}

	d.InstanceType.Requests["memory"] = "lots"
	if _, err := kubeSpec(d); err == nil || !strings.Contains(err.Error(), `resources.requests.memory: "lots" is not a quantity`) {
		t.Errorf("a bad quantity: %v", err)
	}
	// A kubeconfig that is not one is refused without quoting it.
	k := newKubeReplicas(nil, &envimage.Pushers{})
	err = k.Apply(context.Background(), online.KubeDeployment{Target: online.KubeTarget{Kubeconfig: []byte("secret-token-xyz"), Namespace: "ns"}})
	if err == nil || strings.Contains(err.Error(), "secret-token-xyz") {
		t.Errorf("a bad kubeconfig: %v", err)
	}
}

// TestKubeSpecPullSecret: a deployment on a compute whose registry has a
// login gets an image pull Secret of its own (a .dockerconfigjson for the
// registry's host), named in its pods; without a login, or a registry,
// none.
func TestKubeSpecPullSecret(t *testing.T) {
	d := online.KubeDeployment{
		Endpoint: "ep", Deployment: "blue", Generation: 1, Image: "127.0.0.1:5000/ns/ferry-env@sha256:ab", Replicas: new(1), ReplicaSecret: "s",
		Spec:     &spec.OnlineDeployment{Name: "blue", CodeConfiguration: &spec.CodeConfiguration{Code: "./src", ScoringScript: "score.py"}},
		Code:     map[string][]byte{"score.py": []byte("def init(): pass\n")},
		Registry: &online.KubeRegistry{Address: "127.0.0.1:5000/ns", Username: "u", Password: "pw"},
	}
	s, err := kubeSpec(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Secrets) != 2 || s.Secrets[1].Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("secrets %+v, want the replicas' and a pull secret", s.Secrets)
	}
	sec := s.Secrets[1]
	if sec.Type != corev1.SecretTypeDockerConfigJson || len(s.Template.Spec.ImagePullSecrets) != 1 || s.Template.Spec.ImagePullSecrets[0].Name != sec.Name {
		t.Errorf("secret %s of type %s; the pods' pull secrets %v", sec.Name, sec.Type, s.Template.Spec.ImagePullSecrets)
	}
	var cfg struct {
		Auths map[string]struct{ Username, Password string }
	}
	if err := json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
		t.Fatal(err)
	}
	if a := cfg.Auths["127.0.0.1:5000"]; a.Username != "u" || a.Password != "pw" || len(cfg.Auths) != 1 {
		t.Errorf("dockerconfigjson auths %+v, want the registry's host with the login", cfg.Auths)
	}
	for _, r := range []*online.KubeRegistry{nil, {Address: "127.0.0.1:5000/ns"}} {
		d.Registry = r
		if s, err := kubeSpec(d); err != nil || len(s.Secrets) != 1 || s.Secrets[0].Type != corev1.SecretTypeOpaque || len(s.Template.Spec.ImagePullSecrets) != 0 {
			t.Errorf("registry %+v: secrets %v, pull secrets %v, %v", r, s.Secrets, s.Template.Spec.ImagePullSecrets, err)
		}
	}
}
