package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/testutil"
	"github.com/ferry-ml/ferry/internal/unixsock"
)

// deploymentOut is a deployment as the API shows it.
type deploymentOut struct {
	Name              string `json:"name"`
	ProvisioningState string `json:"provisioning_state"`
	Reason            string `json:"reason"`
	Compute           string `json:"compute"`
	Replicas          []struct {
		Job        string   `json:"job"`
		Generation int      `json:"generation"`
		State      string   `json:"state"`
		Address    string   `json:"address"`
		Socket     string   `json:"socket"`
		Workers    []string `json:"worker_sockets"`
		JobStatus  string   `json:"job_status"`
	} `json:"replicas"`
}

// scoreScript is a scoring script written as for Azure: init() reads the
// model, run() answers with it, the deployment's VERSION variable and its
// process id.
const scoreScript = `import json, os, time

def init():
    global model
    # As on Azure: a model registered as a folder is in AZUREML_MODEL_DIR
    # under its folder's name, one that is a file by its file's name. The
    # folder is a real one: scripts find their model with os.walk, which
    # does not follow links.
    root = os.environ["AZUREML_MODEL_DIR"]
    found = [os.path.relpath(os.path.join(d, name), root) for d, _, names in os.walk(root) for name in names]
    want = os.environ.get("MODEL_FILE", "model/weights.json")
    if want not in found:
        raise RuntimeError("os.walk(AZUREML_MODEL_DIR) found %r, not the model file %s" % (found, want))
    with open(os.path.join(root, want)) as f:
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
	b, _ := io.ReadAll(resp.Body) // a body cut off midway is what the caller sees
	return resp.StatusCode, string(b)
}

// scoringApp writes a deployment's code and model folders.
func scoringApp(t *testing.T) (code, model string) {
	t.Helper()
	code, model = t.TempDir(), filepath.Join(t.TempDir(), "model")
	writeFiles(t, code, map[string]string{"score.py": scoreScript})
	writeFiles(t, model, map[string]string{"weights.json": `{"name": "iris-v1"}`})
	return code, model
}

// deploymentSpec is a deployment of the scoringApp's code and model
// answering with version, with extra fields added.
func deploymentSpec(name, endpoint, version string, extra map[string]any) map[string]any {
	d := map[string]any{"name": name, "endpoint_name": endpoint,
		"model":                 map[string]any{"path": "model"},
		"code_configuration":    map[string]any{"code": "code", "scoring_script": "score.py"},
		"environment_variables": map[string]string{"VERSION": version}}
	maps.Copy(d, extra)
	return d
}

// A deployment on this machine (--local): its replica is Ferry's
// inference server running the scoring script as a job of the local
// target; it becomes Succeeded once the replica answers, scores through
// the gateway with the endpoint's key, and a failing init() makes a
// deployment Failed with the traceback as its reason.
func TestOnlineDeploymentLocal(t *testing.T) {
	// Three replicas at once here, each holding one of the local
	// target's slots while it runs.
	s := startServer(t, "--local-capacity", "4")
	uri, key := s.endpointKey("local-ep")
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	spec := deploymentSpec("blue", "local-ep", "v1", nil)
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
	var answered struct{ PID int }
	if json.Unmarshal([]byte(body), &answered) != nil || answered.PID == 0 {
		t.Fatalf("score: no pid in %s", body)
	}
	overSocket(t, s.deployment("local-ep", "blue"), answered.PID)
	onlyTheGateway(t, s.deployment("local-ep", "blue"))
	if c, _ := scoreBody(t, uri, "wrong", "", `{}`); c != 401 {
		t.Errorf("a wrong key: %d, want 401", c)
	}
	if c, _ := score(t, uri, ""); c != 401 {
		t.Errorf("no key: %d, want 401", c)
	}

	// A registered model that is a file, by reference: in
	// AZUREML_MODEL_DIR by its file's name.
	mdir := t.TempDir()
	writeFiles(t, mdir, map[string]string{"weights.json": `{"name": "iris-file"}`, "model.yml": "name: iris-file\npath: weights.json\n"})
	s.mustFerry("model", "create", "-f", filepath.Join(mdir, "model.yml"))
	green := map[string]any{"name": "green", "endpoint_name": "local-ep", "model": "azureml:iris-file@latest",
		"code_configuration":    map[string]any{"code": "code", "scoring_script": "score.py"},
		"environment_variables": map[string]string{"VERSION": "v1", "MODEL_FILE": "weights.json"}}
	if c, body := s.deploy("POST", "local-ep", green, map[string]string{"code_snapshot": up["code_snapshot"]}, true); c != 200 {
		t.Fatalf("create green: %d %s", c, body)
	}
	if g := s.waitDeployment("local-ep", "green", "Succeeded", "Failed"); g.ProvisioningState != "Succeeded" {
		t.Fatalf("green: %+v", g)
	}
	if c, body := scoreBody(t, uri, key, "green", `{}`); c != 200 || !strings.Contains(body, `"iris-file"`) {
		t.Fatalf("green, with the registered model: %d %s", c, body)
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

	// The key is in no log: not the server's, not the replica's.
	replicaLog := s.mustFerry("online-deployment", "get-logs", "-n", "blue", "-e", "local-ep")
	if !strings.Contains(replicaLog.stdout, "ferry_inference_server") || !strings.Contains(replicaLog.stdout, d.Replicas[0].Job) {
		t.Errorf("the replica's log has no status line: %s", replicaLog)
	}
	// The gateway's requests came in at the worker's own socket.
	if !strings.Contains(replicaLog.stdout+replicaLog.stderr, `worker-socket "POST /score HTTP/1.1" 200`) {
		t.Errorf("the replica's log shows no request that came in at its worker's socket: %s", replicaLog)
	}
	for what, text := range map[string]string{"server log": s.output.String(), "replica log": replicaLog.stdout + replicaLog.stderr} {
		if strings.Contains(text, key) {
			t.Errorf("the endpoint's key is in the %s", what)
		}
	}

	// An aml_token endpoint: get-credentials gives a token the gateway
	// takes (503: no deployment takes its traffic), a wrong one is 401.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tok.yml": "name: tok-ep\nauth_mode: aml_token\n"})
	tokURI := parseEndpoint(t, s.mustFerry("online-endpoint", "create", "-f", filepath.Join(dir, "tok.yml"), "-o", "json")).ScoringURI
	var tok struct {
		AccessToken   string `json:"accessToken"`
		ExpiryTimeUTC int64  `json:"expiryTimeUtc"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("online-endpoint", "get-credentials", "tok-ep").stdout), &tok); err != nil || tok.AccessToken == "" || tok.ExpiryTimeUTC < time.Now().Unix() {
		t.Fatalf("aml_token credentials: %v, token given %v, expiry %d", err, tok.AccessToken != "", tok.ExpiryTimeUTC)
	}
	if c, body := scoreBody(t, tokURI, tok.AccessToken, "", `{}`); c != http.StatusServiceUnavailable {
		t.Errorf("a right token: %d %s, want 503 (no traffic yet)", c, body)
	}
	for what, k := range map[string]string{"a wrong token": "nope", "the key of another endpoint": key} {
		if c, _ := scoreBody(t, tokURI, k, "", `{}`); c != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", what, c)
		}
	}
}

// overSocket checks that the replica whose worker answered with pid (a
// replica on this host) is reached by the gateway at its Unix socket,
// not its TCP port: the deployment shows the socket, and after a request
// through the gateway (whose connections to replicas stay open for the
// next) no TCP connection to the replica's port is open. It returns the
// replica's job and socket.
func overSocket(t *testing.T, d deploymentOut, pid int) (job, socket string) {
	t.Helper()
	addr := listenAddress(t, replicaFront(t, pid))
	where := hostPort(t, addr)
	var workers []string
	for _, r := range d.Replicas {
		if strings.HasSuffix(r.Address, where) {
			job, socket, workers = r.Job, r.Socket, r.Workers
		}
	}
	if job == "" {
		t.Fatalf("no replica is at %s, where the replica that answered listens: %+v", where, d.Replicas)
	}
	if !strings.HasSuffix(socket, "/.ferry-replica/replica.sock") {
		t.Errorf("replica %s, on this host, shows no Unix socket: %+v", job, d.Replicas)
	}
	// Its worker's own socket, where the gateway sends its requests.
	if len(workers) != 1 || workers[0] != socket+".w0" {
		t.Errorf("replica %s (one worker), on this host, shows worker sockets %v, want [%s.w0]", job, workers, socket)
	}
	if conns := connsTo(t, addr); len(conns) != 0 {
		t.Errorf("replica %s: %d TCP connections to its port %s after a request through the gateway; want none (the gateway on its host uses its socket)", job, len(conns), where)
	}
	return job, socket
}

// onlyTheGateway checks that the replica of d (one, on this host)
// answers no one but the gateway: its TCP port and its sockets answer a
// request without the replica's secret with 401, never reaching the
// scoring script, and an account other than the replica's cannot even
// connect to its socket (its folder is the replica's account's alone).
func onlyTheGateway(t *testing.T, d deploymentOut) {
	t.Helper()
	if len(d.Replicas) != 1 || d.Replicas[0].Socket == "" || len(d.Replicas[0].Workers) != 1 {
		t.Fatalf("want one replica on this host with a socket and a worker's: %+v", d.Replicas)
	}
	r := d.Replicas[0]
	ask := func(network, addr string) (int, string) {
		var dialer net.Dialer
		client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				if network == "unix" {
					return unixsock.Dial(ctx, &dialer, addr)
				}
				return dialer.DialContext(ctx, network, addr)
			}}}
		for _, x := range []struct{ method, path, body string }{{"GET", "/", ""}, {"POST", "/score", "{}"}} {
			req, err := http.NewRequest(x.method, "http://replica"+x.path, strings.NewReader(x.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				return 0, x.method + " " + x.path + ": " + err.Error()
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				return resp.StatusCode, x.method + " " + x.path + ": " + string(b)
			}
		}
		return http.StatusUnauthorized, ""
	}
	for where, at := range map[string][2]string{"TCP port " + r.Address: {"tcp", r.Address}, "socket": {"unix", r.Socket}, "worker's socket": {"unix", r.Workers[0]}} {
		if code, body := ask(at[0], at[1]); code != http.StatusUnauthorized {
			t.Errorf("the replica's %s, asked without its secret: %d %s, want 401", where, code, body)
		}
	}

	// Another account: nobody, in a process of its own.
	if os.Geteuid() != 0 {
		t.Log("not root: no other account to try the replica's socket as")
		return
	}
	python := ""
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Skip("needs a python3 that the nobody account can run (/usr/bin/python3: apt-get install python3) to connect to the replica's socket as another account")
	}
	const connect = `import os, socket, sys
p = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
try:
    if len(os.fsencode(p)) < 100:
        s.connect(p)
    else:
        d = os.open(os.path.dirname(p), os.O_RDONLY)
        s.connect("/proc/self/fd/%d/%s" % (d, os.path.basename(p)))
    print("connected")
except PermissionError as e:
    print("refused:", e)
except OSError as e:
    print("failed otherwise:", e)
`
	try := func(path string, as *syscall.Credential) string {
		cmd := exec.Command(python, "-c", connect, path)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s connecting to %s: %v\n%s", python, path, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// The same program, as root (the gateway's account), does connect:
	// what refuses nobody is the account, not the program.
	if got := try(r.Socket, nil); got != "connected" {
		t.Fatalf("connecting to the replica's socket as root: %s", got)
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	for _, p := range []string{r.Socket, r.Workers[0]} {
		if got := try(p, nobody); !strings.HasPrefix(got, "refused:") {
			t.Errorf("the account nobody connecting to the replica's socket %s: %s, want refused", p, got)
		}
	}
}

// loadResult counts a load generator's answers.
type loadResult struct {
	mu       sync.Mutex
	codes    map[int]int
	versions map[string]int
	failures []string
	failedAt []time.Time // when each request that failed was sent
}

func (l *loadResult) add(code int, body string, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes[code]++
	if code != 200 {
		l.failedAt = append(l.failedAt, sent)
		if len(l.failures) < 10 {
			l.failures = append(l.failures, fmt.Sprintf("%d %.600s", code, body)) // long enough for a replica socket's path
		}
		return
	}
	var a struct{ Version string }
	if json.Unmarshal([]byte(body), &a) == nil {
		l.versions[a.Version]++
	}
}

func (l *loadResult) snapshot() (map[int]int, map[string]int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.codes), maps.Clone(l.versions), slices.Clone(l.failures)
}

// failedSince is how many requests sent at or after t failed.
func (l *loadResult) failedSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, sent := range l.failedAt {
		if !sent.Before(t) {
			n++
		}
	}
	return n
}

// load sends requests from workers at once until stop is called, which
// returns what they got; running is what they have got so far.
func load(t *testing.T, uri, key string, workers int) (stop func() *loadResult, running *loadResult) {
	t.Helper()
	res := &loadResult{codes: map[int]int{}, versions: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				sent := time.Now()
				code, body := scoreBody(t, uri, key, "", `{"data": [1]}`)
				res.add(code, body, sent)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() *loadResult { cancel(); wg.Wait(); return res }, res
}

// replicaJobs is the sorted jobs of a deployment's replicas.
func replicaJobs(d deploymentOut) []string {
	var jobs []string
	for _, r := range d.Replicas {
		jobs = append(jobs, r.Job)
	}
	slices.Sort(jobs)
	return jobs
}

// waitReady waits until a deployment has n ready replicas and no other.
func (s *server) waitReady(endpoint, name string, n int) deploymentOut {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		d := s.deployment(endpoint, name)
		ready := 0
		for _, r := range d.Replicas {
			if r.State == "Ready" {
				ready++
			}
		}
		if ready == n && len(d.Replicas) == n {
			return d
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("deployment %s: %d of %d replicas ready: %+v", name, ready, n, d.Replicas)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Replicas on pool nodes (the serverless cluster of the deployment's
// instance_type, nodes of the process provider), under constant load: a
// rolling update fails no request and ends with only the new version
// answering; a replica killed mid-load loses only requests sent to it
// while it died and none once it is gone, the endpoint keeps answering
// and the replica is replaced; a
// 90/10 split lands within ±3 % over 1,000 requests; the deployment
// header picks a deployment; mirrored traffic reaches its deployment
// while the answers come from the live one.
func TestOnlineDeploymentOnPoolNodes(t *testing.T) {
	s := startServer(t, "--serverless-idle", "60s")
	uri, key := s.endpointKey("pool-ep")
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	blue := deploymentSpec("blue", "pool-ep", "v1", map[string]any{"instance_type": "Standard_DS1_v2", "instance_count": 2,
		"request_settings": map[string]any{"max_concurrent_requests_per_instance": 4}})
	if c, body := s.deploy("POST", "pool-ep", blue, up, false); c != 200 {
		t.Fatalf("create: %d %s", c, body)
	}
	d := s.waitDeployment("pool-ep", "blue", "Succeeded", "Failed")
	if d.ProvisioningState != "Succeeded" || d.Compute != "serverless-standard-ds1-v2" {
		t.Fatalf("blue: %+v", d)
	}
	d = s.waitReady("pool-ep", "blue", 2)
	if d.Replicas[0].Address == d.Replicas[1].Address {
		t.Fatalf("two replicas at one address: %+v", d.Replicas)
	}
	s.mustFerry("online-endpoint", "update", "pool-ep", "--traffic", "blue=100")

	// A rolling update under load.
	stop, _ := load(t, uri, key, 4)
	time.Sleep(500 * time.Millisecond)
	blue["environment_variables"] = map[string]string{"VERSION": "v2"}
	if c, body := s.deploy("PUT", "pool-ep", blue, up, false); c != 200 {
		t.Fatalf("update: %d %s", c, body)
	}
	s.waitDeployment("pool-ep", "blue", "Succeeded", "Failed")
	s.waitReady("pool-ep", "blue", 2)
	time.Sleep(500 * time.Millisecond)
	res := stop()
	codes, versions, failures := res.snapshot()
	if len(codes) != 1 || codes[200] == 0 || versions["v1"] == 0 || versions["v2"] == 0 {
		var timedOut []string // the gateway logs which replica did not answer
		for line := range strings.Lines(s.output.String()) {
			if strings.Contains(line, "timed out") || strings.Contains(line, "request failed") {
				timedOut = append(timedOut, line)
			}
		}
		t.Errorf("rolling update under load: answers %v, versions %v, failures %v; gateway: %v", codes, versions, failures, timedOut)
	}
	t.Logf("rolling update under load: %v answers, versions %v", codes, versions)
	for i := range 20 {
		if c, body := scoreBody(t, uri, key, "", `{}`); c != 200 || !strings.Contains(body, `"v2"`) {
			t.Fatalf("request %d after the update: %d %s", i, c, body)
		}
	}

	// A replica killed under load loses only requests sent to it: those
	// in flight, and those the gateway sent while it died (on a
	// connection it had not yet seen close, or one the dying replica's
	// socket still took). Once it is gone (its port refuses connections
	// and no connection to it is left) no request fails: the gateway
	// tries a refused request on another replica. The endpoint answers
	// throughout, and the replica is replaced.
	c, body := scoreBody(t, uri, key, "", `{}`)
	var a struct{ PID int }
	if c != 200 || json.Unmarshal([]byte(body), &a) != nil || a.PID == 0 {
		t.Fatalf("score: %d %s", c, body)
	}
	live := s.waitReady("pool-ep", "blue", 2)
	front := replicaFront(t, a.PID)
	addr := listenAddress(t, front)
	where := hostPort(t, addr)
	// Pool nodes of the process provider are on this host: the gateway
	// reaches their replicas at their sockets.
	killed, killedSocket := overSocket(t, live, a.PID)
	stop, running := load(t, uri, key, 4)
	time.Sleep(300 * time.Millisecond)
	atKill, _, _ := running.snapshot()
	killReplica(t, front)
	// Gone: its port refuses connections and no connection to it is left.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		conn, err := net.Dial("tcp", where)
		if err == nil {
			conn.Close()
		}
		if err != nil && len(connsTo(t, addr)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s, killed, still takes connections or has %d open 30 s later (dial: %v)", killed, len(connsTo(t, addr)), err)
		}
	}
	goneAt := time.Now()
	gone, _, _ := running.snapshot()
	time.Sleep(time.Second)
	end, _, failures := stop().snapshot()
	if end[200] == gone[200] {
		t.Errorf("killing replica %s under load: answers %v when it was killed, %v once it was gone, %v at the end; want answers after", killed, atKill, gone, end)
	}
	for _, f := range failures {
		if !strings.Contains(f, where) && (killedSocket == "" || !strings.Contains(f, killedSocket)) {
			t.Errorf("a request failed that was not sent to the killed replica at %s: %s", where, f)
		}
	}
	if n := running.failedSince(goneAt); n > 0 {
		t.Errorf("%d requests sent after replica %s was gone failed (answers %v then, %v at the end; failures %q)", n, killed, gone, end, failures)
	}
	// Replaced: two replicas ready again, the killed one not among them.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		d := s.waitReady("pool-ep", "blue", 2)
		if !slices.Contains(replicaJobs(d), killed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s, killed, is still one of blue's ready replicas 90 s later", killed)
		}
	}
	t.Logf("replica %s killed under load: answers %v at the kill, %v once it was gone, %v at the end; failures %q; replicas %v, then %v",
		killed, atKill, gone, end, failures, replicaJobs(live), replicaJobs(s.deployment("pool-ep", "blue")))

	// A second deployment, a 90/10 split, the header, and a mirror.
	green := maps.Clone(blue)
	green["name"], green["instance_count"] = "green", 1
	green["environment_variables"] = map[string]string{"VERSION": "green"}
	if c, body := s.deploy("POST", "pool-ep", green, up, false); c != 200 {
		t.Fatalf("create green: %d %s", c, body)
	}
	s.waitDeployment("pool-ep", "green", "Succeeded")
	s.mustFerry("online-endpoint", "update", "pool-ep", "--traffic", "blue=90 green=10")
	counts := map[string]int{}
	for range 1000 {
		c, body := scoreBody(t, uri, key, "", `{}`)
		var a struct{ Version string }
		if c != 200 || json.Unmarshal([]byte(body), &a) != nil {
			t.Fatalf("split: %d %s", c, body)
		}
		counts[a.Version]++
	}
	if g := counts["green"]; g < 70 || g > 130 || counts["v2"]+g != 1000 {
		t.Errorf("90/10 split over 1000 requests: %v; want green within 100±30", counts)
	}
	for range 10 {
		if c, body := scoreBody(t, uri, key, "green", `{}`); c != 200 || !strings.Contains(body, `"green"`) {
			t.Fatalf("azureml-model-deployment: green: %d %s", c, body)
		}
	}
	s.checkMirror(t, "pool-ep", uri, key, "blue=100 green=0", "green", `"v2"`)

	// Deleting the endpoint takes its deployments with it: every
	// replica's job is cancelled.
	var jobs []string
	for _, name := range []string{"blue", "green"} {
		for _, r := range s.deployment("pool-ep", name).Replicas {
			jobs = append(jobs, r.Job)
		}
	}
	s.mustFerry("online-endpoint", "delete", "-n", "pool-ep", "--yes")
	for _, j := range jobs {
		s.waitStatus(j, "Canceled")
	}
	if c, _ := s.call("GET", "/v1/online-endpoints/pool-ep/deployments", s.token, nil); c != http.StatusNotFound {
		t.Errorf("the deployments of a deleted endpoint: %d, want 404", c)
	}
}

// The request settings and scale to zero, on pool nodes: a request past
// request_timeout_ms is 408; more than max_concurrent_requests_per_instance
// at once waits max_queue_wait_ms, then is 429; a deployment with
// min_instances 0 goes to no replica after scale_to_zero_after, holds the
// next request while one starts, and answers it; and after kill -9 of the
// server, a running replica is found again and serves, as the same job.
func TestOnlineDeploymentLimitsAndScaleToZero(t *testing.T) {
	s := startServer(t, "--serverless-idle", "60s")
	uri, key := s.endpointKey("limits-ep")
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	base := func(name string) map[string]any {
		return deploymentSpec(name, "limits-ep", name, map[string]any{"instance_type": "Standard_DS1_v2"})
	}
	slow := base("slow")
	slow["request_settings"] = map[string]any{"request_timeout_ms": 1000, "max_concurrent_requests_per_instance": 1, "max_queue_wait_ms": 100}
	zero := base("zero")
	zero["scale_settings"] = map[string]any{"type": "target_utilization", "min_instances": 0, "max_instances": 2, "polling_interval": 1, "scale_to_zero_after": 2}
	for _, d := range []map[string]any{slow, zero} {
		if c, body := s.deploy("POST", "limits-ep", d, up, false); c != 200 {
			t.Fatalf("create %s: %d %s", d["name"], c, body)
		}
	}
	s.waitDeployment("limits-ep", "slow", "Succeeded")
	s.waitDeployment("limits-ep", "zero", "Succeeded")

	// 408 past the request timeout.
	if c, body := scoreBody(t, uri, key, "slow", `{"sleep": 3}`); c != http.StatusRequestTimeout {
		t.Errorf("a request past request_timeout_ms: %d %s, want 408", c, body)
	}
	// 429 beyond one request at a time and 100 ms of waiting. (The
	// replica may still be answering the request above: it is not
	// stopped, only no longer waited for.)
	time.Sleep(2 * time.Second)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			c, _ := scoreBody(t, uri, key, "slow", `{"sleep": 0.6}`)
			mu.Lock()
			codes[c]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[http.StatusTooManyRequests] < 3 || codes[200] < 1 || codes[200]+codes[http.StatusTooManyRequests] != 5 {
		t.Errorf("5 requests at once to one slot with 100 ms of queue wait: %v; want one or two 200 and the rest 429", codes)
	}

	// Scale to zero, then a cold start on the next request.
	waitReplicas := func(n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for len(s.deployment("limits-ep", "zero").Replicas) != n {
			if time.Now().After(deadline) {
				t.Fatalf("deployment zero: replicas %+v, want %d", s.deployment("limits-ep", "zero").Replicas, n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReplicas(0)
	start := time.Now()
	if c, body := scoreBody(t, uri, key, "zero", `{}`); c != 200 || !strings.Contains(body, `"zero"`) {
		t.Fatalf("the first request to a deployment scaled to zero: %d %s", c, body)
	}
	t.Logf("cold start from zero (pool node up): %v", time.Since(start).Round(time.Millisecond))
	// The answer came from the replica the request started; after the
	// idle time it goes again. (Waiting to see it listed first raced its
	// idle time on a loaded machine.)
	waitReplicas(0)

	// Autoscale: one replica at a time each, busy from three clients at
	// once, scales to max_instances 3.
	auto := base("auto")
	auto["request_settings"] = map[string]any{"max_concurrent_requests_per_instance": 1, "max_queue_wait_ms": 2000}
	auto["scale_settings"] = map[string]any{"type": "target_utilization", "min_instances": 1, "max_instances": 3, "polling_interval": 1, "target_utilization_percentage": 70}
	if c, body := s.deploy("POST", "limits-ep", auto, up, false); c != 200 {
		t.Fatalf("create auto: %d %s", c, body)
	}
	s.waitDeployment("limits-ep", "auto", "Succeeded")
	s.mustFerry("online-endpoint", "update", "limits-ep", "--traffic", "auto=100")
	res := &loadResult{codes: map[int]int{}, versions: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var busy sync.WaitGroup
	for range 3 {
		busy.Go(func() {
			for ctx.Err() == nil {
				sent := time.Now()
				code, body := scoreBody(t, uri, key, "", `{"sleep": 0.3}`)
				res.add(code, body, sent)
			}
		})
	}
	s.waitReady("limits-ep", "auto", 3)
	cancel()
	busy.Wait()
	autoCodes, _, _ := res.snapshot()
	if autoCodes[200] == 0 {
		t.Errorf("autoscaled deployment under load: %v", autoCodes)
	}
	t.Logf("autoscale 1 → 3 under 3 clients: answers %v", autoCodes)

	// kill -9 of the server: slow's replica is found again.
	before := s.waitReady("limits-ep", "slow", 1).Replicas[0].Job
	s.kill9()
	s.start()
	after := s.waitReady("limits-ep", "slow", 1).Replicas[0].Job
	if after != before {
		t.Errorf("after kill -9 the replica is %s, not %s: it was replaced, not found again", after, before)
	}
	if c, body := scoreBody(t, uri, key, "slow", `{}`); c != 200 || !strings.Contains(body, `"slow"`) {
		t.Errorf("slow after kill -9: %d %s", c, body)
	}
}

// A replica in an image environment on the Docker engine: the scoring
// script runs in a container of the image, on this machine.
func TestOnlineDeploymentInImage(t *testing.T) {
	testutil.RequireBaseImage(t)
	s := startServer(t)
	uri, key := s.endpointKey("image-ep")
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	d := deploymentSpec("boxed", "image-ep", "in-image", map[string]any{"environment": map[string]any{"image": testutil.BaseImage}})
	if c, body := s.deploy("POST", "image-ep", d, up, true); c != 200 {
		t.Fatalf("create: %d %s", c, body)
	}
	if got := s.waitDeployment("image-ep", "boxed", "Succeeded", "Failed"); got.ProvisioningState != "Succeeded" {
		t.Fatalf("deployment in an image: %+v", got)
	}
	s.mustFerry("online-endpoint", "update", "image-ep", "--traffic", "boxed=100")
	if c, body := scoreBody(t, uri, key, "", `{}`); c != 200 || !strings.Contains(body, `"in-image"`) {
		t.Fatalf("score: %d %s", c, body)
	}
	// The container's job folder is mounted at the same path: the
	// gateway reaches the replica at its socket there, as on the host.
	if reps := s.deployment("image-ep", "boxed").Replicas; len(reps) != 1 || !strings.HasSuffix(reps[0].Socket, "/.ferry-replica/replica.sock") ||
		len(reps[0].Workers) != 1 || reps[0].Workers[0] != reps[0].Socket+".w0" {
		t.Errorf("the replica in a container on this host shows no Unix socket, or not its worker's: %+v", reps)
	}
	out, err := exec.Command("docker", "ps", "--filter", "label=ferry.job", "--format", `{{.Label "ferry.job"}}`).Output()
	if err != nil || !strings.Contains(string(out), "image-ep-boxed-") {
		t.Errorf("no container runs the replica: %q %v", out, err)
	}
	// Deleting the deployment stops its container.
	s.mustFerry("online-endpoint", "update", "image-ep", "--traffic", "")
	if c, body := s.call("DELETE", "/v1/online-endpoints/image-ep/deployments/boxed", s.token, nil); c != 200 {
		t.Fatalf("delete: %d %s", c, body)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, _ := s.call("GET", "/v1/online-endpoints/image-ep/deployments/boxed", s.token, nil)
		if c == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment not gone after delete: %d", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, _ := exec.Command("docker", "ps", "--filter", "label=ferry.job", "-q").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers left after the deployment was deleted: %s", out)
	}
}

// checkMirror sets endpoint's traffic (all of it to one deployment, whose
// answers hold liveMark) with a 50% mirror to deployment mirror, sends 40
// requests, and checks that mirror's requests (its share before counted
// out) rose by more than 5: half of 40 are copied, so fewer fail but for
// a chance of about one in a million. The copies are answered after the
// live requests, so they are waited for.
func (s *server) checkMirror(t *testing.T, endpoint, uri, key, traffic, mirror, liveMark string) {
	t.Helper()
	requests := func() int64 {
		var d struct {
			Stats struct{ Requests int64 } `json:"stats"`
		}
		_, raw := s.call("GET", "/v1/online-endpoints/"+endpoint+"/deployments/"+mirror, s.token, nil)
		_ = json.Unmarshal(raw, &d)
		return d.Stats.Requests
	}
	before := requests()
	s.mustFerry("online-endpoint", "update", endpoint, "--traffic", traffic, "--mirror-traffic", mirror+"=50")
	for range 40 {
		if c, body := scoreBody(t, uri, key, "", `{}`); c != 200 || !strings.Contains(body, liveMark) {
			t.Fatalf("with a mirror to %s: %d %s (answers come from the live deployment, %s)", mirror, c, body, liveMark)
		}
	}
	mirrored := requests() - before
	for deadline := time.Now().Add(10 * time.Second); mirrored <= 5 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mirrored = requests() - before
	}
	if mirrored <= 5 {
		t.Errorf("%s's requests during 40 with a 50%% mirror to it: %d more; want more than 5", mirror, mirrored)
	}
}
