package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// jobProcesses returns the pids of the processes a job's command started
// (every one carries FERRY_JOB_ID in its environment) and of its runners,
// on this host and in its containers, which share the host's /proc.
func jobProcesses(job string) []int {
	var pids []int
	for _, p := range testutil.Procs() {
		runner := len(p.Args) > 1 && p.Args[1] == "runner" && strings.Contains(p.CmdLine(), job)
		if runner || p.HasEnv("FERRY_JOB_ID="+job) {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// waitNoProcesses waits until no process of the job is left.
func waitNoProcesses(t *testing.T, job string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := jobProcesses(job)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, pid := range left {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				fmt.Fprintf(&b, "\n  %d %s", pid, strings.ReplaceAll(string(cmd), "\x00", " "))
			}
			t.Fatalf("processes of job %s are left:%s", job, b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// terminalTransitions counts the status changes of a job into an end state.
func terminalTransitions(j job) int {
	n := 0
	for _, h := range j.History {
		switch h.To {
		case "Completed", "Failed", "Canceled":
			n++
		}
	}
	return n
}

// The agent of a process node is killed with SIGKILL while its job runs;
// the job's runner and command outlive it. The node's lease expires, the
// job fails as node lost, the node is replaced for the next job, and no
// process of the old job is left: terminating the lost machine stops what
// its dead agent started.
func TestAgentKill9MidJobFailsAsNodeLostAndLeavesNoProcess(t *testing.T) {
	s := startServer(t, "--node-lease", "3s")
	s.mustFerry("compute", "create", "-f", clusterFile(t, "agentless", "Standard_DS1_v2", 1, 60))
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo started; sleep 300\ncompute: azureml:agentless\n", nil), "--name", "orphaned")
	s.waitStatus("orphaned", "Running")
	waitLog(t, s, "orphaned", "started")
	ns := s.nodes("agentless")
	if len(ns) != 1 {
		t.Fatalf("nodes %+v", ns)
	}
	var agents []int
	for _, pid := range processesWith(ns[0].Name) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(string(cmd), "\x00"); len(args) > 1 && args[1] == "agent" {
			agents = append(agents, pid)
		}
	}
	if len(agents) != 1 {
		t.Fatalf("agent processes of node %s: %v, want one", ns[0].Name, agents)
	}
	if len(jobProcesses("orphaned")) < 2 {
		t.Fatalf("the job's runner and command are not found: %v", jobProcesses("orphaned"))
	}
	if err := syscall.Kill(agents[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	j := s.waitStatus("orphaned", "Failed", "Completed", "Canceled")
	if j.Status != "Failed" || j.StatusReason != "node lost" {
		t.Fatalf("orphaned: %s (%s), want Failed (node lost)", j.Status, j.StatusReason)
	}
	if n := terminalTransitions(s.show(j.Name)); n != 1 {
		t.Errorf("orphaned has %d terminal transitions, want 1", n)
	}
	waitNoProcesses(t, "orphaned")

	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo replaced\ncompute: azureml:agentless\n", nil), "--name", "successor")
	if j := s.waitStatus("successor", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("successor: %s (%s)", j.Status, j.StatusReason)
	}
	for _, n := range s.nodes("agentless") {
		if n.Name == ns[0].Name {
			t.Errorf("the lost node %s is still listed", n.Name)
		}
	}
}

// holdingProxy is a Docker engine API proxy on a unix socket in front of
// the real engine. While holding, it keeps the requests that stop or
// remove a container waiting, as an engine that cannot reach a machine
// would; everything else passes. It is how a test keeps a lost node alive
// past its lease, which the docker provider otherwise ends at once.
type holdingProxy struct {
	sock    string
	mu      sync.Mutex
	release chan struct{}
	held    int
}

func startHoldingProxy(t *testing.T) *holdingProxy {
	t.Helper()
	p := &holdingProxy{sock: filepath.Join(t.TempDir(), "docker.sock"), release: make(chan struct{})}
	engine := strings.TrimPrefix(cmp.Or(os.Getenv("DOCKER_HOST"), "unix:///var/run/docker.sock"), "unix://")
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", engine)
		}},
		FlushInterval: -1,
	}
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ending := (r.Method == "POST" && (strings.HasSuffix(r.URL.Path, "/stop") || strings.HasSuffix(r.URL.Path, "/kill"))) ||
			(r.Method == "DELETE" && strings.Contains(r.URL.Path, "/containers/"))
		if ending {
			p.mu.Lock()
			release := p.release
			p.held++
			p.mu.Unlock()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() {
		p.letGo()
		srv.Close()
	})
	return p
}

// letGo lets held and later requests through.
func (p *holdingProxy) letGo() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

func (p *holdingProxy) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// waitFile waits until path exists and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A docker node is cut off its network mid-job and let back on after its
// lease expired. The server has failed the attempt as node lost and
// revoked its run token; the old attempt, which finished its command while
// cut off, then reports its log and its end, and both are refused: the job
// keeps its one terminal status, its log has none of the late lines, and
// the command ran once (no second attempt, and the marker file on a host
// mount has one start).
func TestDockerNodePartitionedPastItsLeaseIsFenced(t *testing.T) {
	testutil.RequireNodeImage(t)
	c := testutil.RequireDocker(t)
	proxy := startHoldingProxy(t)
	t.Setenv("DOCKER_HOST", "unix://"+proxy.sock) // for the server started next
	s := startNodeServer(t, "--node-lease", "3s")

	netName := fmt.Sprintf("ferry-partition-%d", rand.IntN(1<<30))
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		proxy.letGo()
		list, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "ferry.pool=cutoff"))})
		for _, ct := range list {
			_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
		}
		_ = c.NetworkRemove(ctx, netName)
	})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"c.yml": fmt.Sprintf("name: cutoff\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 60\nprovider:\n  type: docker\n  image: %s\n  network: %s\n  mounts: [\"%s:/shared\"]\n",
		testutil.NodeImage, netName, shared)})
	s.mustFerry("compute", "create", "-f", filepath.Join(dir, "c.yml"))
	s.mustFerry("job", "create", "--name", "cutoff-job", "-f", jobFile(t, `command: |
  echo "start of attempt $FERRY_ATTEMPT"
  echo "$FERRY_ATTEMPT" >> /shared/starts
  while [ ! -e /shared/gate ]; do sleep 0.1; done
  echo "late line of attempt $FERRY_ATTEMPT"
  echo "$FERRY_ATTEMPT" >> /shared/ends
compute: azureml:cutoff
`, nil))
	s.waitStatus("cutoff-job", "Running")
	waitLog(t, s, "cutoff-job", "start of attempt 1")
	ns := s.nodes("cutoff")
	if len(ns) != 1 {
		t.Fatalf("nodes %+v", ns)
	}
	ctx := context.Background()
	list, err := c.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "ferry.node="+ns[0].Name))})
	if err != nil || len(list) != 1 {
		t.Fatalf("container of node %s: %v %v", ns[0].Name, list, err)
	}
	cid := list[0].ID
	if out, err := exec.Command("docker", "network", "disconnect", netName, cid).CombinedOutput(); err != nil {
		t.Fatalf("docker network disconnect: %v\n%s", err, out)
	}

	j := s.waitStatus("cutoff-job", "Failed", "Completed", "Canceled")
	if j.Status != "Failed" || j.StatusReason != "node lost" {
		t.Fatalf("cutoff-job: %s (%s), want Failed (node lost)", j.Status, j.StatusReason)
	}
	// The server now wants the machine gone; the proxy keeps it alive.
	// While still cut off, the old attempt finishes its command.
	if err := os.WriteFile(filepath.Join(shared, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(shared, "ends"))
	if out, err := exec.Command("docker", "network", "connect", netName, cid).CombinedOutput(); err != nil {
		t.Fatalf("docker network connect (the node must still be alive: the proxy held %d stop/remove calls): %v\n%s", proxy.heldCount(), err, out)
	}
	// Back on the network, the old runner ships its log and reports its
	// end; both are refused and it exits.
	waitNoProcesses(t, "cutoff-job")
	if proxy.heldCount() == 0 {
		t.Errorf("the server never tried to stop the lost node's container")
	}
	// The runner's own log, read from the (stopped, not yet removed)
	// container, shows its late reports were made and refused.
	tmp := t.TempDir()
	if out, err := exec.Command("docker", "cp", cid+":/var/lib/ferry-node", tmp).CombinedOutput(); err != nil {
		t.Fatalf("docker cp: %v\n%s", err, out)
	}
	runnerLog, _ := exec.Command("sh", "-c", "find "+tmp+" -name runner.log | xargs cat").CombinedOutput()
	mustContain(t, "the old runner's log", string(runnerLog), `msg="report refused"`, "revoked")

	j = s.show("cutoff-job")
	if j.Status != "Failed" || j.StatusReason != "node lost" {
		t.Errorf("after the late reports: %s (%s), want Failed (node lost)", j.Status, j.StatusReason)
	}
	if n := terminalTransitions(j); n != 1 {
		t.Errorf("cutoff-job has %d terminal transitions, want 1: %+v", n, j.History)
	}
	if code, body := s.call("GET", "/v1/jobs/cutoff-job/logs", s.token, nil); code != 200 || strings.Contains(string(body), "late line") || !strings.Contains(string(body), "start of attempt 1") {
		t.Errorf("log after the late reports (%d):\n%s\nwant the first line and none of the late ones", code, body)
	}
	if code, body := s.call("GET", "/v1/jobs/cutoff-job", s.token, nil); code != 200 || !strings.Contains(string(body), `"attempt":1`) {
		t.Errorf("job after the partition (%d): %s, want attempt 1 only", code, body)
	}
	for _, f := range []string{"starts", "ends"} {
		if b, _ := os.ReadFile(filepath.Join(shared, f)); string(b) != "1\n" {
			t.Errorf("/shared/%s = %q, want the one attempt once", f, b)
		}
	}

	// Let the machine go: the node is removed and the pool works again.
	proxy.letGo()
	s.mustFerry("job", "create", "--name", "after-cutoff", "-f", jobFile(t, "command: echo fine\ncompute: azureml:cutoff\n", nil))
	if j := s.waitStatus("after-cutoff", "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("after-cutoff: %s (%s)", j.Status, j.StatusReason)
	}
}

// Cancels land on short jobs right around the time they finish. Every
// job ends in exactly one terminal state, Completed or Canceled, its
// history has one terminal transition, a cancel either takes (the job was
// still running) or is refused as too late, and nothing is left running.
func TestCancelRacingCompletion(t *testing.T) {
	s := startServer(t, "--cancel-grace", "2s")
	const jobs = 30
	env := append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+s.home)
	ferry := func(args ...string) (string, error) {
		cmd := exec.Command(ferryBin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	file := jobFile(t, "command: sleep 0.$((RANDOM % 10))\n", nil)
	names := make([]string, jobs)
	errs := make([]error, jobs)
	var wg sync.WaitGroup
	var took, late atomic.Int32
	for i := range jobs {
		names[i] = fmt.Sprintf("race-%02d", i)
		wg.Go(func() {
			if out, err := ferry("job", "create", "-f", file, "--name", names[i]); err != nil {
				errs[i] = fmt.Errorf("create: %v\n%s", err, out)
				return
			}
			time.Sleep(time.Duration(rand.IntN(1200)) * time.Millisecond)
			out, err := ferry("job", "cancel", names[i])
			switch {
			case err == nil:
				took.Add(1)
			case strings.Contains(out, "already"):
				late.Add(1)
			default:
				errs[i] = fmt.Errorf("cancel neither took nor was refused as too late: %v\n%s", err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	ends := map[string]int{}
	for _, name := range names {
		j := s.waitStatus(name, "Completed", "Failed", "Canceled")
		ends[j.Status]++
		if j.Status != "Completed" && j.Status != "Canceled" {
			t.Errorf("%s ended %s (%s), want Completed or Canceled", name, j.Status, j.StatusReason)
		}
		if n := terminalTransitions(j); n != 1 {
			t.Errorf("%s has %d terminal transitions, want 1: %+v", name, n, j.History)
		}
	}
	t.Logf("ends: %v; cancels that took: %d, refused as too late: %d", ends, took.Load(), late.Load())
	for _, name := range names {
		waitNoProcesses(t, name)
	}
	// The server is still sane: a new job runs to its end.
	if j := s.waitStatus(strings.TrimSpace(s.mustFerry("job", "create", "-f", jobFile(t, "command: echo ok\n", nil)).stdout), "Completed", "Failed"); j.Status != "Completed" {
		t.Fatalf("job after the race: %s (%s)", j.Status, j.StatusReason)
	}
}
