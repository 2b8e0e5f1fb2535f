package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func countJobs(t *testing.T, s *server) int {
	t.Helper()
	var jobs []json.RawMessage
	if err := json.Unmarshal([]byte(s.mustFerry("job", "list", "-o", "json", "--max-results", "0").stdout), &jobs); err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

func TestBadJobFilesAreRefusedClearly(t *testing.T) {
	s := startServer(t)
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo ok\n", nil), "--name", "keeper", "--stream")
	cases := []struct {
		name  string
		yaml  string
		files map[string]string
		args  []string
		want  []string
	}{
		{name: "invalid yaml", yaml: "command: [unclosed\n", want: []string{"line"}},
		{name: "unknown field", yaml: "comand: echo hi\n", want: []string{"comand", "command"}},
		{name: "wrong type", yaml: "command: echo\nlimits:\n  timeout: soon\n", want: []string{"limits.timeout"}},
		{name: "missing command", yaml: "type: command\nname: x1\n", want: []string{"command"}},
		{name: "unknown compute", yaml: "command: echo\ncompute: azureml:gpu-cluster\n", want: []string{"gpu-cluster", "local"}},
		{name: "missing input path", yaml: "command: cat ${{inputs.d}}\ninputs:\n  d: {type: uri_file, path: nope.txt}\n", want: []string{"inputs.d.path", "does not exist"}},
		{name: "undeclared input", yaml: "command: echo ${{inputs.nothere}}\n", want: []string{"nothere"}},
		{name: "distribution on local", yaml: "command: echo\ndistribution: {type: pytorch, process_count_per_instance: 2}\n", want: []string{"distribution"}},
		{name: "instance count on local", yaml: "command: echo\nresources: {instance_count: 2}\n", want: []string{"instance_count"}},
		{name: "duplicate name", yaml: "command: echo\nname: keeper\n", want: []string{"keeper", "already exists"}},
		{name: "bad set", yaml: "command: echo\n", args: []string{"--set", "novalue"}, want: []string{"novalue"}},
		{name: "snapshot too large", yaml: "command: echo\ncode: src\n",
			files: map[string]string{"src/big.bin": strings.Repeat("x", 4096), "src/small.txt": "x"},
			args:  []string{"--max-snapshot-size", "1KiB"}, want: []string{"big.bin", ".ferryignore"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"job", "create", "-f", jobFile(t, c.yaml, c.files)}, c.args...)
			r := s.ferry(args...)
			if r.code == 0 {
				t.Fatalf("accepted: %s", r)
			}
			mustContain(t, "error", r.stderr, c.want...)
		})
	}
	if n := countJobs(t, s); n != 1 {
		t.Errorf("refused submissions left %d jobs, want only the first", n)
	}
	if j := s.show("keeper"); j.Status != "Completed" {
		t.Errorf("keeper harmed: %+v", j)
	}
}

func TestAPIAuthAndProblems(t *testing.T) {
	s := startServer(t)
	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {"fry_wrong", 401}, {s.token, 200}} {
		code, body := s.call("GET", "/v1/jobs", c.token, nil)
		if code != c.want {
			t.Errorf("token %q: %d %s", c.token, code, body)
		}
		if code != 200 {
			var p struct {
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if json.Unmarshal(body, &p) != nil || p.Status != code || p.Detail == "" {
				t.Errorf("not a problem document: %s", body)
			}
		}
	}
	// A bad spec over the API names the fields.
	code, body := s.call("POST", "/v1/jobs", s.token, `{"spec": {"command": "echo", "limits": {"timeout": -1}}}`)
	if code != 400 || !strings.Contains(string(body), "limits.timeout") {
		t.Errorf("negative timeout: %d %s", code, body)
	}
	code, body = s.call("POST", "/v1/jobs", s.token, `{"spec": {"command": "echo"}, "extra": 1}`)
	if code != 400 || !strings.Contains(string(body), "extra") {
		t.Errorf("unknown field: %d %s", code, body)
	}
	code, _ = s.call("POST", "/v1/jobs/nope/cancel", s.token, nil)
	if code != 404 {
		t.Errorf("cancel unknown job: %d", code)
	}
	// Manifests that escape their directory are refused.
	for _, p := range []string{"../x", "/etc/passwd", "a/../../b"} {
		m := `{"files":[{"path":` + strconvQuote(p) + `,"mode":420,"size":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}]}`
		code, body := s.call("POST", "/v1/snapshots", s.token, m)
		if code != 400 {
			t.Errorf("manifest path %q: %d %s", p, code, body)
		}
	}
	// The OpenAPI document is served and lists the API.
	code, body = s.call("GET", "/openapi.json", "", nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal(body, &doc) != nil || doc.OpenAPI == "" {
		t.Fatalf("openapi: %d %s", code, body)
	}
	for _, p := range []string{"/v1/jobs", "/v1/jobs/{name}", "/v1/jobs/{name}/metrics", "/v1/computes"} {
		if doc.Paths[p] == nil {
			t.Errorf("openapi lacks %s", p)
		}
	}
	// The owner token never shows up in the server's own output.
	if strings.Contains(s.output.String(), s.token) {
		t.Error("the server printed the owner token")
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestOwnerTokenFile(t *testing.T) {
	s := startServer(t)
	st, err := os.Stat(filepath.Join(s.dir, "owner.token"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("owner.token: %v %v", st, err)
	}
	mustContain(t, "server output", s.output.String(), filepath.Join(s.dir, "owner.token"))
	// A restart keeps the same token.
	old := s.token
	s.stop()
	s.start()
	if s.token != old {
		t.Fatal("token changed across restart")
	}
	s.mustFerry("job", "list")
}

func TestComputeCommands(t *testing.T) {
	s := startServer(t)
	mustContain(t, "list", s.mustFerry("compute", "list").stdout, "local")
	file := jobFile(t, "name: one-slot\ntype: local\ncapacity: 1\ndescription: a single slot\n", nil)
	s.mustFerry("compute", "create", "-f", file)
	var c struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Capacity int    `json:"capacity"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("compute", "show", "one-slot", "-o", "json").stdout), &c); err != nil || c.Capacity != 1 || c.Type != "local" {
		t.Fatalf("show: %+v %v", c, err)
	}
	r := s.mustFerry("job", "create", "-f", jobFile(t, "command: echo on one-slot\ncompute: azureml:one-slot\n", nil), "--stream")
	mustContain(t, "log", r.stdout, "on one-slot")

	r = s.ferry("compute", "create", "-f", file)
	if r.code == 0 || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("duplicate compute: %s", r)
	}
	r = s.ferry("compute", "create", "-f", jobFile(t, "name: k8s-ns\ntype: kubernetes\nresource_id: /subscriptions/x/k8s\n", nil))
	// A Kubernetes compute with no kubeconfig, the server not in a
	// cluster: refused naming the field, not an internal error.
	if r.code == 0 || !strings.Contains(r.stderr, "kubeconfig: is required") {
		t.Errorf("kubernetes without a kubeconfig: %s", r)
	}
	r = s.ferry("compute", "create", "-f", jobFile(t, "name: bad\ntype: local\ncapacity: -1\n", nil))
	if r.code == 0 || !strings.Contains(r.stderr, "capacity") {
		t.Errorf("negative capacity: %s", r)
	}
	if r := s.ferry("compute", "delete", "local"); r.code == 0 {
		t.Errorf("deleted local: %s", r)
	}
	s.mustFerry("compute", "delete", "one-slot")
	if r := s.ferry("compute", "show", "one-slot"); r.code == 0 || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("show deleted: %s", r)
	}
}

func TestSnapshotUploadsOnlyChangesAndHonoursIgnoreFiles(t *testing.T) {
	s := startServer(t)
	dir := filepath.Dir(jobFile(t, "command: ls -a | sort\ncode: src\n", map[string]string{
		"src/keep.txt":       "keep",
		"src/skip.log":       "skip",
		"src/.ferryignore":   "*.log\nbuild/\n",
		"src/.gitignore":     "keep.txt\n", // not used: .ferryignore wins
		"src/build/out.o":    "obj",
		"src/sub/nested.txt": "nested",
	}))
	file := filepath.Join(dir, "job.yml")
	r := s.mustFerry("job", "create", "-f", file, "--stream")
	mustContain(t, "listing", r.stdout, "keep.txt", "sub")
	for _, gone := range []string{"skip.log", "build"} {
		if strings.Contains(r.stdout, gone) {
			t.Errorf("%s was uploaded despite .ferryignore:\n%s", gone, r.stdout)
		}
	}
	mustContain(t, "first upload", r.stderr, "uploaded 4 files")
	r = s.mustFerry("job", "create", "-f", file, "--stream")
	mustContain(t, "unchanged resubmit", r.stderr, "all 4 files were already in the workspace; nothing to upload")
	writeFiles(t, dir, map[string]string{"src/keep.txt": "changed"})
	r = s.mustFerry("job", "create", "-f", file, "--stream")
	mustContain(t, "one change", r.stderr, "uploaded 1 of 4 files")
}

func TestQuickstartOnDefaultWorkspace(t *testing.T) {
	home := t.TempDir()
	env := []string{"FERRY_HOME=" + home, "FERRY_URL=", "FERRY_TOKEN="}
	r := runFerry(t, env, "quickstart")
	t.Cleanup(func() { stopHomeServer(t, home) })
	if r.code != 0 {
		t.Fatalf("quickstart: %s", r)
	}
	mustContain(t, "log", r.stdout, "epoch  20", "wrote outputs/model.json")
	mustContain(t, "summary", r.stderr, "started the local Ferry workspace", "Completed", "metric loss", "outputs:")
	if _, err := os.Stat(filepath.Join(home, "owner.token")); err != nil {
		t.Fatal(err)
	}
	// The next command reuses the running server.
	r2 := runFerry(t, env, "job", "list", "-o", "json")
	if r2.code != 0 || strings.Contains(r2.stderr, "started the local Ferry workspace") {
		t.Fatalf("second command: %s", r2)
	}
	var jobs []job
	if err := json.Unmarshal([]byte(r2.stdout), &jobs); err != nil || len(jobs) != 1 || jobs[0].Status != "Completed" || jobs[0].Metrics["loss"] <= 0 {
		t.Fatalf("jobs: %v %s", err, r2.stdout)
	}
	model, err := os.ReadFile(filepath.Join(home, "downloads", jobs[0].Name, "artifacts", "outputs", "model.json"))
	if err != nil || !strings.Contains(string(model), `"w"`) {
		t.Fatalf("model.json: %q %v", model, err)
	}
}

func stopHomeServer(t *testing.T, home string) {
	data, err := os.ReadFile(filepath.Join(home, "server.json"))
	if err != nil {
		return
	}
	var info struct {
		PID     int    `json:"pid"`
		WorkDir string `json:"work_dir"`
	}
	if json.Unmarshal(data, &info) == nil && info.PID > 0 {
		if p, err := os.FindProcess(info.PID); err == nil {
			_ = p.Signal(os.Interrupt)
		}
	}
	// A server that runs as root, with its data dir where the job user
	// cannot pass, works under /var/lib/ferry-work; the test's jobs have
	// ended (quickstart waits for them).
	if info.WorkDir != "" && info.WorkDir != home+"-work" {
		_ = os.RemoveAll(info.WorkDir)
		_ = os.Remove(filepath.Dir(info.WorkDir)) // when it was the last
	}
}

// Every count and duration from outside is bounded at the API, with the
// field named: these are the values that once crashed the server in a loop
// (2^31 instances with a quota of 2^63-1 cores), grew a runner to 11.8 GB
// (10^8 processes per instance) or overflowed the timeout into an instant
// kill. And the server keeps serving afterwards.
func TestCountsAndDurationsAreBounded(t *testing.T) {
	s := startServer(t)
	for _, c := range []struct{ what, method, path, body, field string }{
		{"instance_count 2^31", "POST", "/v1/jobs", `{"spec": {"command": "true", "resources": {"instance_type": "Standard_DS1_v2", "instance_count": 2147483648}}}`, "resources.instance_count"},
		{"process_count_per_instance 10^8", "POST", "/v1/jobs", `{"spec": {"command": "true", "compute": "local", "distribution": {"type": "pytorch", "process_count_per_instance": 100000000}}}`, "distribution.process_count_per_instance"},
		{"timeout 9.3e9 s", "POST", "/v1/jobs", `{"spec": {"command": "true", "limits": {"timeout": 9300000000}}}`, "limits.timeout"},
		{"quota 2^63-1 cores", "PUT", "/v1/quotas/standardDSv2Family", `{"cores": 9223372036854775807}`, "cores"},
		{"max_instances 2^31", "POST", "/v1/computes", `{"name": "big-cluster", "type": "amlcompute", "size": "Standard_DS1_v2", "max_instances": 2147483648}`, "max_instances"},
	} {
		code, body := s.call(c.method, c.path, s.token, c.body)
		if code != 400 || !strings.Contains(string(body), c.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.what, code, body, c.field)
		}
	}
	// A cluster may not promise more processes per node than its size has cores.
	code, body := s.call("POST", "/v1/computes", s.token, `{"name": "ds1", "type": "amlcompute", "size": "Standard_DS1_v2", "max_instances": 1}`)
	if code != 200 {
		t.Fatalf("create cluster: %d %s", code, body)
	}
	code, body = s.call("POST", "/v1/jobs", s.token, `{"spec": {"command": "true", "compute": "ds1", "distribution": {"type": "pytorch", "process_count_per_instance": 64}}}`)
	if code != 400 || !strings.Contains(string(body), "process_count_per_instance") || !strings.Contains(string(body), "vCPUs") {
		t.Errorf("64 processes on a 1-vCPU size: %d %s", code, body)
	}
	if code, body := s.call("GET", "/v1/jobs", s.token, nil); code != 200 {
		t.Errorf("the server stopped answering: %d %s", code, body)
	}
}

// ferry version and ferry --version say which ferry this is, without a
// workspace.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(ferryBin, args...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "ferry ") || !strings.Contains(string(out), "go1.") {
			t.Errorf("ferry %s: %v %q", args[0], err, out)
		}
	}
}
