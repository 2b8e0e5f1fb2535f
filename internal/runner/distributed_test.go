package runner

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/environment/docker"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/testutil"
)

func TestNodeFromEnv(t *testing.T) {
	port := func() (int, error) { return 40000, nil }
	noPort := func() (int, error) { return 0, errors.New("no port") }
	for _, c := range []struct {
		name    string
		env     map[string]string
		free    func() (int, error)
		want    nodeInfo
		wantErr string
	}{
		{name: "one machine", free: port,
			want: nodeInfo{Rank: 0, Count: 1, Addresses: []string{"127.0.0.1"}, MasterAddr: "127.0.0.1", MasterPort: 40000}},
		{name: "one machine ignores a stray MASTER_ADDR", free: port, env: map[string]string{"MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "1"},
			want: nodeInfo{Rank: 0, Count: 1, Addresses: []string{"127.0.0.1"}, MasterAddr: "127.0.0.1", MasterPort: 40000}},
		{name: "one machine, no free port", free: noPort, wantErr: "choosing MASTER_PORT: no port"},
		{name: "node 1 of 2", free: noPort,
			env: map[string]string{"FERRY_NODE_RANK": "1", "FERRY_NODE_COUNT": "2", "FERRY_NODE_ADDRESSES": "10.0.0.5, 10.0.0.6",
				"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"},
			want: nodeInfo{Rank: 1, Count: 2, Addresses: []string{"10.0.0.5", "10.0.0.6"}, MasterAddr: "10.0.0.5", MasterPort: 29500}},
		{name: "MASTER_ADDR defaults to rank 0's address", free: noPort,
			env:  map[string]string{"FERRY_NODE_RANK": "0", "FERRY_NODE_COUNT": "2", "FERRY_NODE_ADDRESSES": "a,b", "MASTER_PORT": "7"},
			want: nodeInfo{Rank: 0, Count: 2, Addresses: []string{"a", "b"}, MasterAddr: "a", MasterPort: 7}},
		{name: "one node of one may choose its port", free: port,
			env:  map[string]string{"FERRY_NODE_RANK": "0", "FERRY_NODE_COUNT": "1", "FERRY_NODE_ADDRESSES": "10.0.0.5"},
			want: nodeInfo{Rank: 0, Count: 1, Addresses: []string{"10.0.0.5"}, MasterAddr: "10.0.0.5", MasterPort: 40000}},
		{name: "many nodes need MASTER_PORT", free: port,
			env:     map[string]string{"FERRY_NODE_RANK": "0", "FERRY_NODE_COUNT": "2", "FERRY_NODE_ADDRESSES": "a,b"},
			wantErr: "MASTER_PORT is not set for a job of 2 nodes"},
		{name: "bad rank", free: port, env: map[string]string{"FERRY_NODE_RANK": "x"}, wantErr: `FERRY_NODE_RANK "x" is not a node rank`},
		{name: "rank past count", free: port, env: map[string]string{"FERRY_NODE_RANK": "2", "FERRY_NODE_COUNT": "2"},
			wantErr: "FERRY_NODE_RANK 2 is not below FERRY_NODE_COUNT 2"},
		{name: "addresses short", free: port, env: map[string]string{"FERRY_NODE_RANK": "0", "FERRY_NODE_COUNT": "2", "FERRY_NODE_ADDRESSES": "a"},
			wantErr: "FERRY_NODE_ADDRESSES names 1 addresses for 2 nodes"},
		{name: "bad port", free: port,
			env:     map[string]string{"FERRY_NODE_RANK": "0", "FERRY_NODE_COUNT": "1", "FERRY_NODE_ADDRESSES": "a", "MASTER_PORT": "70000"},
			wantErr: `MASTER_PORT "70000" is not a port`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := nodeFromEnv(func(k string) string { return c.env[k] }, c.free)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// varsOf is a process's variables as a map.
func varsOf(p rankProcess) map[string]string {
	m := map[string]string{}
	for _, kv := range p.Vars {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func TestPlanProcesses(t *testing.T) {
	one := nodeInfo{Rank: 0, Count: 1, Addresses: []string{"127.0.0.1"}, MasterAddr: "127.0.0.1", MasterPort: 29500}
	second := nodeInfo{Rank: 1, Count: 2, Addresses: []string{"10.0.0.5", "10.0.0.6"}, MasterAddr: "10.0.0.5", MasterPort: 29500}
	node := func(rank int) map[string]string {
		return map[string]string{"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "FERRY_NODE_RANK": strconv.Itoa(rank),
			"FERRY_NODE_COUNT": "2", "FERRY_NODE_ADDRESSES": "10.0.0.5,10.0.0.6"}
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	local := map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "FERRY_NODE_RANK": "0",
		"FERRY_NODE_COUNT": "1", "FERRY_NODE_ADDRESSES": "127.0.0.1"}
	for _, c := range []struct {
		name      string
		d         spec.Distribution
		n         nodeInfo
		wantRanks []int
		want      []map[string]string
	}{
		{"pytorch, 3 processes on one machine", spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 3}, one, []int{0, 1, 2},
			[]map[string]string{
				with(local, "RANK", "0", "LOCAL_RANK", "0", "WORLD_SIZE", "3", "LOCAL_WORLD_SIZE", "3", "NODE_RANK", "0"),
				with(local, "RANK", "1", "LOCAL_RANK", "1", "WORLD_SIZE", "3", "LOCAL_WORLD_SIZE", "3", "NODE_RANK", "0"),
				with(local, "RANK", "2", "LOCAL_RANK", "2", "WORLD_SIZE", "3", "LOCAL_WORLD_SIZE", "3", "NODE_RANK", "0"),
			}},
		{"pytorch, 3 processes on node 1 of 2", spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 3}, second, []int{3, 4, 5},
			[]map[string]string{
				with(node(1), "RANK", "3", "LOCAL_RANK", "0", "WORLD_SIZE", "6", "LOCAL_WORLD_SIZE", "3", "NODE_RANK", "1"),
				with(node(1), "RANK", "4", "LOCAL_RANK", "1", "WORLD_SIZE", "6", "LOCAL_WORLD_SIZE", "3", "NODE_RANK", "1"),
				with(node(1), "RANK", "5", "LOCAL_RANK", "2", "WORLD_SIZE", "6", "LOCAL_WORLD_SIZE", "3", "NODE_RANK", "1"),
			}},
		{"pytorch, process_count_per_instance left out", spec.Distribution{Type: "pytorch"}, second, []int{1},
			[]map[string]string{
				with(node(1), "RANK", "1", "LOCAL_RANK", "0", "WORLD_SIZE", "2", "LOCAL_WORLD_SIZE", "1", "NODE_RANK", "1"),
			}},
		{"mpi, 2 processes on node 1 of 2", spec.Distribution{Type: "mpi", ProcessCountPerInstance: 2}, second, []int{2, 3},
			[]map[string]string{
				with(node(1), "OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_RANK", "0",
					"OMPI_COMM_WORLD_LOCAL_SIZE", "2", "OMPI_COMM_WORLD_NODE_RANK", "1", "AZ_BATCHAI_MPI_MASTER_NODE", "10.0.0.5",
					"FERRY_HOSTFILE", "/a/hostfile"),
				with(node(1), "OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
					"OMPI_COMM_WORLD_LOCAL_SIZE", "2", "OMPI_COMM_WORLD_NODE_RANK", "1", "AZ_BATCHAI_MPI_MASTER_NODE", "10.0.0.5",
					"FERRY_HOSTFILE", "/a/hostfile"),
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			procs, err := planProcesses(&c.d, c.n, "/a/hostfile")
			if err != nil {
				t.Fatal(err)
			}
			var ranks []int
			var got []map[string]string
			for _, p := range procs {
				ranks = append(ranks, p.Rank)
				got = append(got, varsOf(p))
			}
			if d := cmp.Diff(c.wantRanks, ranks); d != "" {
				t.Errorf("ranks (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("variables (-want +got):\n%s", d)
			}
		})
	}
}

func TestTFConfig(t *testing.T) {
	addrs := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	d := &spec.Distribution{Type: "tensorflow", ParameterServerCount: 1, WorkerCount: 2}
	cluster := map[string]any{
		"ps":     []any{"10.0.0.1:29500"},
		"worker": []any{"10.0.0.2:29501", "10.0.0.3:29502"},
	}
	for rank, task := range []map[string]any{
		{"type": "ps", "index": 0.0},
		{"type": "worker", "index": 0.0},
		{"type": "worker", "index": 1.0},
	} {
		n := nodeInfo{Rank: rank, Count: 3, Addresses: addrs, MasterAddr: addrs[0], MasterPort: 29500}
		procs, err := planProcesses(d, n, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) != 1 || procs[0].Rank != rank {
			t.Fatalf("node %d: processes %+v, want one of rank %d", rank, procs, rank)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(varsOf(procs[0])["TF_CONFIG"]), &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"cluster": cluster, "task": task, "environment": "cloud"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("node %d TF_CONFIG (-want +got):\n%s", rank, diff)
		}
	}

	// worker_count left out: every node that is not a parameter server.
	n := nodeInfo{Rank: 0, Count: 2, Addresses: addrs[:2], MasterAddr: addrs[0], MasterPort: 29500}
	tf, err := tfConfig(&spec.Distribution{Type: "tensorflow"}, n)
	if want := `{"cluster":{"worker":["10.0.0.1:29500","10.0.0.2:29501"]},"task":{"type":"worker","index":0},"environment":"cloud"}`; err != nil || tf != want {
		t.Errorf("TF_CONFIG %s, %v\nwant %s", tf, err, want)
	}

	for _, c := range []struct {
		d    spec.Distribution
		want string
	}{
		{spec.Distribution{Type: "tensorflow", ParameterServerCount: 1, WorkerCount: 3},
			"distribution.worker_count 3 does not fit: the job has 3 nodes (resources.instance_count) and 1 parameter servers, " +
				"and one process runs per node, so worker_count must be 2 (or left out)"},
		{spec.Distribution{Type: "tensorflow", ParameterServerCount: 3},
			"distribution.parameter_server_count 3 leaves no worker among the job's 3 nodes (resources.instance_count); one process runs per node"},
	} {
		n := nodeInfo{Rank: 0, Count: 3, Addresses: addrs, MasterAddr: addrs[0], MasterPort: 29500}
		if _, err := planProcesses(&c.d, n, ""); err == nil || err.Error() != c.want {
			t.Errorf("%+v: error %v\nwant %s", c.d, err, c.want)
		}
	}
}

func TestHostfileText(t *testing.T) {
	n := nodeInfo{Count: 3, Addresses: []string{"10.0.0.1", "10.0.0.2", "node-c"}}
	if got, want := hostfileText(n, 4), "10.0.0.1 slots=4\n10.0.0.2 slots=4\nnode-c slots=4\n"; got != want {
		t.Errorf("hostfile %q, want %q", got, want)
	}
}

func TestWithVars(t *testing.T) {
	got := withVars([]string{"PATH=/bin", "RANK=9", "A=1", "RANK=8"}, []string{"RANK=0", "B=2"})
	if d := cmp.Diff([]string{"PATH=/bin", "A=1", "RANK=0", "B=2"}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestRankFailureMessage(t *testing.T) {
	for _, c := range []struct {
		f    rankFailure
		want string
	}{
		{rankFailure{Rank: 3, Code: 1, StoppedOthers: true}, "rank 3 exited with code 1; the other processes were stopped"},
		{rankFailure{Rank: 0, Code: 2}, "rank 0 exited with code 2"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}

// testRunner is a runner with an attempt folder and a spool of its own,
// and no server: enough for planJob, start and execute.
func testRunner(t *testing.T) (*runner, *os.File) {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	r := &runner{
		cfg:     Config{Job: "j", Attempt: 1, Dir: dir, CancelGrace: 200 * time.Millisecond, Log: log},
		log:     log,
		wd:      filepath.Join(dir, WorkDirName),
		spool:   filepath.Join(dir, LogName),
		reports: make(chan apitypes.Report, 16),
	}
	if err := os.MkdirAll(r.wd, 0o755); err != nil {
		t.Fatal(err)
	}
	spool, err := os.OpenFile(r.spool, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spool.Close() })
	return r, spool
}

// nodeVars are the variables an agent gives the runner of a multi-node job.
var nodeVars = []string{"FERRY_NODE_RANK", "FERRY_NODE_COUNT", "FERRY_NODE_ADDRESSES", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"}

// setNodeEnv sets the runner's node variables to env for the test, and
// unsets those env does not name.
func setNodeEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range nodeVars {
		t.Setenv(k, env[k]) // restored after the test
		if _, ok := env[k]; !ok {
			os.Unsetenv(k)
		}
	}
}

// guard is how long a test waits for something that should happen at once
// before it fails instead of hanging; no test asserts how long it took.
const guard = 2 * time.Minute

// execute runs j through the runner's execute loop and returns its report.
func execute(t *testing.T, ctx context.Context, r *runner, spool *os.File, j *spec.Job, rt *environment.Runtime) apitypes.Report {
	t.Helper()
	done := make(chan apitypes.Report, 1)
	go func() { done <- r.execute(ctx, j, &paths{}, rt, spool) }()
	select {
	case rep := <-done:
		return rep
	case <-time.After(guard):
		t.Fatalf("the job did not end within %v: its processes were not all stopped", guard)
		return apitypes.Report{}
	}
}

// readEnv reads a file written by env -0.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			m[k] = v
		}
	}
	return m
}

// pick is the named variables of env; absent ones are left out.
func pick(env map[string]string, names ...string) map[string]string {
	out := map[string]string{}
	for _, k := range names {
		if v, ok := env[k]; ok {
			out[k] = v
		}
	}
	return out
}

var torchVars = []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}

func TestExecutePyTorchRanks(t *testing.T) {
	for _, c := range []struct {
		name      string
		node      map[string]string
		rankBase  int
		world     string
		nodeRank  string
		addr      string
		fixedPort string // "" = one the runner chose
	}{
		{"one machine", nil, 0, "3", "0", "127.0.0.1", ""},
		{"node 1 of 2", map[string]string{"FERRY_NODE_RANK": "1", "FERRY_NODE_COUNT": "2", "FERRY_NODE_ADDRESSES": "10.0.0.5,10.0.0.6",
			"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "NODE_RANK": "1"}, 3, "6", "1", "10.0.0.5", "29500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			setNodeEnv(t, c.node)
			r, spool := testRunner(t)
			j := &spec.Job{Command: `env -0 > "env.$RANK"`,
				EnvironmentVariables: map[string]string{"SHARED": "yes"},
				Distribution:         &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 3}}
			rep := execute(t, t.Context(), r, spool, j, &environment.Runtime{})
			if rep.Status != apitypes.StatusCompleted {
				t.Fatalf("report %+v", rep)
			}
			var port string
			for i := range 3 {
				rank := c.rankBase + i
				env := readEnv(t, filepath.Join(r.wd, fmt.Sprintf("env.%d", rank)))
				if port == "" {
					port = env["MASTER_PORT"]
				}
				want := map[string]string{"RANK": strconv.Itoa(rank), "LOCAL_RANK": strconv.Itoa(i), "WORLD_SIZE": c.world,
					"LOCAL_WORLD_SIZE": "3", "NODE_RANK": c.nodeRank, "MASTER_ADDR": c.addr, "MASTER_PORT": port}
				if d := cmp.Diff(want, pick(env, torchVars...)); d != "" {
					t.Errorf("rank %d (-want +got):\n%s", rank, d)
				}
				if env["SHARED"] != "yes" || env["FERRY_JOB_ID"] != "j" {
					t.Errorf("rank %d lacks the job's variables: SHARED=%q FERRY_JOB_ID=%q", rank, env["SHARED"], env["FERRY_JOB_ID"])
				}
			}
			if p, err := strconv.Atoi(port); err != nil || p < 1 || (c.fixedPort != "" && port != c.fixedPort) {
				t.Errorf("MASTER_PORT %q", port)
			}
		})
	}
}

func TestExecuteMPIRanksAndHostfile(t *testing.T) {
	setNodeEnv(t, map[string]string{"FERRY_NODE_RANK": "0", "FERRY_NODE_COUNT": "2", "FERRY_NODE_ADDRESSES": "10.0.0.5,10.0.0.6",
		"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"})
	r, spool := testRunner(t)
	j := &spec.Job{Command: `env -0 > "env.$OMPI_COMM_WORLD_RANK"`, Distribution: &spec.Distribution{Type: "mpi", ProcessCountPerInstance: 2}}
	if rep := execute(t, t.Context(), r, spool, j, &environment.Runtime{}); rep.Status != apitypes.StatusCompleted {
		t.Fatalf("report %+v", rep)
	}
	hostfile := filepath.Join(r.cfg.Dir, HostfileName)
	b, err := os.ReadFile(hostfile)
	if err != nil {
		t.Fatal(err)
	}
	if want := "10.0.0.5 slots=2\n10.0.0.6 slots=2\n"; string(b) != want {
		t.Errorf("hostfile %q, want %q", b, want)
	}
	names := []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
		"OMPI_COMM_WORLD_NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "AZ_BATCHAI_MPI_MASTER_NODE", "FERRY_HOSTFILE"}
	for i := range 2 {
		want := map[string]string{"OMPI_COMM_WORLD_RANK": strconv.Itoa(i), "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(i),
			"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "0", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500",
			"AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.5", "FERRY_HOSTFILE": hostfile}
		if d := cmp.Diff(want, pick(readEnv(t, filepath.Join(r.wd, fmt.Sprintf("env.%d", i))), names...)); d != "" {
			t.Errorf("rank %d (-want +got):\n%s", i, d)
		}
	}
}

func TestExecuteTensorFlow(t *testing.T) {
	node := map[string]string{"FERRY_NODE_RANK": "2", "FERRY_NODE_COUNT": "3", "FERRY_NODE_ADDRESSES": "10.0.0.1,10.0.0.2,10.0.0.3",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
	t.Run("worker", func(t *testing.T) {
		setNodeEnv(t, node)
		r, spool := testRunner(t)
		j := &spec.Job{Command: `env -0 > env`, Distribution: &spec.Distribution{Type: "tensorflow", ParameterServerCount: 1, WorkerCount: 2}}
		if rep := execute(t, t.Context(), r, spool, j, &environment.Runtime{}); rep.Status != apitypes.StatusCompleted {
			t.Fatalf("report %+v", rep)
		}
		want := `{"cluster":{"ps":["10.0.0.1:29500"],"worker":["10.0.0.2:29501","10.0.0.3:29502"]},"task":{"type":"worker","index":1},"environment":"cloud"}`
		if got := readEnv(t, filepath.Join(r.wd, "env"))["TF_CONFIG"]; got != want {
			t.Errorf("TF_CONFIG %s\nwant %s", got, want)
		}
	})
	t.Run("worker_count does not fit", func(t *testing.T) {
		setNodeEnv(t, node)
		r, spool := testRunner(t)
		j := &spec.Job{Command: `touch ran`, Distribution: &spec.Distribution{Type: "tensorflow", ParameterServerCount: 1, WorkerCount: 3}}
		rep := execute(t, t.Context(), r, spool, j, &environment.Runtime{})
		if rep.Status != apitypes.StatusFailed || !strings.HasPrefix(rep.Error, "distribution.worker_count 3 does not fit") {
			t.Errorf("report %+v", rep)
		}
		if _, err := os.Stat(filepath.Join(r.wd, "ran")); err == nil {
			t.Error("the command ran")
		}
		if log, _ := os.ReadFile(r.spool); !strings.Contains(string(log), "distribution.worker_count") {
			t.Errorf("the log does not say why: %q", log)
		}
	})
}

// stoppable is a script for pytorch ranks: each starts a child that would
// sleep for 300s and records its pid in child.RANK, then waits for it.
// Rank failRank, if any, exits 3 once every rank's child is recorded; rank
// deafRank, if any, ignores SIGTERM, as do its children.
func stoppable(ranks, failRank, deafRank int) string {
	var all []string
	for i := range ranks {
		all = append(all, fmt.Sprintf("[ -f child.%d ]", i))
	}
	return fmt.Sprintf(`if [ "$RANK" = %d ]; then trap '' TERM; fi
sleep 300 & echo $! > "child.$RANK.tmp" && mv "child.$RANK.tmp" "child.$RANK"
if [ "$RANK" = %d ]; then
  until %s; do sleep 0.05; done
  exit 3
fi
wait`, deafRank, failRank, strings.Join(all, " && "))
}

// children reads the child pids the ranks of a stoppable script recorded,
// waiting for them to be written.
func children(t *testing.T, wd string, ranks int) []int {
	t.Helper()
	deadline := time.Now().Add(guard)
	var pids []int
	for i := 0; i < ranks; {
		b, err := os.ReadFile(filepath.Join(wd, fmt.Sprintf("child.%d", i)))
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d never started its child: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		i++
	}
	return pids
}

// running says whether pid is a live process (a zombie has ended).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// requireGone fails the test unless every pid ends; signals already sent
// are delivered a moment after kill returns, so it waits for that.
func requireGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for i, pid := range pids {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("the child of rank %d (pid %d) still runs", i, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitProcess waits for p to end, failing the test if it does not.
func waitProcess(t *testing.T, p process) (int, error) {
	t.Helper()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := p.wait()
		done <- result{code, err}
	}()
	select {
	case r := <-done:
		return r.code, r.err
	case <-time.After(guard):
		t.Fatalf("the processes did not end within %v", guard)
		return 0, nil
	}
}

// startPyTorch starts k pytorch ranks of command through planJob and start.
func startPyTorch(t *testing.T, r *runner, spool *os.File, k int, command string) process {
	t.Helper()
	setNodeEnv(t, nil)
	j := &spec.Job{Command: command, Distribution: &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: k}}
	procs, err := r.planJob(j)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.start(t.Context(), j, &environment.Runtime{}, command, procs, spool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.cleanup)
	return p
}

// The stop checks run before cleanup, which would kill what is left: the
// children must be gone through stop alone.
func TestMultiProcessStopReachesEveryRankAndItsChildren(t *testing.T) {
	r, spool := testRunner(t)
	p := startPyTorch(t, r, spool, 3, stoppable(3, -1, -1))
	pids := children(t, r.wd, 3)
	p.stop(false)
	code, err := waitProcess(t, p)
	if err != nil || code != 128+15 {
		t.Errorf("wait: %d, %v; want SIGTERM's 143", code, err)
	}
	requireGone(t, pids)
}

func TestMultiProcessFailedRankStopsTheOthers(t *testing.T) {
	r, spool := testRunner(t)
	// Rank 2 ignores SIGTERM: it ends only by the SIGKILL that follows
	// CancelGrace later.
	p := startPyTorch(t, r, spool, 3, stoppable(3, 1, 2))
	code, err := waitProcess(t, p)
	if err != nil || code != 3 {
		t.Fatalf("wait: %d, %v; want rank 1's 3", code, err)
	}
	requireGone(t, children(t, r.wd, 3)) // rank 1's own child included
	f := p.(failureExplainer).failure()
	if d := cmp.Diff(&rankFailure{Rank: 1, Code: 3, StoppedOthers: true}, f); d != "" {
		t.Errorf("failure (-want +got):\n%s", d)
	}
	if log, _ := os.ReadFile(r.spool); !strings.Contains(string(log), "ferry: rank 1 exited with code 3; stopping the other processes\n") {
		t.Errorf("the log does not say which rank failed: %q", log)
	}
}

func TestExecuteDistributedFailureCancelAndTimeout(t *testing.T) {
	for _, c := range []struct {
		name   string
		script string
		cancel bool
		limit  int64
		want   apitypes.Report
	}{
		{name: "a rank fails", script: stoppable(3, 1, 2), want: apitypes.Report{Status: apitypes.StatusFailed,
			Reason: "rank 1 exited with code 3", Error: "rank 1 exited with code 3; the other processes were stopped; the job's log has its output"}},
		{name: "cancel", script: stoppable(3, -1, 2), cancel: true,
			want: apitypes.Report{Status: apitypes.StatusCanceled, Reason: "canceled on request"}},
		{name: "timeout", script: stoppable(3, -1, -1), limit: 1, want: apitypes.Report{Status: apitypes.StatusFailed,
			Reason: "timeout", Error: "the job ran past limits.timeout of 1s and was stopped"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			setNodeEnv(t, nil)
			r, spool := testRunner(t)
			j := &spec.Job{Command: c.script, Distribution: &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 3}}
			if c.limit > 0 {
				j.Limits = &spec.Limits{Timeout: c.limit}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if c.cancel {
				go func() {
					for i := range 3 {
						for {
							if _, err := os.Stat(filepath.Join(r.wd, fmt.Sprintf("child.%d", i))); err == nil || ctx.Err() != nil {
								break
							}
							time.Sleep(20 * time.Millisecond)
						}
					}
					cancel()
				}()
			}
			rep := execute(t, ctx, r, spool, j, &environment.Runtime{})
			if rep.ExitCode == nil {
				t.Fatalf("no exit code: %+v", rep)
			}
			rep.ExitCode = nil
			if d := cmp.Diff(c.want, rep); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
			// A timeout may come before every rank has started its child.
			pids := recorded(t, r.wd)
			if len(pids) != 3 && c.limit == 0 {
				t.Errorf("%d children recorded, want 3", len(pids))
			}
			requireGone(t, pids)
		})
	}
}

// recorded is the child pids that the ranks of a stoppable script wrote.
func recorded(t *testing.T, wd string) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(wd, "child.[0-9]"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

func TestExecuteDistributedInContainers(t *testing.T) {
	testutil.RequireBaseImage(t)
	d, err := docker.Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rt := &environment.Runtime{Image: testutil.BaseImage}
	t.Run("ranks", func(t *testing.T) {
		setNodeEnv(t, nil)
		r, spool := testRunner(t)
		r.docker = d
		j := &spec.Job{Command: `env -0 > "env.$RANK"`, Distribution: &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 2}}
		if rep := execute(t, t.Context(), r, spool, j, rt); rep.Status != apitypes.StatusCompleted {
			log, _ := os.ReadFile(r.spool)
			t.Fatalf("report %+v\nlog: %s", rep, log)
		}
		for i := range 2 {
			env := pick(readEnv(t, filepath.Join(r.wd, fmt.Sprintf("env.%d", i))), "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")
			want := map[string]string{"RANK": strconv.Itoa(i), "LOCAL_RANK": strconv.Itoa(i), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
			if diff := cmp.Diff(want, env); diff != "" {
				t.Errorf("rank %d (-want +got):\n%s", i, diff)
			}
		}
	})
	t.Run("a rank fails", func(t *testing.T) {
		setNodeEnv(t, nil)
		r, spool := testRunner(t)
		r.docker = d
		j := &spec.Job{Command: `if [ "$RANK" = 1 ]; then exit 4; fi; sleep 300`,
			Distribution: &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 2}}
		rep := execute(t, t.Context(), r, spool, j, rt)
		if rep.Status != apitypes.StatusFailed || rep.Reason != "rank 1 exited with code 4" {
			t.Errorf("report %+v", rep)
		}
	})
}

// TestPyTorchAllReduce is a real gloo all-reduce between two ranks that
// the runner started: each adds rank+1, so both must see 3.
func TestPyTorchAllReduce(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("needs PyTorch for %s (apt-get install python3-torch): %v: %s", python, err, bytes.TrimSpace(out))
	}
	setNodeEnv(t, nil)
	r, spool := testRunner(t)
	script := `import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} of {dist.get_world_size()}: sum {int(t.item())}")
open(f"sum.{rank}", "w").write(str(int(t.item())))
dist.destroy_process_group()
`
	if err := os.WriteFile(filepath.Join(r.wd, "train.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	j := &spec.Job{Command: python + " train.py", Distribution: &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 2}}
	rep := execute(t, t.Context(), r, spool, j, &environment.Runtime{})
	log, _ := os.ReadFile(r.spool)
	if rep.Status != apitypes.StatusCompleted {
		t.Fatalf("report %+v\nlog: %s", rep, log)
	}
	for i := range 2 {
		b, err := os.ReadFile(filepath.Join(r.wd, fmt.Sprintf("sum.%d", i)))
		if err != nil || string(b) != "3" {
			t.Errorf("rank %d sum %q, %v; want 3\nlog: %s", i, b, err, log)
		}
	}
}
