package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// clusterFile is an Azure ML amlCompute file, unchanged but for its numbers.
func clusterFile(t *testing.T, name, size string, maxN, idle int) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"cluster.yml": `$schema: https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json
name: ` + name + `
type: amlcompute
size: ` + size + `
min_instances: 0
max_instances: ` + strconv.Itoa(maxN) + `
idle_time_before_scale_down: ` + strconv.Itoa(idle) + `
tier: dedicated
`})
	return filepath.Join(dir, "cluster.yml")
}

type nodeView struct {
	Name    string   `json:"name"`
	State   string   `json:"state"`
	Size    string   `json:"size"`
	Address string   `json:"address"`
	Jobs    []string `json:"jobs"`
	Facts   *struct {
		CPUs int `json:"cpus"`
	} `json:"facts"`
}

func (s *server) nodes(compute string) []nodeView {
	s.t.Helper()
	var ns []nodeView
	r := s.mustFerry("compute", "list-nodes", compute, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &ns); err != nil {
		s.t.Fatalf("list-nodes: %v\n%s", err, r.stdout)
	}
	return ns
}

// waitNodes waits until the compute has n nodes in one of the states.
func (s *server) waitNodes(compute string, n int, states ...string) []nodeView {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ns := s.nodes(compute)
		count := 0
		for _, x := range ns {
			for _, st := range states {
				if x.State == st {
					count++
				}
			}
		}
		if count == n && len(ns) == n {
			return ns
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("compute %s has nodes %+v, want %d in %v", compute, ns, n, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesWith returns the pids whose command line contains all of words.
func processesWith(words ...string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		all := true
		for _, w := range words {
			all = all && strings.Contains(cmd, w)
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestClusterScalesFromZeroToNAndBack(t *testing.T) {
	s := startServer(t, "--node-lease", "4s")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "cpu-cluster", "Standard_DS1_v2", 2, 3))
	mustContain(t, "new cluster", s.mustFerry("compute", "show", "cpu-cluster").stdout, "nodes:", "0 now, target 0 (min 0, max 2)")

	// A burst of three jobs: the cluster grows to its max of 2, runs them,
	// and after its idle time goes back to zero.
	job := jobFile(t, "command: echo ran $FERRY_JOB_ID on rank $NODE_RANK; sleep 1\ncompute: azureml:cpu-cluster\n", nil)
	for i := range 3 {
		s.mustFerry("job", "create", "-f", job, "--name", "burst-"+strconv.Itoa(i))
	}
	s.waitNodes("cpu-cluster", 2, "Idle", "Busy")
	for i := range 3 {
		name := "burst-" + strconv.Itoa(i)
		if j := s.waitStatus(name, "Completed", "Failed"); j.Status != "Completed" {
			t.Fatalf("%s: %s (%s)", name, j.Status, j.StatusReason)
		}
		mustContain(t, name, s.mustFerry("job", "stream", name).stdout, "ran "+name+" on rank 0")
	}
	ns := s.nodes("cpu-cluster")
	for _, n := range ns {
		if n.Size != "Standard_DS1_v2" || n.Address == "" || n.Facts == nil || n.Facts.CPUs < 1 {
			t.Errorf("node %+v lacks its size, address or facts", n)
		}
	}
	s.waitNodes("cpu-cluster", 0)
	show := s.mustFerry("compute", "show", "cpu-cluster", "--events", "0").stdout
	mustContain(t, "events", show, "scale_up", "node_joined", "scale_down")
	if pids := processesWith("agent", "--server", s.url); len(pids) > 0 {
		t.Errorf("agents still running after scale-down: %v", pids)
	}

	// Live bounds: at max 1, a second job waits for the first and says why;
	// raising the bound again lets it run at once.
	s.mustFerry("compute", "resize", "cpu-cluster", "--max", "1")
	s.mustFerry("job", "create", "-f", jobFile(t, "command: sleep 60\ncompute: azureml:cpu-cluster\n", nil), "--name", "hog")
	s.waitStatus("hog", "Running")
	s.mustFerry("job", "create", "-f", job, "--name", "held")
	j := s.waitReason("held", "max_instances 1")
	if j.Status != "Queued" {
		t.Fatalf("held: %s", j.Status)
	}
	mustContain(t, "resized", s.mustFerry("compute", "show", "cpu-cluster", "--events", "0").stdout, "resize")
	s.mustFerry("compute", "update", "cpu-cluster", "--max-instances", "2")
	if j := s.waitStatus("held", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("held after resize: %s (%s)", j.Status, j.StatusReason)
	}
	s.mustFerry("job", "cancel", "hog")
}

// waitReason waits until a job's status reason contains want.
func (s *server) waitReason(name, want string) job {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j := s.show(name)
		if strings.Contains(j.StatusReason, want) {
			return j
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s: %s (%s), want a reason with %q", name, j.Status, j.StatusReason, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestQuotaBlocksScaleUp(t *testing.T) {
	s := startServer(t)
	mustContain(t, "quota list", s.mustFerry("quota", "list").stdout, "standardDSv2Family")
	s.mustFerry("quota", "set", "standardDSv2Family", "2")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "small", "Standard_DS2_v2", 3, 60))
	s.mustFerry("job", "create", "-f", jobFile(t, "command: sleep 30\ncompute: azureml:small\n", nil), "--name", "q1")
	s.waitStatus("q1", "Running")
	// q2 is streamed from its submission: the stream says why it waits.
	q2 := jobFile(t, "command: \"true\"\ncompute: azureml:small\n", nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the server stops: a stream would wait for it forever
	cli := exec.CommandContext(ctx, ferryBin, "job", "create", "-f", q2, "--name", "q2", "--stream")
	cli.Env = append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+s.home)
	cliErr := &syncBuffer{}
	cli.Stderr = cliErr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	streamed := make(chan error, 1)
	go func() { streamed <- cli.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); s.ferry("job", "show", "q2").code != 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("q2 was not submitted: %s", cliErr.String())
		}
	}
	j := s.waitReason("q2", "quota for family DSv2 is 2/2 cores")
	if j.Status != "Queued" {
		t.Errorf("q2: %s", j.Status)
	}
	if ns := s.nodes("small"); len(ns) != 1 {
		t.Errorf("the quota allows one 2-core node; the cluster has %d", len(ns))
	}
	mustContain(t, "quota use", s.mustFerry("quota", "list").stdout, "standardDSv2Family")
	s.mustFerry("job", "cancel", "q1")
	if j := s.waitStatus("q2", "Completed", "Failed"); j.Status != "Completed" {
		t.Errorf("q2 after q1's node freed: %s (%s)", j.Status, j.StatusReason)
	}
	if err := <-streamed; err != nil {
		t.Errorf("streaming q2: %v\n%s", err, cliErr.String())
	}
	mustContain(t, "q2's stream", cliErr.String(), "job q2: queued: quota for family DSv2 is 2/2 cores")
}

func TestNodeKilledMidJobIsLostAndReplaced(t *testing.T) {
	s := startServer(t, "--node-lease", "3s")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "fragile", "Standard_DS1_v2", 1, 60))
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo started; sleep 300\ncompute: azureml:fragile\n", nil), "--name", "victim")
	s.waitStatus("victim", "Running")
	waitLog(t, s, "victim", "started")
	ns := s.nodes("fragile")
	if len(ns) != 1 {
		t.Fatalf("nodes %+v", ns)
	}
	// Kill the node: its agent and every process it started.
	pids := processesWith(ns[0].Name)
	if len(pids) == 0 {
		t.Fatalf("no processes of node %s", ns[0].Name)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	j := s.waitStatus("victim", "Failed", "Completed", "Canceled")
	if j.Status != "Failed" || j.StatusReason != "node lost" {
		t.Fatalf("victim: %s (%s), want Failed (node lost)", j.Status, j.StatusReason)
	}
	mustContain(t, "events", s.mustFerry("compute", "show", "fragile", "--events", "0").stdout, "node_lost")
	// Demand remains: a new job gets a new node.
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo second\ncompute: azureml:fragile\n", nil), "--name", "after")
	if j := s.waitStatus("after", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("after: %s (%s)", j.Status, j.StatusReason)
	}
	for _, n := range s.nodes("fragile") {
		if n.Name == ns[0].Name {
			t.Errorf("the lost node %s is still listed", n.Name)
		}
	}
}

func TestClusterInputRefusals(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	for file, want := range map[string]string{
		"name: cc1\ntype: amlcompute\nsize: Standard_Nope\n":                                       "is not in the size catalog",
		"name: cc2\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 3\nmax_instances: 1\n": "max_instances",
		"name: cc3\ntype: amlcompute\nsize: Standard_ND96asr_v4\n":                                 "restricted",
		"name: cc4\ntype: amlcompute\nsize: Standard_DS3_v2\nprovider: {type: cloud9}\n":           "provider",
	} {
		p := filepath.Join(dir, "c.yml")
		if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		r := s.ferry("compute", "create", "-f", p)
		if r.code == 0 {
			t.Errorf("%q was taken", file)
		}
		mustContain(t, file, r.stderr, want)
	}
	s.mustFerry("compute", "create", "-f", clusterFile(t, "cpu", "Standard_DS3_v2", 2, 60))
	for spec, want := range map[string]string{
		"command: x\ncompute: azureml:cpu\nresources: {instance_count: 3}\n":               "max_instances 2",
		"command: x\ncompute: azureml:cpu\nresources: {properties: {gpus: 1}}\n":           "has no GPU",
		"command: x\ncompute: azureml:cpu\nresources: {instance_type: Standard_NC6s_v3}\n": "instance_type",
	} {
		r := s.ferry("job", "create", "-f", jobFile(t, spec, nil))
		if r.code == 0 {
			t.Errorf("%q was taken", spec)
		}
		mustContain(t, spec, r.stderr, want)
	}
}

// requireTorch skips unless Debian's python3-torch is there (the system
// python: Debian's packages are not seen by other pythons on PATH).
func requireTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and /usr/bin/python3 has no torch: .ci/run installs python3-torch")
		}
		t.Skip("needs torch for /usr/bin/python3: apt-get install python3-torch")
	}
}

const ddpScript = `import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank}/{world} node {os.environ['NODE_RANK']} local {os.environ['LOCAL_RANK']} sum {t.item()}", flush=True)
assert t.item() == world * (world + 1) / 2, t.item()
dist.destroy_process_group()
`

func TestPyTorchDDPOnTwoNodes(t *testing.T) {
	requireTorch(t)
	s := startServer(t)
	s.mustFerry("compute", "create", "-f", clusterFile(t, "ddp-cluster", "Standard_DS2_v2", 2, 60))
	job := jobFile(t, `command: /usr/bin/python3 ddp.py
code: src
compute: azureml:ddp-cluster
resources:
  instance_count: 2
distribution:
  type: pytorch
  process_count_per_instance: 2
`, map[string]string{"src/ddp.py": ddpScript})
	r := s.ferry("job", "create", "-f", job, "--stream", "--name", "ddp")
	if r.code != 0 {
		t.Fatalf("ddp job: %s", r)
	}
	checkDDP(t, s, "ddp", r.stdout)
}

// checkDDP checks a 2-node x 2-process ddpScript job that ended: every
// rank's all-reduce, from node rank 0's log (stream0, the job's) and node
// rank 1's beside it, and the job Completed.
func checkDDP(t *testing.T, s *server, name, stream0 string) {
	t.Helper()
	all := stream0 + s.mustFerry("job", "stream", name, "--rank", "1").stdout
	for rank := range 4 {
		mustContain(t, "ranks' logs", all, fmt.Sprintf("rank %d/4 node %d local %d sum 10.0", rank, rank/2, rank%2))
	}
	if j := s.show(name); j.Status != "Completed" {
		t.Errorf("%s: %s (%s)", name, j.Status, j.StatusReason)
	}
}

func TestFailingRankFailsTheMultiNodeJob(t *testing.T) {
	s := startServer(t, "--cancel-grace", "2s")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "gang", "Standard_DS1_v2", 2, 60))
	job := jobFile(t, `command: 'if [ "$NODE_RANK" = 1 ]; then sleep 1; echo giving up; exit 3; fi; echo waiting; sleep 300'
compute: azureml:gang
resources:
  instance_count: 2
distribution:
  type: pytorch
`, nil)
	r := s.ferry("job", "create", "-f", job, "--stream", "--name", "gang-fail")
	if r.code == 0 {
		t.Fatalf("the job passed: %s", r)
	}
	j := s.show("gang-fail")
	if j.Status != "Failed" || !strings.Contains(j.StatusReason, "node rank 1") {
		t.Errorf("gang-fail: %s (%s), want Failed naming node rank 1", j.Status, j.StatusReason)
	}
	// Node rank 0's sleep is stopped through its agent. The job's own
	// processes are looked for (by FERRY_JOB_ID), not any "sleep 300":
	// tests of other packages, run at the same time, sleep 300 too.
	waitNoProcesses(t, "gang-fail")
}

func TestServerlessJobRunsOnAnImplicitCluster(t *testing.T) {
	s := startServer(t, "--serverless-idle", "2s")
	job := jobFile(t, "command: echo serverless $FERRY_JOB_ID\nresources:\n  instance_type: Standard_DS1_v2\n", nil)
	r := s.mustFerry("job", "create", "-f", job, "--stream", "--name", "sl-1")
	mustContain(t, "serverless log", r.stdout, "serverless sl-1")
	var j struct {
		Compute string `json:"compute"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("job", "show", "sl-1", "-o", "json").stdout), &j); err != nil || j.Compute != "serverless-standard-ds1-v2" {
		t.Fatalf("serverless job ran on %q (%v)", j.Compute, err)
	}
	mustContain(t, "compute list", s.mustFerry("compute", "list").stdout, "serverless-standard-ds1-v2", "amlcompute")
	s.waitNodes("serverless-standard-ds1-v2", 0)

	bad := jobFile(t, "command: \"true\"\nresources:\n  instance_type: Standard_DS1_v3\n", nil)
	r = s.ferry("job", "create", "-f", bad)
	if r.code == 0 {
		t.Fatalf("an unknown size was taken: %s", r)
	}
	mustContain(t, "unknown size", r.stderr, "resources.instance_type", "did you mean Standard_DS1_v2")
}

func TestExecProviderCluster(t *testing.T) {
	script, err := filepath.Abs("../../examples/providers/local-exec.sh")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FERRY_EXE", ferryBin)
	t.Setenv("FERRY_EXEC_DIR", t.TempDir())
	t.Setenv("FERRY_EXEC_GRACE", "2")
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"c.yml": "name: exec-cluster\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 1\nidle_time_before_scale_down: 2\nprovider:\n  type: exec\n  program: " + script + "\n"})
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "c.yml"))
	r := s.mustFerry("job", "create", "-f", jobFile(t, "command: echo via exec\ncompute: azureml:exec-cluster\n", nil), "--stream")
	mustContain(t, "exec job", r.stdout, "via exec")
	s.waitNodes("exec-cluster", 0)
	if pids := processesWith("agent", "--server", s.url); len(pids) > 0 {
		t.Errorf("agents left after scale-down: %v", pids)
	}
}

func TestFailingLaunchesAndNodesThatNeverJoin(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	writeFiles(t, dir, map[string]string{
		// A cloud that is out of capacity.
		"fail.sh": "#!/bin/sh\ncat >/dev/null\ncase $1 in\nlaunch) echo 'no capacity in region lab-1' >&2; exit 1;;\nlist) echo '{\"machines\": []}';;\n*) echo '{}';;\nesac\n",
		// A cloud whose machines never start their agent.
		"ghost.sh": "#!/bin/sh\nin=$(cat)\necho \"$1 $in\" >> " + calls + "\ncase $1 in\nlaunch) echo '{\"id\": \"ghost-1\", \"state\": \"running\"}';;\nlist) echo '{\"machines\": []}';;\n*) echo '{}';;\nesac\n",
	})
	for _, f := range []string{"fail.sh", "ghost.sh"} {
		if err := os.Chmod(filepath.Join(dir, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "--node-join-timeout", "3s")
	for name, prog := range map[string]string{"failing": "fail.sh", "ghostly": "ghost.sh"} {
		writeFiles(t, dir, map[string]string{name + ".yml": "name: " + name + "\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 1\nprovider:\n  type: exec\n  program: " + filepath.Join(dir, prog) + "\n"})
		s.mustFerry("compute", "create", "-f", filepath.Join(dir, name+".yml"))
		s.mustFerry("job", "create", "-f", jobFile(t, "command: \"true\"\ncompute: azureml:"+name+"\n", nil), "--name", "on-"+name)
	}
	waitShow := func(compute string, wants ...string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			out := s.mustFerry("compute", "show", compute, "--events", "0").stdout
			ok := true
			for _, w := range wants {
				ok = ok && strings.Contains(out, w)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("compute show %s never showed %q:\n%s", compute, wants, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitShow("failing", "launch_failed", "no capacity in region lab-1", "retrying in")
	if j := s.show("on-failing"); j.Status != "Queued" {
		t.Errorf("on-failing: %s", j.Status)
	}
	waitShow("ghostly", "did not join within 3s")
	// The event is recorded as the node is retired; the provider's
	// terminate call comes just after it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		b, err := os.ReadFile(calls)
		if err == nil && strings.Contains(string(b), `terminate {"id":"ghost-1"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node that never joined was not terminated within 30 s of its event; calls:\n%s (%v)", b, err)
		}
	}
}

func TestClusterJobSurvivesServerRestart(t *testing.T) {
	s := startServer(t, "--node-lease", "5s")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "steady", "Standard_DS1_v2", 1, 60))
	s.mustFerry("job", "create", "-f", jobFile(t, "command: for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done\ncompute: azureml:steady\n", nil), "--name", "through")
	s.waitStatus("through", "Running")
	waitLog(t, s, "through", "tick 1")
	s.kill9()
	time.Sleep(2 * time.Second)
	s.start()
	if j := s.waitStatus("through", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("through: %s (%s)", j.Status, j.StatusReason)
	}
	log := s.mustFerry("job", "stream", "through").stdout
	if want := "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\n"; log != want {
		t.Errorf("log after the restart = %q, want %q", log, want)
	}
	if ns := s.nodes("steady"); len(ns) != 1 || ns[0].State == "Lost" {
		t.Errorf("the node did not ride out the restart: %+v", ns)
	}
}

// dockerCluster is a cluster file whose nodes are containers of the node image.
func dockerCluster(t *testing.T, name, size string, maxN, idle int) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"c.yml": fmt.Sprintf("name: %s\ntype: amlcompute\nsize: %s\nmin_instances: 0\nmax_instances: %d\nidle_time_before_scale_down: %d\nprovider:\n  type: docker\n  image: %s\n",
		name, size, maxN, idle, testutil.NodeImage)})
	return filepath.Join(dir, "c.yml")
}

// startNodeServer starts a server that containers can reach: it listens on
// every address, and the docker provider points agents at the network's gateway.
func startNodeServer(t *testing.T, args ...string) *server {
	t.Helper()
	testutil.RequireNodeImage(t)
	port := freeAddr(t)[len("127.0.0.1:"):]
	s := &server{t: t, dir: t.TempDir(), work: workDir(t), addr: "127.0.0.1:" + port, home: t.TempDir(), output: &syncBuffer{},
		args: append([]string{"--addr", "0.0.0.0:" + port}, args...)}
	s.start()
	t.Cleanup(s.end)
	return s
}

func TestDockerProviderScalesAndRunsDDP(t *testing.T) {
	s := startNodeServer(t)
	s.mustFerry("compute", "create", "-f", dockerCluster(t, "box-cluster", "Standard_DS2_v2", 2, 3))

	// Two jobs at once: two nodes, each a container with its own address.
	job := jobFile(t, "command: echo on $(hostname) at $(hostname -I)\ncompute: azureml:box-cluster\n", nil)
	s.mustFerry("job", "create", "-f", job, "--name", "box-1")
	s.mustFerry("job", "create", "-f", job, "--name", "box-2")
	ns := s.waitNodes("box-cluster", 2, "Idle", "Busy")
	if ns[0].Address == ns[1].Address || ns[0].Address == "127.0.0.1" {
		t.Errorf("docker nodes share an address: %+v", ns)
	}
	for _, name := range []string{"box-1", "box-2"} {
		if j := s.waitStatus(name, "Completed", "Failed"); j.Status != "Completed" {
			t.Fatalf("%s: %s (%s)", name, j.Status, j.StatusReason)
		}
	}

	// DDP across the two containers: 2 nodes x 2 processes, gloo over the network.
	ddp := jobFile(t, `command: /usr/bin/python3 ddp.py
code: src
compute: azureml:box-cluster
resources:
  instance_count: 2
distribution:
  type: pytorch
  process_count_per_instance: 2
`, map[string]string{"src/ddp.py": ddpScript})
	r := s.ferry("job", "create", "-f", ddp, "--stream", "--name", "box-ddp")
	if r.code != 0 {
		t.Fatalf("ddp on docker nodes: %s", r)
	}
	all := r.stdout + s.mustFerry("job", "stream", "box-ddp", "--rank", "1").stdout
	for rank := range 4 {
		mustContain(t, "ranks' logs", all, fmt.Sprintf("rank %d/4 node %d local %d sum 10.0", rank, rank/2, rank%2))
	}

	// Idle for 3 s: back to zero, and the containers are gone.
	s.waitNodes("box-cluster", 0)
	c := testutil.RequireDocker(t)
	left, err := c.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "ferry.pool=box-cluster"))})
	if err != nil || len(left) > 0 {
		t.Errorf("containers left after scale-down: %d (%v)", len(left), err)
	}
}

// removeNodeContainers removes, when the test ends, the containers of
// the compute's nodes that are still there: a server that stops leaves its
// nodes running, as it must to ride out a restart. Only this server's
// nodes are touched, so a run of the same test beside this one keeps its own.
func removeNodeContainers(t *testing.T, s *server, compute string) {
	t.Helper()
	c := testutil.RequireDocker(t)
	t.Cleanup(func() {
		r := s.ferry("compute", "list-nodes", compute, "-o", "json")
		var ns []nodeView
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ns) != nil {
			t.Logf("cannot list the nodes of %s to remove their containers: %s", compute, r)
			return
		}
		ctx := context.Background()
		for _, n := range ns {
			list, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "ferry.node="+n.Name))})
			for _, ct := range list {
				_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
			}
		}
	})
}

func TestDockerProviderQuotaAndLostNode(t *testing.T) {
	s := startNodeServer(t, "--node-lease", "3s")
	removeNodeContainers(t, s, "box-quota")
	s.mustFerry("quota", "set", "standardDSv2Family", "1")
	s.mustFerry("compute", "create", "-f", dockerCluster(t, "box-quota", "Standard_DS1_v2", 2, 60))
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo started; sleep 300\ncompute: azureml:box-quota\n", nil), "--name", "box-victim")
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo second\ncompute: azureml:box-quota\n", nil), "--name", "box-waiter")
	s.waitStatus("box-victim", "Running")
	waitLog(t, s, "box-victim", "started")
	s.waitReason("box-waiter", "quota for family DSv2 is 1/1 cores")

	// Kill the node's container: the node is lost, its job fails, and the
	// waiting job gets a new node in its place.
	ns := s.nodes("box-quota")
	if len(ns) != 1 {
		t.Fatalf("nodes %+v", ns)
	}
	c := testutil.RequireDocker(t)
	list, err := c.ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "ferry.node="+ns[0].Name))})
	if err != nil || len(list) != 1 {
		t.Fatalf("container of node %s: %v %v", ns[0].Name, list, err)
	}
	if err := c.ContainerKill(context.Background(), list[0].ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if j := s.waitStatus("box-victim", "Failed", "Completed", "Canceled"); j.Status != "Failed" || j.StatusReason != "node lost" {
		t.Fatalf("box-victim: %s (%s), want Failed (node lost)", j.Status, j.StatusReason)
	}
	if j := s.waitStatus("box-waiter", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("box-waiter: %s (%s)", j.Status, j.StatusReason)
	}
}

// A docker cluster on a server that listens on loopback only is refused
// at create, saying what to do: its nodes could never reach the server
// and would wait out the join timeout in silence.
func TestDockerClusterRefusedOnALoopbackServer(t *testing.T) {
	s := startServer(t)
	r := s.ferry("compute", "create", "-f", dockerCluster(t, "box-lo", "Standard_DS1_v2", 1, 60))
	if r.code == 0 {
		t.Fatalf("a docker cluster was accepted on a loopback server: %s", r)
	}
	mustContain(t, "refusal", r.stderr, "provider", "loopback", "--addr 0.0.0.0:PORT")
	if r := s.ferry("compute", "show", "box-lo"); r.code == 0 {
		t.Errorf("the refused compute exists: %s", r)
	}
}
