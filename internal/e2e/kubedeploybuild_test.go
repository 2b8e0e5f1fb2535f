package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// markerScript answers with the marker the environment's Dockerfile
// wrote into its image.
const markerScript = `def init():
    global marker
    with open("/ferry-marker") as f:
        marker = f.read().strip()

def run(raw_data):
    return {"marker": marker}
`

// waitStates polls a deployment until it is in one of final, and returns
// the states it was seen in, in order (each once), and its last view.
func (s *server) waitStates(endpoint, name string, within time.Duration, final ...string) ([]string, deploymentOut) {
	s.t.Helper()
	var seen []string
	deadline := time.Now().Add(within)
	for {
		d := s.deployment(endpoint, name)
		if len(seen) == 0 || seen[len(seen)-1] != d.ProvisioningState {
			seen = append(seen, d.ProvisioningState)
		}
		if slices.Contains(final, d.ProvisioningState) {
			return seen, d
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("deployment %s/%s is %s (%s) after %s, not %v\nserver log:\n%s", endpoint, name, d.ProvisioningState, d.Reason, within, final, s.output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pullPod is what the test reads of a deployment's pod.
type pullPod struct {
	Spec struct {
		Containers []struct {
			Image string `json:"image"`
		} `json:"containers"`
		ImagePullSecrets []struct {
			Name string `json:"name"`
		} `json:"imagePullSecrets"`
	} `json:"spec"`
}

// A kubernetes deployment whose environment is a Dockerfile (FROM the
// test's base image, writing a marker) on a compute with the test
// registry and its login: create answers Creating at once, the server
// builds and pushes the image in the background (killed with SIGKILL
// during the build, a restarted server finishes it), the deployment
// becomes Succeeded, its pods run the image by digest from the registry
// with the deployment's own pull Secret, and the scoring script answers
// through the gateway with the marker. A second deployment of the same
// environment, and a second restart, push nothing. Without a registry
// the deployment is refused naming it; with a wrong password it is
// Failed naming the registry. Deleting the endpoints leaves nothing of
// Ferry's in the namespace, and no password is shown or logged.
func TestKubernetesDeploymentBuiltEnvironment(t *testing.T) {
	k, tr, prefix, s := startKubeWithRegistry(t)

	marker := "deployment-built-by-ferry-" + k.namespace
	code, envDir := t.TempDir(), t.TempDir()
	writeFiles(t, code, map[string]string{"score.py": markerScript})
	writeFiles(t, envDir, map[string]string{"Dockerfile": fmt.Sprintf("FROM %s\nRUN echo %s > /ferry-marker\n", testutil.BaseImage, marker)})
	up := map[string]string{"code_snapshot": s.uploadDir(code), "environment_snapshot": s.uploadDir(envDir)}
	dep := func(name, endpoint string) map[string]any {
		return map[string]any{"name": name, "endpoint_name": endpoint, "instance_count": 1,
			"code_configuration": map[string]any{"code": "code", "scoring_script": "score.py"},
			"environment":        map[string]any{"build": map[string]any{"path": "env"}}}
	}
	create := func(name, endpoint string) deploymentOut {
		t.Helper()
		c, body := s.deploy("POST", endpoint, dep(name, endpoint), up, false)
		if c != 200 {
			t.Fatalf("create %s/%s: %d %s", endpoint, name, c, body)
		}
		var d deploymentOut
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	pushes := func() int { return strings.Count(s.output.String(), "pushed an environment's image") }
	answersMarker := func(uri, key, name string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			c, body := scoreBody(t, uri, key, name, `{}`)
			if c == 200 && strings.Contains(body, marker) {
				return
			}
			if (c != 200 && c != 503) || time.Now().After(deadline) { // 503 until the gateway has the pods
				t.Fatalf("%s through the gateway: %d %s; want the marker %s", name, c, body, marker)
			}
		}
	}

	// Without a registry: refused, naming it.
	s.mustFerry("compute", "attach", "-f", computeFile(t, k.computeYAML("k8s-plain", k.kubeconfig, "")))
	s.kubeEndpoint("plain-ep", "azureml:k8s-plain")
	if c, body := s.deploy("POST", "plain-ep", dep("blue", "plain-ep"), up, false); c != 400 || !strings.Contains(string(body), "registry") {
		t.Errorf("a Dockerfile environment on a compute without a registry: %d %s", c, body)
	}

	// Created at once; the server killed during the build; a restarted
	// one finishes it.
	uri, key := s.kubeEndpoint("built-ep", "azureml:k8s-reg")
	created := time.Now()
	if d := create("blue", "built-ep"); d.ProvisioningState != "Creating" {
		t.Fatalf("create answered %s (%s), want Creating", d.ProvisioningState, d.Reason)
	}
	// The build is under way, and the deployment says so.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		d := s.deployment("built-ep", "blue")
		if strings.Contains(s.output.String(), "building an environment's image") && strings.Contains(d.Reason, "building the environment's image") {
			if d.ProvisioningState != "Creating" {
				t.Errorf("blue during its build: %s (%s), want Creating", d.ProvisioningState, d.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not start building blue's image: %+v\n%s", d, s.output)
		}
	}
	s.kill9()
	s.start()
	states, d := s.waitStates("built-ep", "blue", 8*time.Minute, "Succeeded", "Failed")
	if d.ProvisioningState != "Succeeded" || slices.Contains(states, "Failed") || d.Compute != "k8s-reg" {
		t.Fatalf("blue: states %v, %+v; want Creating → Succeeded on k8s-reg\nserver:\n%s", states, d, s.output)
	}
	t.Logf("blue's states: %v; Succeeded %.1f s after create, with a SIGKILL and a start of the server; builds begun %d, pushes %d",
		states, time.Since(created).Seconds(), strings.Count(s.output.String(), "building an environment's image"), pushes())
	if n := pushes(); n != 1 {
		t.Errorf("the environment's image was pushed %d times across a restart during its build, want 1", n)
	}
	var pods struct{ Items []pullPod }
	if err := json.Unmarshal([]byte(k.run("get", "pods", "-n", k.namespace, "-l", "ferry.ml/deployment=blue", "-o", "json")), &pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("blue has no pod")
	}
	p := pods.Items[0].Spec
	if !strings.HasPrefix(p.Containers[0].Image, prefix+"/ferry-env@sha256:") || len(p.ImagePullSecrets) != 1 {
		t.Errorf("blue's pod runs %s with pull secrets %+v; want the environment's image from %s by digest, with one pull secret", p.Containers[0].Image, p.ImagePullSecrets, prefix)
	} else if typ := k.run("get", "secret", p.ImagePullSecrets[0].Name, "-n", k.namespace, "-o", "jsonpath={.type}"); typ != "kubernetes.io/dockerconfigjson" {
		t.Errorf("blue's pull secret %s is of type %q", p.ImagePullSecrets[0].Name, typ)
	}
	answersMarker(uri, key, "blue")

	// The same environment again: nothing pushed; nor after a restart.
	create("green", "built-ep")
	if _, d := s.waitStates("built-ep", "green", 5*time.Minute, "Succeeded", "Failed"); d.ProvisioningState != "Succeeded" {
		t.Fatalf("green: %+v", d)
	}
	answersMarker(uri, key, "green")
	s.kill9()
	s.start()
	answersMarker(uri, key, "blue")
	if d := s.deployment("built-ep", "blue"); d.ProvisioningState != "Succeeded" {
		t.Errorf("blue after a restart: %+v", d)
	}
	if n := pushes(); n != 1 {
		t.Errorf("the environment's image was pushed %d times for two deployments and two restarts, want 1", n)
	}

	// A wrong password: Failed, naming the registry.
	s.mustFerry("compute", "attach", "-f", computeFile(t, k.registryComputeYAML("k8s-badlogin", prefix, tr.Username, "not-the-password")))
	s.kubeEndpoint("bad-ep", "azureml:k8s-badlogin")
	if d := create("red", "bad-ep"); d.ProvisioningState != "Creating" {
		t.Errorf("create red answered %s, want Creating", d.ProvisioningState)
	}
	states, d = s.waitStates("bad-ep", "red", 3*time.Minute, "Succeeded", "Failed")
	if d.ProvisioningState != "Failed" || !strings.Contains(d.Reason, "registry "+tr.Addr) || !strings.Contains(d.Reason, "registry_credentials") {
		t.Errorf("red with a wrong password: states %v, %s (%s); want Failed naming registry %s and registry_credentials", states, d.ProvisioningState, d.Reason, tr.Addr)
	}

	// Delete: nothing of Ferry's left; no password anywhere.
	for _, ep := range []string{"built-ep", "bad-ep", "plain-ep"} {
		s.mustFerry("online-endpoint", "delete", "-n", ep, "--yes")
	}
	k.waitNoObjects("app.kubernetes.io/managed-by=ferry")
	k.waitEmpty()
	if left := strings.Fields(k.run("get", "secrets,configmaps", "-n", k.namespace, "-l", "app.kubernetes.io/managed-by=ferry", "-o", "name")); len(left) > 0 {
		t.Errorf("left in the namespace: %v", left)
	}
	if out := s.output.String() + s.mustFerry("compute", "show", "k8s-badlogin", "-o", "json").stdout; strings.Contains(out, tr.Password) || strings.Contains(out, "not-the-password") {
		t.Errorf("a registry password was shown or logged")
	}
}
