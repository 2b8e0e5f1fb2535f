package e2e

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

const (
	kubeDeploymentSchema    = "https://azuremlschemas.azureedge.net/latest/kubernetesOnlineDeployment.schema.json"
	managedDeploymentSchema = "https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json"
)

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
	return strings.Fields(k.run("get", "deployments,replicasets,pods,services,configmaps,endpointslices,secrets", "-n", k.namespace, "-l", selector, "-o", "name"))
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

// Online deployments on the cluster (kubernetesOnlineDeployment) beside
// a managed one on the same endpoint: an endpoint whose compute is the
// kubernetes compute runs its deployments as Deployments and Services
// there (those with the kubernetesOnlineDeployment $schema or none), and
// a managedOnlineDeployment on pool nodes of its instance_type (the
// process provider), which Azure does not allow on one endpoint. The
// gateway splits the traffic between the two kinds, the header picks
// either, the mirror copies to either; a rolling update of the one on
// the cluster under constant load fails no request and both versions
// answer; a restarted server routes to both again; delete leaves nothing
// in the namespace and cancels the managed replica. What cannot work is
// refused, naming the field.
func TestKubernetesOnlineDeployments(t *testing.T) {
	k := requireKube(t)
	testutil.RequireBaseImage(t)
	testutil.KubeImage(t, testutil.BaseImage)
	s := startKube(t, k, k.computeYAML("k8s-serve", k.kubeconfig, `instance_types:
  small:
    resources:
      requests: {cpu: 50m, memory: 64Mi}
`), "--serverless-idle", "60s")
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
	bad := deploymentSpec("huge", "k8s-ep", "x", map[string]any{"environment": env, "instance_type": "huge"})
	if c, body := s.deploy("POST", "k8s-ep", bad, up, false); c != 400 || !strings.Contains(string(body), "instance_type") || !strings.Contains(string(body), "small") {
		t.Errorf("an instance type the compute lacks: %d %s", c, body)
	}

	// blue on the cluster (no $schema: the endpoint's compute), green a
	// managedOnlineDeployment on a pool node; split 50/50.
	blue := deploymentSpec("blue", "k8s-ep", "blue-v1", map[string]any{"environment": env,
		"instance_type": "small", "instance_count": 1, "request_settings": rs})
	green := deploymentSpec("green", "k8s-ep", "green-v1", map[string]any{"$schema": managedDeploymentSchema,
		"instance_type": "Standard_DS1_v2", "instance_count": 1, "request_settings": rs})
	for _, d := range []map[string]any{blue, green} {
		if c, body := s.deploy("POST", "k8s-ep", d, up, false); c != 200 {
			t.Fatalf("create %s: %d %s", d["name"], c, body)
		}
	}
	for name, compute := range map[string]string{"blue": "k8s-serve", "green": "serverless-standard-ds1-v2"} {
		d := s.waitDeployment("k8s-ep", name, "Succeeded", "Failed")
		if d.ProvisioningState != "Succeeded" || d.Compute != compute {
			t.Fatalf("%s: %+v, want Succeeded on %s", name, d, compute)
		}
	}
	if objs := k.deploymentObjects("ferry.ml/deployment=blue"); !strings.Contains(strings.Join(objs, " "), "deployment.apps/") {
		t.Fatalf("blue has no Deployment on the cluster: %v", objs)
	}
	if objs := k.deploymentObjects("ferry.ml/deployment=green"); len(objs) > 0 {
		t.Fatalf("green, a managedOnlineDeployment, has objects on the cluster: %v", objs)
	}
	greenJobs := replicaJobs(s.waitReady("k8s-ep", "green", 1))
	// Neither kind moves to the other by an update.
	toKube := maps.Clone(green)
	toKube["$schema"], toKube["instance_type"], toKube["environment"] = kubeDeploymentSchema, "small", env
	if c, body := s.deploy("PUT", "k8s-ep", toKube, up, false); c != 400 || !strings.Contains(string(body), "$schema") || !strings.Contains(string(body), "pool nodes") {
		t.Errorf("an update moving green onto the cluster: %d %s", c, body)
	}
	s.mustFerry("online-endpoint", "update", "k8s-ep", "--traffic", "blue=50,green=50")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, body := scoreBody(t, uri, key, "blue", `{}`)
		if c == 200 {
			break
		} else if c != 503 || time.Now().After(deadline) { // 503 only until the gateway has the pods
			t.Fatalf("blue through the gateway: %d %s", c, body)
		}
	}
	versions := map[string]int{}
	for range 400 {
		c, body := scoreBody(t, uri, key, "", `{}`)
		var a struct{ Version string }
		if c != 200 || json.Unmarshal([]byte(body), &a) != nil {
			t.Fatalf("split: %d %s", c, body)
		}
		versions[a.Version]++
	}
	// 200 ± 40 is four standard deviations of a fair split of 400.
	if b, g := versions["blue-v1"], versions["green-v1"]; b < 160 || b > 240 || b+g != 400 {
		t.Errorf("50/50 split over 400 requests between the cluster and a pool node: %v; want each within 200±40", versions)
	}
	t.Logf("split: %v", versions)
	for name, version := range map[string]string{"blue": "blue-v1", "green": "green-v1"} {
		for range 10 {
			if c, body := scoreBody(t, uri, key, name, `{}`); c != 200 || !strings.Contains(body, `"`+version+`"`) {
				t.Fatalf("azureml-model-deployment: %s: %d %s", name, c, body)
			}
		}
	}
	// The endpoint and its deployments say where each runs, and the
	// gateway counts both.
	var shown struct {
		Compute string `json:"compute"`
		Stats   map[string]struct {
			Requests int64 `json:"requests"`
		} `json:"deployment_stats"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("online-endpoint", "show", "-n", "k8s-ep", "-o", "json").stdout), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Compute != "azureml:k8s-serve" || shown.Stats["blue"].Requests < 170 || shown.Stats["green"].Requests < 170 {
		t.Errorf("online-endpoint show: %+v", shown)
	}
	mustContain(t, "online-deployment list", s.mustFerry("online-deployment", "list", "-e", "k8s-ep").stdout, "k8s-serve", "serverless-standard-ds1-v2")

	// A mirror to the cluster while the pool node answers.
	s.checkMirror(t, "k8s-ep", uri, key, "blue=0 green=100", "blue", `"green-v1"`)
	s.mustFerry("online-endpoint", "update", "k8s-ep", "--traffic", "blue=50 green=50", "--mirror-traffic", "")

	// A rolling update of blue under constant load on both, now with the
	// kubernetesOnlineDeployment $schema (the same kind).
	stop, _ := load(t, uri, key, 4)
	time.Sleep(500 * time.Millisecond)
	blue["$schema"] = kubeDeploymentSchema
	blue["environment_variables"] = map[string]string{"VERSION": "blue-v2"}
	if c, body := s.deploy("PUT", "k8s-ep", blue, up, false); c != 200 {
		t.Fatalf("update: %d %s", c, body)
	}
	if d := s.waitDeployment("k8s-ep", "blue", "Succeeded", "Failed"); d.ProvisioningState != "Succeeded" {
		t.Fatalf("update: %+v", d)
	}
	time.Sleep(500 * time.Millisecond)
	codes, byVersion, failures := stop().snapshot()
	if len(codes) != 1 || codes[200] == 0 || byVersion["blue-v1"] == 0 || byVersion["blue-v2"] == 0 || byVersion["green-v1"] == 0 {
		t.Errorf("rolling update under load: answers %v, versions %v, failures %v", codes, byVersion, failures)
	}
	t.Logf("rolling update under load: answers %v, versions %v", codes, byVersion)
	for i := range 10 {
		if c, body := scoreBody(t, uri, key, "blue", `{}`); c != 200 || !strings.Contains(body, `"blue-v2"`) {
			t.Fatalf("request %d to blue after the update: %d %s", i, c, body)
		}
	}

	// A restarted server watches the pods again, finds the pool node's
	// replica again and routes to both.
	s.kill9()
	s.start()
	for name, version := range map[string]string{"blue": "blue-v2", "green": "green-v1"} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			c, body := scoreBody(t, uri, key, name, `{}`)
			if c == 200 && strings.Contains(body, `"`+version+`"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after a restart: %d %s", name, c, body)
			}
		}
	}
	if got := replicaJobs(s.deployment("k8s-ep", "green")); !slices.Equal(got, greenJobs) {
		t.Errorf("green's replicas after a restart: %v, want %v (found again, not replaced)", got, greenJobs)
	}

	// Delete: nothing of blue is left, then nothing at all, and green's
	// replica is cancelled.
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
	for _, j := range greenJobs {
		s.waitStatus(j, "Canceled")
	}
}

// A deployment on the cluster answers only the gateway, as replica jobs
// do (issue 29 #4): a request straight to its pod, at the address the
// gateway uses, is refused without the replicas' secret (401, scoring
// and GET / alike) and with a wrong one (403), while the gateway scores.
// The secret is in a Secret of the deployment's, from which the pod's
// environment takes it: the Deployment's pod template, the pod, the
// server's log and the API's answers never hold it; the probes that
// made the pod ready are the command that sends it. Deleting the
// endpoint deletes the Secret with the rest.
func TestKubernetesReplicaAnswersOnlyTheGateway(t *testing.T) {
	k := requireKube(t)
	testutil.RequireBaseImage(t)
	testutil.KubeImage(t, testutil.BaseImage)
	s := startKube(t, k, k.computeYAML("k8s-only", k.kubeconfig, ""))
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	uri, key := s.kubeEndpoint("only-ep", "azureml:k8s-only")
	blue := deploymentSpec("blue", "only-ep", "blue-v1", map[string]any{"environment": map[string]any{"image": testutil.BaseImage},
		"instance_count": 1, "readiness_probe": map[string]any{"initial_delay": 1, "period": 1}})
	if c, body := s.deploy("POST", "only-ep", blue, up, false); c != 200 {
		t.Fatalf("create: %d %s", c, body)
	}
	if d := s.waitDeployment("only-ep", "blue", "Succeeded", "Failed"); d.ProvisioningState != "Succeeded" {
		t.Fatalf("deployment: %+v", d)
	}
	s.mustFerry("online-endpoint", "update", "only-ep", "--traffic", "blue=100")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, body := scoreBody(t, uri, key, "", `{}`)
		if c == 200 && strings.Contains(body, `"blue-v1"`) {
			break
		} else if c != 503 || time.Now().After(deadline) { // 503 only until the gateway has the pod
			t.Fatalf("through the gateway: %d %s", c, body)
		}
	}
	d := s.deployment("only-ep", "blue")
	if len(d.Replicas) != 1 || !strings.HasPrefix(d.Replicas[0].Address, "http://") {
		t.Fatalf("want one ready pod with its address: %+v", d.Replicas)
	}
	pod := d.Replicas[0].Address

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	ask := func(method, path, secret string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, pod+path, strings.NewReader(map[string]string{"GET": "", "POST": "{}"}[method]))
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" {
			req.Header.Set("X-Ferry-Replica-Secret", secret)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s%s: %v", method, pod, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, r := range []struct{ method, path string }{{"POST", "/score"}, {"GET", "/"}} {
		if c, body := ask(r.method, r.path, ""); c != http.StatusUnauthorized {
			t.Errorf("%s %s straight to the pod, without the secret: %d %s, want 401", r.method, r.path, c, body)
		}
		if c, body := ask(r.method, r.path, "not-the-secret"); c != http.StatusForbidden {
			t.Errorf("%s %s straight to the pod, with a wrong secret: %d %s, want 403", r.method, r.path, c, body)
		}
	}

	// The Secret the pod's environment comes from, and what its secret
	// opens; none of what others may read holds it.
	name := "only-ep-blue-replica"
	raw, err := base64.StdEncoding.DecodeString(k.run("get", "secret", name, "-n", k.namespace, "-o", "jsonpath={.data.replica-secret}"))
	if err != nil || len(raw) < 32 {
		t.Fatalf("Secret %s: %q %v, want the replicas' secret", name, raw, err)
	}
	secret := string(raw)
	if c, body := ask("POST", "/score", secret); c != 200 || !strings.Contains(body, `"blue-v1"`) {
		t.Errorf("straight to the pod with the Secret's secret: %d %s", c, body)
	}
	depJSON := k.run("get", "deployment", "only-ep-blue", "-n", k.namespace, "-o", "json")
	podsJSON := k.run("get", "pods", "-n", k.namespace, "-l", "ferry.ml/deployment=blue", "-o", "json")
	_, show := s.call("GET", "/v1/online-endpoints/only-ep/deployments/blue", s.token, nil)
	for what, text := range map[string]string{
		"the Deployment": depJSON, "the pod": podsJSON, "the server's log": s.output.String(),
		"online-deployment show": string(show), "online-endpoint show": s.mustFerry("online-endpoint", "show", "-n", "only-ep", "-o", "json").stdout,
	} {
		if strings.Contains(text, secret) {
			t.Errorf("%s holds the replicas' secret", what)
		}
	}
	mustContain(t, "the Deployment's pod template", depJSON, `"secretKeyRef"`, `"name": "`+name+`"`, `"exec"`, "ferry_probe.py", "--require-secret")
	if strings.Contains(depJSON, `"httpGet"`) {
		t.Errorf("the Deployment's probes are HTTP GETs, which could send the secret only from the pod's spec")
	}

	s.mustFerry("online-endpoint", "delete", "-n", "only-ep", "--yes")
	k.waitNoObjects("app.kubernetes.io/managed-by=ferry")
}
