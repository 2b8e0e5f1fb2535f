package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// localWorkspace is the workspace the CLI starts by itself in the
// background: FERRY_HOME set, no FERRY_URL. Its server is the CLI's to
// start, so the test sees it only through the CLI and FERRY_HOME's files.
type localWorkspace struct {
	t    *testing.T
	home string
}

// newLocalWorkspace is a fresh FERRY_HOME whose -work sibling the job
// account can reach. The test's end stops the server and everything it
// started, with `ferry server stop --all`, and checks that nothing of it
// is left.
func newLocalWorkspace(t *testing.T) *localWorkspace {
	t.Helper()
	w := &localWorkspace{t: t, home: filepath.Join(passableDir(t), "home")}
	t.Cleanup(func() {
		w.stopAll()
		// Whatever --all missed is ended here, so that it does not spoil
		// the tests after; that it was there failed the test.
		killRunnersUnder(t, []string{w.home, w.home + "-work"})
	})
	return w
}

// stopAll runs `ferry server stop --all` and checks that no process of
// the workspace is left.
func (w *localWorkspace) stopAll() {
	w.t.Helper()
	if r := w.ferry("server", "stop", "--all"); r.code != 0 {
		w.t.Errorf("server stop --all: %s", r)
	}
	if left := w.procs(); len(left) != 0 {
		w.t.Errorf("server stop --all left processes of the workspace running:\n%s", strings.Join(left, "\n"))
	}
}

// ferry runs the CLI on the local workspace, which starts its server
// when none runs.
func (w *localWorkspace) ferry(args ...string) result {
	w.t.Helper()
	return runFerry(w.t, []string{"FERRY_HOME=" + w.home, "FERRY_URL=", "FERRY_TOKEN="}, args...)
}

func (w *localWorkspace) mustFerry(args ...string) result {
	w.t.Helper()
	r := w.ferry(args...)
	if r.code != 0 {
		w.t.Fatalf("ferry %s: %s\nserver log:\n%s", strings.Join(args, " "), r, w.log())
	}
	return r
}

func (w *localWorkspace) log() string {
	b, _ := os.ReadFile(filepath.Join(w.home, "server.log"))
	return string(b)
}

// server is the running server as the harness's helpers know one: its
// URL and token as the local workspace records them.
func (w *localWorkspace) server() *server {
	w.t.Helper()
	var st struct {
		Running bool   `json:"running"`
		URL     string `json:"url"`
	}
	r := w.mustFerry("server", "status", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || !st.Running {
		w.t.Fatalf("server status: %v %s", err, r)
	}
	tok, err := os.ReadFile(filepath.Join(w.home, "owner.token"))
	if err != nil {
		w.t.Fatal(err)
	}
	return &server{t: w.t, dir: w.home, url: st.URL, token: strings.TrimSpace(string(tok)), home: w.home, output: &syncBuffer{}}
}

// procs lists the processes run from the workspace's ferry binaries (its
// server, executors, runners, agents, shims), "PID ARGS" each.
func (w *localWorkspace) procs() []string {
	var out []string
	for _, p := range testutil.Procs() {
		if strings.HasPrefix(p.Exe, w.home+"/") || strings.HasPrefix(p.Exe, w.home+"-work/") {
			out = append(out, strconv.Itoa(p.PID)+" "+p.CmdLine())
		}
	}
	return out
}

// A restart of the CLI's own background server (`ferry server stop`, then
// any command) loses nothing it ran: a local job that went on while no
// server ran completes with its whole log; the compute instance, the
// cluster's two nodes and the endpoint's replica are the same ones,
// neither lost nor replaced; the scoring URI is unchanged and answers
// from the same replica process. Then `server stop --all` ends all of it,
// running jobs' processes included.
func TestLocalWorkspaceRestartKeepsRunningWork(t *testing.T) {
	testutil.RequirePython(t)
	t.Setenv("HOME", t.TempDir()) // the instance's shells run no profile of this machine's
	w := newLocalWorkspace(t)

	gate := filepath.Join(jobWritableDir(t), "gate")
	w.mustFerry("job", "create", "--name", "local-long", "-f", jobFile(t, fmt.Sprintf(`command: |
  for i in $(seq 1 10); do echo "before $i"; done
  while [ ! -e %s ]; do sleep 0.05; done
  for i in $(seq 1 10); do echo "after $i"; done
`, gate), nil))
	s := w.server()
	url := s.url

	// Not makeInstance: its end stops the instance through a server, and
	// here `server stop --all` ends it, with the server.
	ci := t.TempDir()
	writeFiles(t, ci, map[string]string{"ci.yml": "name: dev-box\ntype: computeinstance\nsize: Standard_DS1_v2\n"})
	s.mustFerry("compute", "create", "-f", filepath.Join(ci, "ci.yml"))
	s.waitComputeState("dev-box", "Running")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "pair", "Standard_DS1_v2", 2, 600))
	s.mustFerry("job", "create", "--name", "pair-job", "-f", jobFile(t, fmt.Sprintf(`command: |
  echo "rank $NODE_RANK up"
  while [ ! -e %s ]; do sleep 0.05; done
  echo "rank $NODE_RANK done"
compute: azureml:pair
resources:
  instance_count: 2
distribution:
  type: pytorch
`, gate), nil))

	scoringURI, key := s.endpointKey("restart-ep")
	code, model := scoringApp(t)
	up := map[string]string{"code_snapshot": s.uploadDir(code), "model_snapshot": s.uploadDir(model)}
	if c, body := s.deploy("POST", "restart-ep", deploymentSpec("blue", "restart-ep", "v1", nil), up, true); c != 200 {
		t.Fatalf("create the deployment: %d %s", c, body)
	}
	if d := s.waitDeployment("restart-ep", "blue", "Succeeded", "Failed"); d.ProvisioningState != "Succeeded" {
		t.Fatalf("deployment: %+v\nserver log:\n%s", d, w.log())
	}
	s.mustFerry("online-endpoint", "update", "restart-ep", "--traffic", "blue=100")
	c, body := scoreBody(t, scoringURI, key, "", `{}`)
	var answered struct{ PID int }
	if c != 200 || json.Unmarshal([]byte(body), &answered) != nil || answered.PID == 0 {
		t.Fatalf("score: %d %s", c, body)
	}
	replicas := replicaJobs(s.deployment("restart-ep", "blue"))

	s.waitStatus("local-long", "Running")
	s.waitStatus("pair-job", "Running")
	waitLog(t, s, "local-long", "before 10")
	instanceNodes := nodeNames(s.nodes("dev-box"))
	pairNodes := nodeNames(s.waitNodes("pair", 2, "Busy"))

	r := w.mustFerry("server", "stop")
	mustContain(t, "server stop", r.stderr, "stopped the Ferry workspace server")
	// While no server runs, the jobs go on and write more of their logs.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)

	// The next command starts the server again, at the same address.
	w.mustFerry("job", "list")
	s = w.server()
	if s.url != url {
		t.Fatalf("the server came back at %s, was at %s: what it started keeps calling the old address", s.url, url)
	}

	if j := s.waitStatus("local-long", "Completed", "Failed", "Canceled"); j.Status != "Completed" {
		t.Fatalf("local-long: %s (%s)\nserver log:\n%s", j.Status, j.StatusReason, w.log())
	}
	var want strings.Builder
	for _, what := range []string{"before", "after"} {
		for i := 1; i <= 10; i++ {
			fmt.Fprintf(&want, "%s %d\n", what, i)
		}
	}
	if got := s.mustFerry("job", "stream", "local-long").stdout; got != want.String() {
		t.Errorf("local-long's log after the restart:\n%s\nwant:\n%s", got, want.String())
	}
	if j := s.waitStatus("pair-job", "Completed", "Failed", "Canceled"); j.Status != "Completed" {
		t.Fatalf("pair-job: %s (%s)\nserver log:\n%s", j.Status, j.StatusReason, w.log())
	}
	if got := s.mustFerry("job", "stream", "pair-job").stdout; !strings.Contains(got, "rank 0 up") || !strings.Contains(got, "rank 0 done") {
		t.Errorf("pair-job's log (rank 0) after the restart:\n%s", got)
	}

	if st := s.computeState("dev-box"); st != "Running" {
		t.Errorf("the instance is %s after the restart, want Running", st)
	}
	if got := nodeNames(s.nodes("dev-box")); !slices.Equal(got, instanceNodes) {
		t.Errorf("the instance's nodes are %v after the restart, were %v", got, instanceNodes)
	}
	if got := nodeNames(s.waitNodes("pair", 2, "Idle")); !slices.Equal(got, pairNodes) {
		t.Errorf("the cluster's nodes are %v after the restart, were %v", got, pairNodes)
	}

	ep := parseEndpoint(t, s.mustFerry("online-endpoint", "show", "restart-ep", "-o", "json"))
	if ep.ScoringURI != scoringURI {
		t.Errorf("the scoring URI is %s after the restart, was %s", ep.ScoringURI, scoringURI)
	}
	d := s.deployment("restart-ep", "blue")
	if got := replicaJobs(d); !slices.Equal(got, replicas) || d.ProvisioningState != "Succeeded" {
		t.Errorf("after the restart the deployment is %s with replicas %v, was Succeeded with %v: %+v", d.ProvisioningState, got, replicas, d.Replicas)
	}
	var again struct{ PID int }
	if c, body := scoreBody(t, scoringURI, key, "", `{}`); c != 200 || json.Unmarshal([]byte(body), &again) != nil || again.PID != answered.PID {
		t.Errorf("score after the restart: %d %s, want 200 from the same worker (pid %d)", c, body, answered.PID)
	}

	// --all: the replica, the instance and a job running on a cluster
	// node end with the server and the agents and executor it started.
	s.mustFerry("job", "create", "--name", "pair-late", "-f", jobFile(t, "command: echo late; sleep 300\ncompute: azureml:pair\n", nil))
	s.waitStatus("pair-late", "Running")
	waitLog(t, s, "pair-late", "late")
	r = w.mustFerry("server", "stop", "--all")
	mustContain(t, "server stop --all", r.stderr, "stopped the Ferry workspace server", "stopped everything the server started")
	if left := w.procs(); len(left) != 0 {
		t.Errorf("server stop --all left processes of the workspace running:\n%s", strings.Join(left, "\n"))
	}
	for _, job := range append(replicas, "pair-late") {
		if ps := testutil.JobProcs(job); len(ps) != 0 {
			t.Errorf("job %s still has processes after server stop --all: %v", job, ps)
		}
	}
}

func nodeNames(ns []nodeView) []string {
	var names []string
	for _, n := range ns {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
}
