package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// instanceTypeCRD is Azure's InstanceType custom resource definition.
const instanceTypeCRD = "instancetypes.amlarc.azureml.com"

// Instance types from Azure's InstanceType custom resource: with the
// CRD installed in the real cluster (testdata/instancetype-crd.yaml, as
// Azure's extension has it) and one InstanceType in it, a compute whose
// file names no instance types lists it (`compute show`), and a job
// picking it with resources.instance_type runs in a pod with its
// nodeSelector, requests, limits and toleration. A compute whose file
// names a type of the same name keeps its own (the file wins: the
// resource is the whole cluster's, and tests and teams beside this one
// keep the shapes their files give while it exists). The InstanceType
// has a name of its own, and the CRD goes at the end when this test
// made it.
func TestKubernetesInstanceTypesFromTheCluster(t *testing.T) {
	k := requireKube(t)
	if _, err := k.try("get", "crd", instanceTypeCRD); err != nil {
		out, err := k.try("create", "-f", filepath.Join("testdata", "instancetype-crd.yaml"))
		switch {
		case err == nil:
			t.Cleanup(func() {
				if out, err := k.try("delete", "crd", instanceTypeCRD, "--wait=true", "--timeout=60s"); err != nil {
					t.Errorf("delete the CRD this test made: %v\n%s", err, out)
				}
			})
		case !strings.Contains(out, "AlreadyExists"): // else another run made it meanwhile: its to remove
			t.Fatalf("install the InstanceType CRD: %v\n%s", err, out)
		}
	}
	k.run("wait", "--for=condition=Established", "crd/"+instanceTypeCRD, "--timeout=60s")
	name := k.namespace + "-it" // unique on the cluster, which all tests share
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"it.yml": fmt.Sprintf(`apiVersion: amlarc.azureml.com/v1alpha1
kind: InstanceType
metadata:
  name: %s
spec:
  nodeSelector:
    kubernetes.io/os: linux
  resources:
    requests: {cpu: 50m, memory: 64Mi}
    limits: {cpu: 1, memory: 1Gi}
  tolerations:
    - {key: ferry.ml/e2e, operator: Exists, effect: NoSchedule}
`, name)})
	k.run("create", "-f", filepath.Join(dir, "it.yml"))
	t.Cleanup(func() {
		if out, err := k.try("delete", "instancetype", name, "--ignore-not-found"); err != nil {
			t.Errorf("delete InstanceType %s: %v\n%s", name, err, out)
		}
	})

	s := startKube(t, k, k.computeYAML("k8s-it", k.kubeconfig, ""))
	mustContain(t, "compute show", s.mustFerry("compute", "show", "k8s-it").stdout,
		name+" (the cluster's InstanceType) requests cpu=50m,memory=64Mi limits cpu=1,memory=1Gi nodeSelector kubernetes.io/os=linux tolerations 1")
	s.mustFerry("compute", "attach", "-f", computeFile(t, k.computeYAML("k8s-it-file", k.kubeconfig, fmt.Sprintf(`instance_types:
  %s:
    resources:
      requests: {cpu: 20m}
`, name))))
	show := s.mustFerry("compute", "show", "k8s-it-file").stdout
	mustContain(t, "compute show of a file naming the type", show, name+" requests cpu=20m")
	if strings.Contains(show, "cluster's InstanceType) requests cpu=50m") {
		t.Errorf("the file's type of the same name lost to the cluster's:\n%s", show)
	}
	r := s.ferry("job", "create", "-f", jobFile(t, "command: echo ran\ncompute: azureml:k8s-it\nresources:\n  instance_type: nope\n", nil))
	if r.code == 0 {
		t.Fatalf("a job naming an instance type neither the cluster nor the file has was accepted: %s", r)
	}
	mustContain(t, "the refusal", r.stderr, "resources.instance_type", "nope", name)

	for _, c := range []struct {
		compute, job string
		want         podShape
	}{
		{"k8s-it", "from-cr", podShape{NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
			Requests: map[string]string{"cpu": "50m", "memory": "64Mi"}, Limits: map[string]string{"cpu": "1", "memory": "1Gi"},
			Tolerations: []string{"ferry.ml/e2e Exists NoSchedule"}}},
		{"k8s-it-file", "from-file", podShape{Requests: map[string]string{"cpu": "20m"}}},
	} {
		s.mustFerry("job", "create", "-f", jobFile(t, "command: sleep 120\ncompute: azureml:"+c.compute+"\nresources:\n  instance_type: "+name+"\n", nil), "--name", c.job)
		j := s.waitStatus(c.job, "Running", "Failed", "Completed")
		if j.Status != "Running" {
			t.Fatalf("%s: %s (%s; %s)", c.job, j.Status, j.StatusReason, j.Error)
		}
		if got := k.podShape(j.Handle); !got.equal(c.want) {
			t.Errorf("%s on %s: its pod has %+v, want %+v", c.job, c.compute, got, c.want)
		}
		s.mustFerry("job", "cancel", c.job)
		s.waitStatus(c.job, "Canceled")
	}
	k.waitEmpty()
}

// podShape is what an instance type puts on a pod: its runner
// container's requests and limits, its nodeSelector and the
// tolerations it adds (key operator effect).
type podShape struct {
	NodeSelector     map[string]string
	Requests, Limits map[string]string
	Tolerations      []string
}

func (p podShape) equal(q podShape) bool {
	return fmt.Sprint(p.NodeSelector) == fmt.Sprint(q.NodeSelector) && fmt.Sprint(p.Requests) == fmt.Sprint(q.Requests) &&
		fmt.Sprint(p.Limits) == fmt.Sprint(q.Limits) && fmt.Sprint(p.Tolerations) == fmt.Sprint(q.Tolerations)
}

// podShape reads the shape of the pod of Job handle, leaving out the
// tolerations every pod gets (not-ready, unreachable).
func (k *kubeEnv) podShape(handle string) podShape {
	k.t.Helper()
	var pods struct {
		Items []struct {
			Spec struct {
				NodeSelector map[string]string `json:"nodeSelector"`
				Tolerations  []struct {
					Key, Operator, Effect string
				} `json:"tolerations"`
				Containers []struct {
					Name      string `json:"name"`
					Resources struct {
						Requests map[string]string `json:"requests"`
						Limits   map[string]string `json:"limits"`
					} `json:"resources"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"items"`
	}
	out := k.run("get", "pods", "-n", k.namespace, "-l", "job-name="+handle, "-o", "json")
	if err := json.Unmarshal([]byte(out), &pods); err != nil || len(pods.Items) != 1 {
		k.t.Fatalf("the pods of Job %s: %v\n%s", handle, err, out)
	}
	spec := pods.Items[0].Spec
	p := podShape{NodeSelector: spec.NodeSelector}
	for _, tol := range spec.Tolerations {
		if !strings.HasPrefix(tol.Key, "node.kubernetes.io/") {
			p.Tolerations = append(p.Tolerations, tol.Key+" "+tol.Operator+" "+tol.Effect)
		}
	}
	for _, c := range spec.Containers {
		if c.Name == "runner" {
			p.Requests, p.Limits = c.Resources.Requests, c.Resources.Limits
		}
	}
	return p
}
