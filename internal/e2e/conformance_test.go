package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-ml/ferry/internal/compute/computetest"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// The conformance suite (internal/compute/computetest) against every
// compute target: the same job files behave the same on each. A target is
// a server started with its compute file; adding one (Slurm) is a test
// here with its compute file and, when its jobs' processes are not on
// this host, a function that lists them.

func TestConformanceLocal(t *testing.T) {
	computetest.Run(t, computetest.Harness{
		Start: func(t *testing.T) computetest.Server {
			return conformServer{startServer(t, "--local-capacity", "1", "--cancel-grace", "1s")}
		},
	})
}

// A cluster of one node (so that a second job queues) from the process
// provider: agents and runners on this host.
func TestConformanceCluster(t *testing.T) {
	computetest.Run(t, computetest.Harness{
		Compute: "azureml:conform-cluster",
		Start: func(t *testing.T) computetest.Server {
			s := startWithCompute(t, "create", computeFile(t, `name: conform-cluster
type: amlcompute
size: Standard_DS1_v2
min_instances: 1
max_instances: 1
idle_time_before_scale_down: 600
provider: {type: process}
`))
			s.waitNodes("conform-cluster", 1, "Idle")
			return conformServer{s}
		},
	})
}

// An attached machine: this host, reached over SSH (a real sshd on a
// loopback port) as a team's own server would be.
func TestConformanceAttachedSSH(t *testing.T) {
	computetest.Run(t, computetest.Harness{
		Compute: "azureml:conform-vm",
		Start: func(t *testing.T) computetest.Server {
			sshd := testutil.StartSSHD(t)
			agentDir := filepath.Join(homeOf(t, sshd.User), ".ferry-agent")
			t.Cleanup(func() { killUnder(t, agentDir); os.RemoveAll(agentDir) })
			file := vmFile(t, "conform-vm", sshd, sshd.User, "  ssh_private_key_file: id_test\n", sshd.HostKeyLine,
				map[string]string{"id_test": string(sshd.ClientKey)})
			s := startWithCompute(t, "attach", file)
			s.waitNodes("conform-vm", 1, "Idle")
			return conformServer{s}
		},
	})
}

// startWithCompute starts a server with a short cancel grace and makes a
// compute with `ferry compute VERB -f file`. A target that is not ready
// at once (a pool's nodes) is waited for by its test.
//
// Slurm, say, is then a few lines: a compute file of one partition whose
// jobs take a whole node (so a second job queues), started this way, and
// computetest.HostJobProcs, the default, finds its jobs' processes while
// slurmd runs on this host.
func startWithCompute(t *testing.T, verb, file string) *server {
	t.Helper()
	s := startServer(t, "--cancel-grace", "1s")
	s.mustFerry("compute", verb, "-f", file)
	return s
}

// computeFile writes a compute file into a fresh folder.
func computeFile(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"compute.yml": yaml})
	return filepath.Join(dir, "compute.yml")
}

// conformServer is the e2e harness's server as the suite drives it. The
// suite's cases are subtests: every call is given the subtest's t, so
// that a failure ends the case and not the whole run.
type conformServer struct{ s *server }

func (c conformServer) Ferry(t *testing.T, args ...string) computetest.Result {
	t.Helper()
	r := runFerry(t, []string{"FERRY_URL=" + c.s.url, "FERRY_TOKEN=" + c.s.token, "FERRY_HOME=" + c.s.home}, args...)
	return computetest.Result{Stdout: r.stdout, Stderr: r.stderr, Code: r.code}
}

func (c conformServer) Get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", c.s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func (c conformServer) Kill9(t *testing.T) { c.s.kill9() }

// Restart starts the server again. server.start reports through the
// server's own t (the top-level test's), which a subtest must not fail:
// it gets the subtest's t for the call.
func (c conformServer) Restart(t *testing.T) {
	t.Helper()
	own := c.s.t
	c.s.t = t
	defer func() { c.s.t = own }()
	c.s.start()
}

// Slurm: the test cluster's partition small, one node whose jobs each
// take it whole (OverSubscribe=EXCLUSIVE), so a second job pends in
// Slurm's queue. slurmd runs on this host, so HostJobProcs sees the jobs.
func TestConformanceSlurm(t *testing.T) {
	sl := testutil.RequireSlurm(t)
	computetest.Run(t, computetest.Harness{
		Compute: "azureml:conform-slurm",
		Start: func(t *testing.T) computetest.Server {
			return conformServer{startSlurm(t, sl, "conform-slurm", sl.Small)}
		},
	})
}
