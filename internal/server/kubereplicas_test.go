package server

import (
	"context"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// TestKubeSpec: a deployment file's instance_count, probes and
// environment, and the instance type's shape, reach the pod.
func TestKubeSpec(t *testing.T) {
	delay := 2
	d := workspace.KubeDeployment{
		Endpoint: "ep", Deployment: "blue", Generation: 3, Image: "img:1", Replicas: new(2),
		Spec: &spec.OnlineDeployment{
			Name:                 "blue",
			CodeConfiguration:    &spec.CodeConfiguration{Code: "./src", ScoringScript: "score.py"},
			EnvironmentVariables: map[string]string{"WORKER_COUNT": "3"},
			RequestSettings:      &spec.RequestSettings{RequestTimeoutMS: 7000},
			ReadinessProbe:       &spec.Probe{InitialDelay: &delay, Period: 3},
			LivenessProbe:        &spec.Probe{InitialDelay: &delay, FailureThreshold: 4},
		},
		Code: map[string][]byte{"score.py": []byte("def init(): pass\n")},
		InstanceType: workspace.KubeInstanceType{
			NodeSelector: map[string]string{"pool": "gpu"},
			Requests:     map[string]string{"cpu": "500m", "memory": "1Gi"},
			Limits:       map[string]string{"nvidia.com/gpu": "1"},
			Tolerations:  []workspace.KubeToleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}},
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
	if !strings.Contains(strings.Join(c.Command, " "), "--drain-seconds 7") {
		t.Errorf("command %v", c.Command)
	}

	d.InstanceType.Requests["memory"] = "lots"
	if _, err := kubeSpec(d); err == nil || !strings.Contains(err.Error(), `resources.requests.memory: "lots" is not a quantity`) {
		t.Errorf("a bad quantity: %v", err)
	}
	// A kubeconfig that is not one is refused without quoting it.
	k := newKubeReplicas(nil)
	err = k.Apply(context.Background(), workspace.KubeDeployment{Target: workspace.KubeTarget{Kubeconfig: []byte("secret-token-xyz"), Namespace: "ns"}})
	if err == nil || strings.Contains(err.Error(), "secret-token-xyz") {
		t.Errorf("a bad kubeconfig: %v", err)
	}
}
