package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

const kubeDeploymentSchema = "https://azuremlschemas.azureedge.net/latest/kubernetesOnlineDeployment.schema.json"

// kubeEndpoint creates an endpoint on a kubernetes compute and returns
// its scoring URI and primary key.
func (s *server) kubeEndpoint(name, compute string) (string, string) {
	s.t.Helper()
	dir := s.t.TempDir()
	writeFiles(s.t, dir, map[string]string{"endpoint.yml": "name: " + name + "\nauth_mode: key\ncompute: " + compute + "\n"})
	ep := parseEndpoint(s.t, s.mustFerry("online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml"), "-o", "json"))
	var keys struct {
		PrimaryKey string `json:"primaryKey"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("online-endpoint", "get-credentials", name).stdout), &keys); err != nil {
		s.t.Fatal(err)
	}
	return ep.ScoringURI, keys.PrimaryKey
}

// deploymentObjects lists what is left on the cluster of a deployment
// (every kind Ferry makes for one, found by its label).
func (k *kubeEnv) deploymentObjects(selector string) []string {
	k.t.Helper()
	return strings.Fields(k.run("get", "deployments,replicasets,pods,services,configmaps,endpointslices", "-n", k.namespace, "-l", selector, "-o", "name"))
}

func (k *kubeEnv) waitNoObjects(selector string) {
	k.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		left := k.deploymentObjects(selector)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("left in namespace %s (%s): %v", k.namespace, selector, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Online deployments on the cluster (kubernetesOnlineDeployment): an
// endpoint whose compute is the kubernetes compute runs its deployments
// as Deployments and Services there, and the gateway routes to their
// pods. An endpoint is either managed or on Kubernetes (as on Azure,
// where a Kubernetes endpoint's deployments are all
// kubernetesOnlineDeployments), so the traffic split is between two
// deployments on the cluster. A rolling update under constant load fails
// no request and both versions answer; a restarted server watches the
// pods again and routes to them; delete leaves nothing in the namespace.
// What cannot work is refused, naming the field.
func TestKubernetesOnlineDeployments(t *testing.T) {
	k := requireKube(t)
	testutil.RequireBaseImage(t)
	testutil.KubeImage(t, testutil.BaseImage)
	s := startKube(t, k, k.computeYAML("k8s-serve", k.kubeconfig, `instance_types:
  small:
    resources:
      requests: {cpu: 50m, memory: 64Mi}
`))
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	env := map[string]any{"image": testutil.BaseImage}
	// Four clients at once, half to each deployment: room for them all,
	// so that an answer other than 200 is the rollout's failure.
	rs := map[string]any{"max_concurrent_requests_per_instance": 4}

	// Refusals.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"bad.yml": "name: bad-ep\ncompute: azureml:no-such\n"})
	r := s.ferry("online-endpoint", "create", "-f", filepath.Join(dir, "bad.yml"))
	mustContain(t, "an endpoint on a compute that does not exist", r.stderr, "compute", "no-such", "does not exist")
	s.endpointKey("managed-ep")
	kd := deploymentSpec("kube", "managed-ep", "x", map[string]any{"$schema": kubeDeploymentSchema, "environment": env})
	if c, body := s.deploy("POST", "managed-ep", kd, up, false); c != 400 || !strings.Contains(string(body), "$schema") {
		t.Errorf("a kubernetesOnlineDeployment on a managed endpoint: %d %s", c, body)
	}
	uri, key := s.kubeEndpoint("k8s-ep", "azureml:k8s-serve")
	md := deploymentSpec("managed", "k8s-ep", "x", map[string]any{"$schema": "https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json", "environment": env})
	if c, body := s.deploy("POST", "k8s-ep", md, up, false); c != 400 || !strings.Contains(string(body), "managedOnlineDeployment") {
		t.Errorf("a managedOnlineDeployment on a Kubernetes endpoint: %d %s", c, body)
	}
	bad := deploymentSpec("huge", "k8s-ep", "x", map[string]any{"environment": env, "instance_type": "huge"})
	if c, body := s.deploy("POST", "k8s-ep", bad, up, false); c != 400 || !strings.Contains(string(body), "instance_type") || !strings.Contains(string(body), "small") {
		t.Errorf("an instance type the compute lacks: %d %s", c, body)
	}

	// Two deployments on the cluster, split 50/50.
	blue := deploymentSpec("blue", "k8s-ep", "blue-v1", map[string]any{"$schema": kubeDeploymentSchema, "environment": env,
		"instance_type": "small", "instance_count": 1, "request_settings": rs})
	green := deploymentSpec("green", "k8s-ep", "green-v1", map[string]any{"environment": env, "instance_count": 1, "request_settings": rs})
	for _, d := range []map[string]any{blue, green} {
		if c, body := s.deploy("POST", "k8s-ep", d, up, false); c != 200 {
			t.Fatalf("create %s: %d %s", d["name"], c, body)
		}
	}
	for _, name := range []string{"blue", "green"} {
		d := s.waitDeployment("k8s-ep", name, "Succeeded", "Failed")
		if d.ProvisioningState != "Succeeded" || d.Compute != "k8s-serve" {
			t.Fatalf("%s: %+v", name, d)
		}
	}
	if objs := k.deploymentObjects("ferry.ml/deployment=blue"); !strings.Contains(strings.Join(objs, " "), "deployment.apps/") {
		t.Fatalf("blue has no Deployment on the cluster: %v", objs)
	}
	s.mustFerry("online-endpoint", "update", "k8s-ep", "--traffic", "blue=50,green=50")
	versions := map[string]int{}
	for deadline := time.Now().Add(30 * time.Second); versions["blue-v1"] == 0 || versions["green-v1"] == 0; {
		c, body := scoreBody(t, uri, key, "", `{}`)
		if c == 200 {
			var a struct{ Version string }
			_ = json.Unmarshal([]byte(body), &a)
			versions[a.Version]++
		} else if c != 503 { // 503 only until the gateway has the pods
			t.Fatalf("score: %d %s", c, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("split 50/50 for 30 s: answers by version %v", versions)
		}
	}
	t.Logf("split: %v", versions)

	// A rolling update of blue under constant load.
	stop, _ := load(t, uri, key, 4)
	time.Sleep(500 * time.Millisecond)
	blue["environment_variables"] = map[string]string{"VERSION": "blue-v2"}
	if c, body := s.deploy("PUT", "k8s-ep", blue, up, false); c != 200 {
		t.Fatalf("update: %d %s", c, body)
	}
	if d := s.waitDeployment("k8s-ep", "blue", "Succeeded", "Failed"); d.ProvisioningState != "Succeeded" {
		t.Fatalf("update: %+v", d)
	}
	time.Sleep(500 * time.Millisecond)
	codes, byVersion, failures := stop().snapshot()
	if len(codes) != 1 || codes[200] == 0 || byVersion["blue-v1"] == 0 || byVersion["blue-v2"] == 0 {
		t.Errorf("rolling update under load: answers %v, versions %v, failures %v", codes, byVersion, failures)
	}
	t.Logf("rolling update under load: answers %v, versions %v", codes, byVersion)
	for i := range 10 {
		if c, body := scoreBody(t, uri, key, "blue", `{}`); c != 200 || !strings.Contains(body, `"blue-v2"`) {
			t.Fatalf("request %d to blue after the update: %d %s", i, c, body)
		}
	}

	// A restarted server watches the pods again and routes to them.
	s.kill9()
	s.start()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, body := scoreBody(t, uri, key, "green", `{}`)
		if c == 200 && strings.Contains(body, `"green-v1"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("green after a restart: %d %s", c, body)
		}
	}

	// Delete: nothing of blue is left, then nothing at all.
	s.mustFerry("online-endpoint", "update", "k8s-ep", "--traffic", "green=100")
	if c, body := s.call("DELETE", "/v1/online-endpoints/k8s-ep/deployments/blue", s.token, nil); c != 200 && c != 202 && c != 204 {
		t.Fatalf("delete blue: %d %s", c, body)
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		c, _ := s.call("GET", "/v1/online-endpoints/k8s-ep/deployments/blue", s.token, nil)
		if c == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("blue still there 90 s after delete: %+v", s.deployment("k8s-ep", "blue"))
		}
	}
	if left := k.deploymentObjects("ferry.ml/deployment=blue"); len(left) > 0 {
		t.Errorf("blue deleted, and left on the cluster: %v", left)
	}
	if c, body := scoreBody(t, uri, key, "", `{}`); c != 200 || !strings.Contains(body, `"green-v1"`) {
		t.Errorf("green after blue was deleted: %d %s", c, body)
	}
	s.mustFerry("online-endpoint", "delete", "-n", "k8s-ep", "--yes")
	k.waitNoObjects("app.kubernetes.io/managed-by=ferry")
}
