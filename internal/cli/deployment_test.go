package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// scoreScript is a scoring script as Azure's inference server runs it:
// init() once, run() per request, its answer JSON.
const scoreScript = `import json

def init():
    global greeting
    greeting = "hello"
    print("score.py: init done", flush=True)

def run(raw_data):
    data = json.loads(raw_data)
    return {"greeting": greeting, "n": len(data["data"])}
`

// deploymentDir writes an endpoint file, a deployment file whose fields
// the caller gives (after name and code_configuration) and the scoring
// code in src/, and returns the folder.
func deploymentDir(t *testing.T, deployment string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"endpoint.yml": "name: iris-ep\n",
		"blue.yml":     "name: blue\ncode_configuration:\n  code: src\n  scoring_script: score.py\n" + deployment,
		"src/score.py": scoreScript,
	})
	return dir
}

// create refuses what it can tell is wrong before it uploads anything,
// and names the field: the endpoint (left out, or not made), the
// registered model, the instance_type without --local, the code folder.
func TestOnlineDeploymentCreateRefusesBeforeUploading(t *testing.T) {
	s := startServer(t)
	dir := deploymentDir(t, "")
	if r := s.ferry(t, "online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml")); r.code != 0 {
		t.Fatalf("endpoint create: %s", r)
	}
	writeFiles(t, dir, map[string]string{"envs/env.yml": "image: python:3.11\nconda_file: conda.yml\n"})
	for _, c := range []struct {
		what, file string
		args       []string
		wants      []string
	}{
		{"no endpoint", "name: blue\ninstance_type: Standard_DS3_v2\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", nil,
			[]string{"endpoint_name", "is required"}},
		{"an endpoint not made", "name: blue\nendpoint_name: nope-ep\ninstance_type: Standard_DS3_v2\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", nil,
			[]string{"d.yml:2: endpoint_name: endpoint nope-ep does not exist"}},
		{"an endpoint not made, by flag", "name: blue\ninstance_type: Standard_DS3_v2\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", []string{"--endpoint-name", "nope-ep"},
			[]string{"--endpoint-name: endpoint nope-ep does not exist"}},
		{"an unknown model", "name: blue\nendpoint_name: iris-ep\nmodel: azureml:ghost:1\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", []string{"--local"},
			[]string{"d.yml:3: model:", "ghost"}},
		{"no instance_type", "name: blue\nendpoint_name: iris-ep\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", nil,
			[]string{"instance_type: is required", "--local"}},
		{"no code folder", "name: blue\nendpoint_name: iris-ep\ncode_configuration:\n  code: nosuch\n  scoring_script: score.py\n", []string{"--local"},
			[]string{"d.yml:4: code_configuration.code: nosuch does not exist"}},
		{"no model folder", "name: blue\nendpoint_name: iris-ep\nmodel:\n  path: nosuch-model\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", []string{"--local"},
			[]string{"model.path: nosuch-model does not exist"}},
		{"no environment file", "name: blue\nendpoint_name: iris-ep\nenvironment: file:envs/nosuch.yml\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", []string{"--local"},
			[]string{"d.yml:3: environment: envs/nosuch.yml does not exist"}},
		// The environment file's own paths are relative to it, and named at its line.
		{"no conda file beside the environment file", "name: blue\nendpoint_name: iris-ep\nenvironment: file:envs/env.yml\ncode_configuration:\n  code: src\n  scoring_script: score.py\n", []string{"--local"},
			[]string{"env.yml:2: conda_file: conda.yml does not exist", filepath.Join(dir, "envs")}},
	} {
		writeFiles(t, dir, map[string]string{"d.yml": c.file})
		r := s.ferry(t, append([]string{"online-deployment", "create", "-f", filepath.Join(dir, "d.yml"), "--no-wait"}, c.args...)...)
		if r.code == 0 {
			t.Errorf("%s: created: %s", c.what, r)
			continue
		}
		mustContain(t, c.what, r.stderr, c.wants...)
		if strings.Contains(r.stderr, "uploaded") || strings.Contains(r.stderr, "nothing to upload") {
			t.Errorf("%s: uploaded before it refused: %s", c.what, r.stderr)
		}
	}
	for _, args := range [][]string{
		{"online-deployment", "list", "--endpoint-name", ""},
		{"online-deployment", "create", "-f", "blue.yml", "-e", "ir"},
	} {
		if got := completions(t, s, args...); len(got) != 1 || got[0] != "iris-ep" {
			t.Errorf("__complete %q: %q, want iris-ep", args, got)
		}
	}
	r := s.ferry(t, "online-deployment", "list", "-e", "iris-ep", "-o", "json")
	var ds []apitypes.OnlineDeployment
	if mustJSON(t, r, &ds); len(ds) != 0 {
		t.Errorf("refused deployments were made: %+v", ds)
	}
	r = s.ferry(t, "online-deployment", "show", "blue")
	if r.code == 0 {
		t.Fatalf("show with no endpoint: %s", r)
	}
	mustContain(t, "show with no endpoint", r.stderr, "--endpoint-name")
	r = s.ferry(t, "online-deployment", "create", "-f", filepath.Join(dir, "blue.yml"), "-e", "iris-ep", "--local", "--all-traffic", "--no-wait")
	if r.code == 0 {
		t.Fatalf("--all-traffic --no-wait: %s", r)
	}
	mustContain(t, "--all-traffic --no-wait", r.stderr, "--all-traffic", "--no-wait")
}

// A --local deployment runs its replica (the real inference server, in
// python3) on the server's machine: create waits until it is Succeeded
// and moves the traffic to it; the endpoint scores with it; show, list
// and get-logs say what runs; delete is refused while it takes traffic,
// then waits until it is gone. A second deployment made with --no-wait
// is shown, listed and deleted while it starts.
func TestOnlineDeploymentLocal(t *testing.T) {
	s := startServer(t)
	dir := deploymentDir(t, "")
	if r := s.ferry(t, "online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml")); r.code != 0 {
		t.Fatalf("endpoint create: %s", r)
	}
	blue := filepath.Join(dir, "blue.yml")

	r := s.ferry(t, "online-deployment", "create", "-f", blue, "-e", "iris-ep", "--local", "--all-traffic", "-o", "json")
	var v apitypes.OnlineDeployment
	mustJSON(t, r, &v)
	if v.ProvisioningState != apitypes.DeploymentSucceeded || len(v.Replicas) != 1 || v.Replicas[0].State != "Ready" || !v.Local {
		t.Fatalf("create: %+v\n%s", v, r)
	}
	mustContain(t, "create's progress", r.stderr, "code_configuration.code: uploaded", "deployment blue: Creating", "deployment blue: Succeeded", "traffic blue=100")

	writeFiles(t, dir, map[string]string{"req.json": `{"data": [1, 2, 3]}`})
	r = s.ferry(t, "online-endpoint", "invoke", "-n", "iris-ep", "--request-file", filepath.Join(dir, "req.json"), "--deployment", "blue")
	if r.code != 0 {
		t.Fatalf("invoke: %s", r)
	}
	mustContain(t, "invoke", r.stdout, `"greeting"`, `"n": 3`)
	// --deployment is the azureml-model-deployment header, which the
	// gateway follows whatever the split.
	r = s.ferry(t, "online-endpoint", "invoke", "-n", "iris-ep", "--request-file", filepath.Join(dir, "req.json"), "--deployment", "nosuch")
	if r.code == 0 {
		t.Fatalf("invoke --deployment nosuch: %s", r)
	}
	mustContain(t, "invoke --deployment nosuch", r.stderr, "404", "no deployment nosuch")
	r = s.ferry(t, "online-endpoint", "show", "-n", "iris-ep")
	if r.code != 0 {
		t.Fatalf("endpoint show: %s", r)
	}
	mustContain(t, "endpoint show", r.stdout, "traffic:", "blue=100", "deployment blue:", "1 requests (0 errors)")

	r = s.ferry(t, "online-deployment", "show", "-n", "blue", "-e", "iris-ep")
	if r.code != 0 {
		t.Fatalf("show: %s", r)
	}
	mustContain(t, "show", r.stdout, "provisioning_state:", "Succeeded", "compute:", "local (--local)", "instance_count:", "REPLICA JOB", v.Replicas[0].Job, "Ready", v.Replicas[0].Address, "Running")
	r = s.ferry(t, "online-deployment", "get-logs", "-n", "blue", "-e", "iris-ep")
	if r.code != 0 {
		t.Fatalf("get-logs: %s", r)
	}
	mustContain(t, "get-logs", r.stdout, "==> replica "+v.Replicas[0].Job, "score.py: init done")
	r = s.ferry(t, "online-deployment", "get-logs", "blue", "-e", "iris-ep", "--lines", "1")
	if r.code != 0 || strings.Count(strings.TrimSpace(r.stdout), "\n") != 1 {
		t.Errorf("get-logs --lines 1: want a header and one line: %s", r)
	}

	// A second deployment, not waited for.
	r = s.ferry(t, "online-deployment", "create", "-f", blue, "-n", "green", "-e", "iris-ep", "--local", "--no-wait", "-o", "json")
	var g apitypes.OnlineDeployment
	if mustJSON(t, r, &g); g.Name != "green" || g.ProvisioningState != apitypes.DeploymentCreating {
		t.Fatalf("create --no-wait: %+v", g)
	}
	r = s.ferry(t, "online-deployment", "list", "--endpoint-name", "iris-ep")
	if r.code != 0 {
		t.Fatalf("list: %s", r)
	}
	mustContain(t, "list", r.stdout, "blue", "green", "Succeeded", "local")
	if diff := completions(t, s, "online-deployment", "show", "--endpoint-name", "iris-ep", ""); len(diff) != 2 || diff[0] != "blue" || diff[1] != "green" {
		t.Errorf("TAB completes %q, want blue and green", diff)
	}
	r = s.ferry(t, "online-deployment", "show", "green", "-e", "iris-ep")
	if r.code != 0 {
		t.Fatalf("show green: %s", r)
	}
	mustContain(t, "show green", r.stdout, "name:", "green", "provisioning_state:")
	if r = s.ferry(t, "online-deployment", "get-logs", "green", "-e", "iris-ep"); r.code != 0 {
		t.Errorf("get-logs of a starting deployment: %s", r)
	}
	r = s.ferry(t, "online-deployment", "delete", "green", "-e", "iris-ep")
	if r.code != 0 {
		t.Fatalf("delete green: %s", r)
	}
	mustContain(t, "delete green", r.stdout, "deleted online deployment green")

	r = s.ferry(t, "online-deployment", "delete", "blue", "-e", "iris-ep")
	if r.code == 0 {
		t.Fatalf("delete while it takes traffic: %s", r)
	}
	mustContain(t, "delete while it takes traffic", r.stderr, "100%", "--traffic")
	if r = s.ferry(t, "online-endpoint", "update", "iris-ep", "--traffic", ""); r.code != 0 {
		t.Fatalf("traffic off: %s", r)
	}
	r = s.ferry(t, "online-deployment", "delete", "-n", "blue", "-e", "iris-ep", "--no-wait")
	if r.code != 0 {
		t.Fatalf("delete --no-wait: %s", r)
	}
	testutil.WaitFor(t, 60*time.Second, "blue gone", func() bool {
		r := s.ferry(t, "online-deployment", "list", "-e", "iris-ep", "-o", "json")
		var ds []apitypes.OnlineDeployment
		mustJSON(t, r, &ds)
		return len(ds) == 0
	})
}

// A deployment whose init() raises is Failed, and create says why (the
// traceback) and exits non-zero.
func TestOnlineDeploymentFailedInit(t *testing.T) {
	s := startServer(t)
	dir := deploymentDir(t, "endpoint_name: iris-ep\n")
	writeFiles(t, dir, map[string]string{"src/score.py": "def init():\n    raise RuntimeError('no model here')\n\ndef run(raw):\n    return raw\n"})
	if r := s.ferry(t, "online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml")); r.code != 0 {
		t.Fatalf("endpoint create: %s", r)
	}
	r := s.ferry(t, "online-deployment", "create", "-f", filepath.Join(dir, "blue.yml"), "--local")
	if r.code == 0 {
		t.Fatalf("create of a failing deployment: %s", r)
	}
	mustContain(t, "create", r.stderr, "deployment blue: Failed", "deployment blue failed:", "no model here", "get-logs")
	r = s.ferry(t, "online-deployment", "show", "blue", "-e", "iris-ep")
	if r.code != 0 {
		t.Fatalf("show: %s", r)
	}
	mustContain(t, "show", r.stdout, "Failed", "reason:", "no model here")
}

// update uploads what changed (here the inline model's file), rolls the
// change out and waits until it is Succeeded: the endpoint then answers
// with the new model.
func TestOnlineDeploymentUpdate(t *testing.T) {
	s := startServer(t)
	dir := deploymentDir(t, "endpoint_name: iris-ep\nmodel:\n  path: model\n")
	writeFiles(t, dir, map[string]string{
		"src/score.py": `import json, os

def init():
    global greeting
    with open(os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "greeting.txt")) as f:
        greeting = f.read().strip()

def run(raw_data):
    return {"greeting": greeting}
`,
		"model/greeting.txt": "hello",
		"req.json":           `{"data": [1]}`,
	})
	if r := s.ferry(t, "online-endpoint", "create", "-f", filepath.Join(dir, "endpoint.yml")); r.code != 0 {
		t.Fatalf("endpoint create: %s", r)
	}
	blue := filepath.Join(dir, "blue.yml")
	invoke := func() string {
		t.Helper()
		r := s.ferry(t, "online-endpoint", "invoke", "iris-ep", "-r", filepath.Join(dir, "req.json"))
		if r.code != 0 {
			t.Fatalf("invoke: %s", r)
		}
		return r.stdout
	}
	r := s.ferry(t, "online-deployment", "create", "-f", blue, "--local", "--all-traffic")
	if r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	mustContain(t, "create", r.stderr, "model.path: uploaded 1 file")
	mustContain(t, "create", r.stdout, "model:", "inline (model)")
	mustContain(t, "before the update", invoke(), `"greeting": "hello"`)

	writeFiles(t, dir, map[string]string{"model/greeting.txt": "bonjour"})
	r = s.ferry(t, "online-deployment", "update", "-f", blue, "-o", "json")
	var v apitypes.OnlineDeployment
	mustJSON(t, r, &v)
	if v.ProvisioningState != apitypes.DeploymentSucceeded {
		t.Fatalf("update: %+v", v)
	}
	mustContain(t, "update", r.stderr, "deployment blue: Updating", "deployment blue: Succeeded")
	ready := 0
	for _, rep := range v.Replicas {
		if rep.Generation == 2 && rep.State == "Ready" {
			ready++
		}
	}
	if ready != 1 {
		t.Errorf("update: %d Ready replicas of generation 2, want 1: %+v", ready, v.Replicas)
	}
	// The old replica leaves routing in the controller's pass that makes
	// the deployment Succeeded, just after its state is written: an
	// answer or two may still come from it, never an error.
	testutil.WaitFor(t, 10*time.Second, "answers of the new model", func() bool { return strings.Contains(invoke(), `"greeting": "bonjour"`) })

	r = s.ferry(t, "online-deployment", "update", "-f", blue, "--local")
	if r.code == 0 {
		t.Errorf("update --local: %s", r)
	}
}
