package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

// deploymentOut is a deployment as the API shows it.
type deploymentOut struct {
	Name              string `json:"name"`
	ProvisioningState string `json:"provisioning_state"`
	Reason            string `json:"reason"`
	Compute           string `json:"compute"`
	Replicas          []struct {
		Job        string `json:"job"`
		Generation int    `json:"generation"`
		State      string `json:"state"`
		Address    string `json:"address"`
		JobStatus  string `json:"job_status"`
	} `json:"replicas"`
}

// scoreScript is a scoring script written as for Azure: init() reads the
// model, run() answers with it, the deployment's VERSION variable and its
// process id.
const scoreScript = `import json, os, time

def init():
    global model
    with open(os.path.join(os.environ["AZUREML_MODEL_DIR"], "weights.json")) as f:
        model = json.load(f)
    if os.environ.get("FAIL_INIT"):
        raise RuntimeError("init failed on purpose: " + os.environ["FAIL_INIT"])

def run(raw_data):
    data = json.loads(raw_data)
    if data.get("sleep"):
        time.sleep(data["sleep"])
    return {"model": model["name"], "version": os.environ.get("VERSION", ""), "pid": os.getpid()}
`

// uploadDir uploads a folder as a snapshot and returns its id.
func (s *server) uploadDir(dir string) string {
	s.t.Helper()
	tree, err := snapshot.Walk(dir, snapshot.BuildOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	id, _, err := client.New(s.url, s.token).UploadTree(context.Background(), tree, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

// deploy creates (or, with update, changes) a deployment through the API.
func (s *server) deploy(method, endpoint string, spec map[string]any, uploads map[string]string, local bool) (int, []byte) {
	s.t.Helper()
	path := "/v1/online-endpoints/" + endpoint + "/deployments"
	if method == "PUT" {
		path += "/" + spec["name"].(string)
	}
	return s.call(method, path, s.token, map[string]any{"spec": spec, "uploads": uploads, "local": local})
}

func (s *server) deployment(endpoint, name string) deploymentOut {
	s.t.Helper()
	code, body := s.call("GET", "/v1/online-endpoints/"+endpoint+"/deployments/"+name, s.token, nil)
	if code != 200 {
		s.t.Fatalf("show deployment %s: %d %s", name, code, body)
	}
	var d deploymentOut
	if err := json.Unmarshal(body, &d); err != nil {
		s.t.Fatal(err)
	}
	return d
}

// waitDeployment waits until a deployment is in one of states.
func (s *server) waitDeployment(endpoint, name string, states ...string) deploymentOut {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		d := s.deployment(endpoint, name)
		for _, st := range states {
			if d.ProvisioningState == st {
				return d
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("deployment %s is %s (%s), not %v; replicas %+v\nserver log:\n%s", name, d.ProvisioningState, d.Reason, states, d.Replicas, s.output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endpointKey creates an endpoint and returns its scoring URI and primary key.
func (s *server) endpointKey(name string) (string, string) {
	s.t.Helper()
	dir := s.t.TempDir()
	writeFiles(s.t, dir, map[string]string{"endpoint.yml": "name: " + name + "\nauth_mode: key\n"})
	ep := parseEndpoint(s.t, s.mustFerry("online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml"), "-o", "json"))
	var keys struct {
		PrimaryKey string `json:"primaryKey"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("online-endpoint", "get-credentials", name).stdout), &keys); err != nil {
		s.t.Fatal(err)
	}
	return ep.ScoringURI, keys.PrimaryKey
}

func scoreBody(t *testing.T, uri, key, deployment, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", uri, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if deployment != "" {
		req.Header.Set("azureml-model-deployment", deployment)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, "")
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// scoringApp writes a deployment's code and model folders.
func scoringApp(t *testing.T) (code, model string) {
	t.Helper()
	code, model = t.TempDir(), t.TempDir()
	writeFiles(t, code, map[string]string{"score.py": scoreScript})
	writeFiles(t, model, map[string]string{"weights.json": `{"name": "iris-v1"}`})
	return code, model
}

// A deployment on this machine (--local): its replica is Ferry's
// inference server running the scoring script as a job of the local
// target; it becomes Succeeded once the replica answers, scores through
// the gateway with the endpoint's key, and a failing init() makes a
// deployment Failed with the traceback as its reason.
func TestOnlineDeploymentLocal(t *testing.T) {
	s := startServer(t)
	uri, key := s.endpointKey("local-ep")
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	spec := map[string]any{"name": "blue", "endpoint_name": "local-ep",
		"model":              map[string]any{"path": "model"},
		"code_configuration": map[string]any{"code": "code", "scoring_script": "score.py"},
		"environment_variables": map[string]string{"VERSION": "v1"}}
	if c, body := s.deploy("POST", "local-ep", spec, up, true); c != 200 {
		t.Fatalf("create: %d %s", c, body)
	}
	d := s.waitDeployment("local-ep", "blue", "Succeeded", "Failed")
	if d.ProvisioningState != "Succeeded" || d.Compute != "local" || len(d.Replicas) != 1 || d.Replicas[0].State != "Ready" {
		t.Fatalf("deployment: %+v", d)
	}
	s.mustFerry("online-endpoint", "update", "local-ep", "--traffic", "blue=100")
	c, body := scoreBody(t, uri, key, "", `{"data": [1]}`)
	if c != 200 || !strings.Contains(body, `"iris-v1"`) || !strings.Contains(body, `"v1"`) {
		t.Fatalf("score: %d %s", c, body)
	}
	if c, _ := scoreBody(t, uri, "wrong", "", `{}`); c != 401 {
		t.Errorf("a wrong key: %d, want 401", c)
	}

	// init() failing: Failed, with the traceback.
	spec["name"] = "bad"
	spec["environment_variables"] = map[string]string{"FAIL_INIT": "no weights"}
	if c, body := s.deploy("POST", "local-ep", spec, up, true); c != 200 {
		t.Fatalf("create bad: %d %s", c, body)
	}
	bad := s.waitDeployment("local-ep", "bad", "Succeeded", "Failed")
	mustContain(t, "failed deployment's reason", bad.Reason, "Traceback", "RuntimeError: init failed on purpose: no weights")
	// The good deployment still answers.
	if c, body := scoreBody(t, uri, key, "blue", `{}`); c != 200 {
		t.Errorf("blue after bad failed: %d %s", c, body)
	}
}
