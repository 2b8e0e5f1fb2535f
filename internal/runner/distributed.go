package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// A job with a distribution runs as several processes on each of its
// nodes, and Ferry starts them itself: one runner per node starts its
// node's share, each process with the variables of its rank (docs/architecture.md,
// "How a job runs"). torchrun and mpirun are not
// needed (Debian's torchrun is broken, and mpirun would need ssh between
// nodes, which Ferry does not set up).
//
// The variables, per process:
//
//   - every type: MASTER_ADDR, MASTER_PORT, FERRY_NODE_RANK,
//     FERRY_NODE_COUNT, FERRY_NODE_ADDRESSES (comma-separated, rank order);
//   - pytorch (process_count_per_instance K, default 1): RANK =
//     NODE_RANK*K + LOCAL_RANK, LOCAL_RANK, WORLD_SIZE = N*K,
//     LOCAL_WORLD_SIZE = K, NODE_RANK, as torch's env:// init reads them;
//   - mpi (K as for pytorch): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
//     _LOCAL_SIZE, _NODE_RANK as Open MPI's mpirun sets them,
//     AZ_BATCHAI_MPI_MASTER_NODE = MASTER_ADDR as Azure sets it, and
//     FERRY_HOSTFILE, an mpirun hostfile ("ADDR slots=K" per node, in rank
//     order) in the attempt's folder. Ferry starts the K ranks itself; a
//     job that wants mpirun instead uses process_count_per_instance 1 and
//     runs mpirun --hostfile "$FERRY_HOSTFILE" from node rank 0;
//   - tensorflow: one process per node with TF_CONFIG. The first
//     parameter_server_count nodes are parameter servers ("ps"), the rest
//     workers; node i listens on MASTER_PORT+i of its address. worker_count
//     left out means all the other nodes; given, it must be that number.
//
// Without FERRY_NODE_RANK in the runner's environment the job is on one
// machine: node 0 of 1 at 127.0.0.1, with a free local port as
// MASTER_PORT. A job without a distribution runs as one process, as
// always.

// Variables the agent gives the runner of each node of a multi-node job.
const (
	envNodeRank      = "FERRY_NODE_RANK"
	envNodeCount     = "FERRY_NODE_COUNT"
	envNodeAddresses = "FERRY_NODE_ADDRESSES"
	envMasterAddr    = "MASTER_ADDR"
	envMasterPort    = "MASTER_PORT"
)

// HostfileName is the mpirun hostfile of an mpi job, in the attempt's
// folder.
const HostfileName = "hostfile"

// nodeInfo is this node's place among the nodes of a job.
type nodeInfo struct {
	Rank       int
	Count      int
	Addresses  []string // every node's address, in rank order
	MasterAddr string
	MasterPort int
}

// nodeFromEnv reads this node's place from the runner's environment, or,
// when FERRY_NODE_RANK is not set, makes it the only node of the job, with
// a port from freePort.
func nodeFromEnv(getenv func(string) string, freePort func() (int, error)) (nodeInfo, error) {
	if getenv(envNodeRank) == "" {
		port, err := freePort()
		if err != nil {
			return nodeInfo{}, fmt.Errorf("choosing MASTER_PORT: %w", err)
		}
		return nodeInfo{Rank: 0, Count: 1, Addresses: []string{"127.0.0.1"}, MasterAddr: "127.0.0.1", MasterPort: port}, nil
	}
	var n nodeInfo
	var err error
	if n.Rank, err = strconv.Atoi(getenv(envNodeRank)); err != nil || n.Rank < 0 {
		return nodeInfo{}, fmt.Errorf("%s %q is not a node rank", envNodeRank, getenv(envNodeRank))
	}
	if n.Count, err = strconv.Atoi(getenv(envNodeCount)); err != nil || n.Count < 1 {
		return nodeInfo{}, fmt.Errorf("%s %q is not a node count", envNodeCount, getenv(envNodeCount))
	}
	if n.Rank >= n.Count {
		return nodeInfo{}, fmt.Errorf("%s %d is not below %s %d", envNodeRank, n.Rank, envNodeCount, n.Count)
	}
	for a := range strings.SplitSeq(getenv(envNodeAddresses), ",") {
		if a = strings.TrimSpace(a); a != "" {
			n.Addresses = append(n.Addresses, a)
		}
	}
	if len(n.Addresses) != n.Count {
		return nodeInfo{}, fmt.Errorf("%s names %d addresses for %d nodes", envNodeAddresses, len(n.Addresses), n.Count)
	}
	n.MasterAddr = getenv(envMasterAddr)
	if n.MasterAddr == "" {
		n.MasterAddr = n.Addresses[0]
	}
	switch p := getenv(envMasterPort); {
	case p != "":
		if n.MasterPort, err = strconv.Atoi(p); err != nil || n.MasterPort < 1 || n.MasterPort > 65535 {
			return nodeInfo{}, fmt.Errorf("%s %q is not a port", envMasterPort, p)
		}
	case n.Count == 1:
		if n.MasterPort, err = freePort(); err != nil {
			return nodeInfo{}, fmt.Errorf("choosing MASTER_PORT: %w", err)
		}
	default:
		// Every node must agree on it, so one node cannot choose it.
		return nodeInfo{}, fmt.Errorf("%s is not set for a job of %d nodes", envMasterPort, n.Count)
	}
	return n, nil
}

// freeLocalPort is a TCP port that is free on this machine now.
func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// rankProcess is one process of this node's share of a distributed job.
type rankProcess struct {
	Rank int      // its rank among all the job's processes
	Vars []string // its variables, which win over the job's
}

// perInstance is process_count_per_instance, 1 when left out.
func perInstance(d *spec.Distribution) int {
	return max(d.ProcessCountPerInstance, 1)
}

// planProcesses lays out this node's processes of a job with distribution
// d. hostfile is where an mpi job's hostfile is written. It is a pure
// function; its errors name the field of the job that is wrong.
func planProcesses(d *spec.Distribution, n nodeInfo, hostfile string) ([]rankProcess, error) {
	common := []string{
		envMasterAddr + "=" + n.MasterAddr,
		envMasterPort + "=" + strconv.Itoa(n.MasterPort),
		envNodeRank + "=" + strconv.Itoa(n.Rank),
		envNodeCount + "=" + strconv.Itoa(n.Count),
		envNodeAddresses + "=" + strings.Join(n.Addresses, ","),
	}
	var procs []rankProcess
	switch d.Type {
	case "pytorch", "mpi":
		k := perInstance(d)
		for i := range k {
			rank := n.Rank*k + i
			var vars []string
			if d.Type == "pytorch" {
				vars = []string{
					"RANK=" + strconv.Itoa(rank),
					"LOCAL_RANK=" + strconv.Itoa(i),
					"WORLD_SIZE=" + strconv.Itoa(n.Count*k),
					"LOCAL_WORLD_SIZE=" + strconv.Itoa(k),
					"NODE_RANK=" + strconv.Itoa(n.Rank),
				}
			} else {
				vars = []string{
					"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(rank),
					"OMPI_COMM_WORLD_SIZE=" + strconv.Itoa(n.Count*k),
					"OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(i),
					"OMPI_COMM_WORLD_LOCAL_SIZE=" + strconv.Itoa(k),
					"OMPI_COMM_WORLD_NODE_RANK=" + strconv.Itoa(n.Rank),
					"AZ_BATCHAI_MPI_MASTER_NODE=" + n.MasterAddr,
					"FERRY_HOSTFILE=" + hostfile,
				}
			}
			procs = append(procs, rankProcess{Rank: rank, Vars: append(vars, common...)})
		}
	case "tensorflow":
		tf, err := tfConfig(d, n)
		if err != nil {
			return nil, err
		}
		procs = []rankProcess{{Rank: n.Rank, Vars: append([]string{"TF_CONFIG=" + tf}, common...)}}
	default:
		return nil, fmt.Errorf("distribution.type %q is not one of pytorch, mpi, tensorflow", d.Type)
	}
	return procs, nil
}

// tfConfig is TF_CONFIG for node n of a tensorflow job.
func tfConfig(d *spec.Distribution, n nodeInfo) (string, error) {
	ps := d.ParameterServerCount
	if ps >= n.Count {
		return "", fmt.Errorf("distribution.parameter_server_count %d leaves no worker among the job's %d nodes (resources.instance_count); one process runs per node", ps, n.Count)
	}
	if d.WorkerCount != 0 && d.WorkerCount != n.Count-ps {
		return "", fmt.Errorf("distribution.worker_count %d does not fit: the job has %d nodes (resources.instance_count) and %d parameter servers, "+
			"and one process runs per node, so worker_count must be %d (or left out)", d.WorkerCount, n.Count, ps, n.Count-ps)
	}
	type task struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	var cfg struct {
		Cluster     map[string][]string `json:"cluster"`
		Task        task                `json:"task"`
		Environment string              `json:"environment"`
	}
	cfg.Cluster = map[string][]string{}
	for i, addr := range n.Addresses {
		role := "worker"
		if i < ps {
			role = "ps"
		}
		cfg.Cluster[role] = append(cfg.Cluster[role], net.JoinHostPort(addr, strconv.Itoa(n.MasterPort+i)))
	}
	cfg.Task = task{Type: "worker", Index: n.Rank - ps}
	if n.Rank < ps {
		cfg.Task = task{Type: "ps", Index: n.Rank}
	}
	cfg.Environment = "cloud"
	b, err := json.Marshal(cfg)
	return string(b), err
}

// hostfileText is an mpirun hostfile: each node's address with k slots,
// in rank order.
func hostfileText(n nodeInfo, k int) string {
	var b strings.Builder
	for _, a := range n.Addresses {
		fmt.Fprintf(&b, "%s slots=%d\n", a, k)
	}
	return b.String()
}

// withVars is base with vars set: a variable of base that vars sets too
// is left out, so the result names each of them once.
func withVars(base, vars []string) []string {
	set := map[string]bool{}
	for _, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(vars))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, vars...)
}

// planJob lays out this node's processes of j, or returns nil for a job
// without a distribution, which runs as one process. An mpi job's
// hostfile is written here.
func (r *runner) planJob(j *spec.Job) ([]rankProcess, error) {
	if j.Distribution == nil {
		return nil, nil
	}
	n, err := nodeFromEnv(os.Getenv, freeLocalPort)
	if err != nil {
		return nil, err
	}
	hostfile := filepath.Join(r.cfg.Dir, HostfileName)
	procs, err := planProcesses(j.Distribution, n, hostfile)
	if err != nil {
		return nil, err
	}
	if j.Distribution.Type == "mpi" {
		if err := os.WriteFile(hostfile, []byte(hostfileText(n, perInstance(j.Distribution))), 0o644); err != nil {
			return nil, fmt.Errorf("writing the mpi hostfile: %w", err)
		}
	}
	return procs, nil
}

// startHost starts one host process of the job in its working directory:
// on the warm shim, the first, else on a shim of its own.
func (r *runner) startHost(command string, env []string, spool *os.File) (process, error) {
	if r.warm != nil {
		w := <-r.warm
		r.warm = nil
		if w != nil {
			p, err := w.start(shell(), command, r.wd, env, spool, r.credential())
			if err == nil {
				return p, nil
			}
			r.log.Warn("the waiting shim is gone; starting another", "err", err)
		}
	}
	if r.cfg.Direct != nil {
		return r.startDirect(shell(), command, env, spool)
	}
	return startHost(shell(), command, r.wd, env, spool, r.credential())
}

// start starts the job's command: one process, or, for a distributed job,
// one per entry of procs, all with the same working directory and spool.
func (r *runner) start(ctx context.Context, j *spec.Job, rt *environment.Runtime, command string, procs []rankProcess, spool *os.File) (process, error) {
	if procs == nil {
		if rt.Image != "" {
			return r.startInContainer(ctx, j, rt.Image, command, nil)
		}
		return r.startHost(command, rt.Environ(r.env(j)), spool)
	}
	m := &multiProcess{grace: r.cfg.CancelGrace, notes: spool}
	for _, rp := range procs {
		var p process
		var err error
		if rt.Image != "" {
			p, err = r.startInContainer(ctx, j, rt.Image, command, &rp)
		} else {
			p, err = r.startHost(command, rt.Environ(withVars(r.env(j), rp.Vars)), spool)
		}
		if err != nil {
			m.stop(true)
			m.cleanup()
			return nil, fmt.Errorf("rank %d: %w", rp.Rank, err)
		}
		m.procs = append(m.procs, p)
		m.ranks = append(m.ranks, rp.Rank)
	}
	return m, nil
}

// rankFailure is the process whose end failed a distributed attempt.
type rankFailure struct {
	Rank, Code    int
	StoppedOthers bool // other processes still ran and were stopped
}

func (f *rankFailure) String() string {
	s := fmt.Sprintf("rank %d exited with code %d", f.Rank, f.Code)
	if f.StoppedOthers {
		s += "; the other processes were stopped"
	}
	return s
}

// failureExplainer is a process that can say, once it has ended, which of
// its parts failed it; nil when none did.
type failureExplainer interface {
	failure() *rankFailure
}

// multiProcess is the processes of one node of a distributed job, seen as
// one: it ends when all of them have, and the first to fail stops the
// others at once, as a distributed job cannot go on without one of its
// ranks. Each part is in its own process group (or container), and stop
// and cleanup reach all of them.
type multiProcess struct {
	procs []process
	ranks []int         // the rank of each of procs
	grace time.Duration // between SIGTERM and SIGKILL when a rank fails
	notes io.Writer     // the job's log, told when a rank fails

	stopping atomic.Bool  // stop was called: the runner is ending the job
	failed   *rankFailure // set by wait
}

var (
	_ process          = (*multiProcess)(nil)
	_ failureExplainer = (*multiProcess)(nil)
)

// wait waits for every process to end. It returns the exit code of the
// first that failed, or 0 when all exited with 0; an error when the end of
// one could not be seen.
func (m *multiProcess) wait() (int, error) {
	type end struct {
		i, code int
		err     error
	}
	ends := make(chan end, len(m.procs))
	for i, p := range m.procs {
		go func() {
			code, err := p.wait()
			ends <- end{i, code, err}
		}()
	}
	var first *end
	var kill <-chan time.Time // set once the others are told to stop
	for left := len(m.procs); left > 0; {
		select {
		case e := <-ends:
			left--
			if first != nil || (e.code == 0 && e.err == nil) {
				continue
			}
			first = &e
			if left == 0 {
				continue
			}
			if !m.stopping.Load() {
				fmt.Fprintf(m.notes, "ferry: rank %d exited with code %d; stopping the other processes\n", m.ranks[e.i], e.code)
			}
			m.stopAll(false)
			t := time.NewTimer(m.grace)
			defer t.Stop() // runs once: first is set once
			kill = t.C
		case <-kill:
			m.stopAll(true)
		}
	}
	if first == nil {
		return 0, nil
	}
	if first.err != nil {
		return first.code, fmt.Errorf("rank %d: %w", m.ranks[first.i], first.err)
	}
	m.failed = &rankFailure{Rank: m.ranks[first.i], Code: first.code, StoppedOthers: kill != nil}
	return first.code, nil
}

// failure is the rank that failed the attempt, once wait has returned.
func (m *multiProcess) failure() *rankFailure { return m.failed }

func (m *multiProcess) stop(kill bool) {
	m.stopping.Store(true)
	m.stopAll(kill)
}

func (m *multiProcess) stopAll(kill bool) {
	for _, p := range m.procs {
		p.stop(kill)
	}
}

func (m *multiProcess) cleanup() {
	for _, p := range m.procs {
		p.cleanup()
	}
}
