package slurm

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/runner/invocation"
	"github.com/ferry-ml/ferry/internal/spec"
)

// finalizeSlack is added to limits.timeout for Slurm's --time: the runner
// enforces the job's timeout itself and then still uploads outputs and
// reports, which Slurm must leave it time for. Slurm's limit is the
// backstop for a runner that cannot end the job.
const finalizeSlack = 5 * time.Minute

// batch is one attempt's batch job: what sbatch is asked for and the
// script that starts its runners.
type batch struct {
	compute  *spec.Compute
	launch   compute.Launch
	dir      string   // the attempt's folder, under work_dir
	runner   []string // the program (and leading arguments) of a runner
	cache    string   // the runners' blob cache
	envCache string   // the runners' built environments

	cancelGrace time.Duration
}

// nodeDirVar is the shell variable holding a node's runner folder; the
// runner's --dir is the one argument the script does not write literally.
const nodeDirVar = "FERRY_NODE_DIR"

// options are the #SBATCH options of the attempt, from the compute and
// the job (docs/slurm.md lists them).
func (b batch) options() []string {
	c, j := b.compute, b.launch.Spec
	nodes, perNode := b.shape()
	opts := []string{
		"--job-name=" + b.launch.Job,
		"--partition=" + c.Partition,
		"--nodes=" + strconv.Itoa(nodes),
		"--ntasks-per-node=" + strconv.Itoa(perNode),
		"--chdir=" + b.dir,
		"--output=" + path.Join(b.dir, "slurm-%j.out"),
		// A preempted or failed job ends in Slurm and comes back to Ferry,
		// which starts a new attempt (a requeue inside Slurm would reuse
		// this attempt's number and handle).
		"--no-requeue",
	}
	qos := c.QOS
	if q := j.QueueSettings; q != nil {
		if q.JobTier != "" {
			qos = c.JobTierQOS[q.JobTier]
		}
		if n, ok := c.PriorityNice[q.Priority]; ok && q.Priority != "" {
			opts = append(opts, "--nice="+strconv.Itoa(n))
		}
	}
	for _, o := range []struct{ flag, v string }{
		{"--account", c.Account}, {"--qos", qos}, {"--constraint", c.Constraint}, {"--reservation", c.Reservation},
	} {
		if o.v != "" {
			opts = append(opts, o.flag+"="+o.v)
		}
	}
	if g, _ := j.Resources.GPUs(); g > 0 {
		opts = append(opts, "--gres=gpu:"+strconv.Itoa(g))
	}
	if m := b.minutes(); m > 0 {
		opts = append(opts, "--time="+strconv.FormatInt(m, 10))
	}
	return opts
}

// shape is the job's node count and tasks per node.
func (b batch) shape() (nodes, perNode int) {
	j := b.launch.Spec
	nodes, perNode = 1, 1
	if r := j.Resources; r != nil && r.InstanceCount > 1 {
		nodes = r.InstanceCount
	}
	// The runner starts process_count_per_instance processes on its
	// node (one for tensorflow); Slurm is asked for that many tasks so
	// that it gives the node the CPUs for them.
	if d := j.Distribution; d != nil && d.Type != "tensorflow" && d.ProcessCountPerInstance > 1 {
		perNode = d.ProcessCountPerInstance
	}
	return nodes, perNode
}

// minutes is Slurm's time limit (whole minutes, Slurm's unit) or 0 for
// the partition's default: limits.timeout and the slack to finish, or the
// compute's default_time_limit.
func (b batch) minutes() int64 {
	ceilMin := func(d time.Duration) int64 { return int64((d + time.Minute - 1) / time.Minute) }
	if l := b.launch.Spec.Limits; l != nil && l.Timeout > 0 {
		return ceilMin(time.Duration(l.Timeout)*time.Second + finalizeSlack)
	}
	if s := b.compute.DefaultTimeLimit; s > 0 {
		return ceilMin(time.Duration(s) * time.Second)
	}
	return 0
}

// script is the attempt's batch script. sbatch runs it on the first node
// of the allocation. A job of one node runs its runner right there, as a
// job on one machine (the runner picks MASTER_ADDR and MASTER_PORT). A
// job of several nodes starts the script again on every node through
// srun, with the argument "node": each copy starts one runner with the
// node's place in the job (FERRY_NODE_RANK = SLURM_NODEID, the node's
// index in the allocation's host list), and the runner starts that node's
// processes (process_count_per_instance) with their ranks.
func (b batch) script() (string, error) {
	l := b.launch
	inv := invocation.Invocation{API: l.APIURL, Job: l.Job, Attempt: l.Attempt, Dir: "\x00dir",
		Cache: b.cache, EnvCache: b.envCache, CancelGrace: b.cancelGrace}
	var cmd []string
	for _, a := range append(slices.Clone(b.runner), inv.Args()...) {
		if a == inv.Dir {
			cmd = append(cmd, `"$`+nodeDirVar+`"`)
			continue
		}
		cmd = append(cmd, shellQuote(a))
	}
	runner := strings.Join(cmd, " ")

	var s strings.Builder
	s.WriteString("#!/bin/bash\n")
	for _, o := range b.options() {
		if strings.ContainsAny(o, "\n\r\x00") {
			return "", fmt.Errorf("slurm: sbatch option %q holds a line break", o)
		}
		s.WriteString("#SBATCH " + o + "\n")
	}
	fmt.Fprintf(&s, "# Ferry job %s, attempt %d: written by Ferry's slurm compute target.\n", l.Job, l.Attempt)
	for _, k := range slices.Sorted(maps.Keys(l.Spec.EnvironmentVariables)) {
		if !envNameRe.MatchString(k) {
			return "", fmt.Errorf("slurm: environment_variables.%s is not a variable name", k)
		}
		fmt.Fprintf(&s, "export %s=%s\n", k, shellQuote(l.Spec.EnvironmentVariables[k]))
	}
	nodes, _ := b.shape()
	if nodes == 1 {
		fmt.Fprintf(&s, "%s=%s\nmkdir -p \"$%[1]s\" || exit 1\nexec %[3]s\n", nodeDirVar, shellQuote(path.Join(b.dir, "node-0")), runner)
		return s.String(), nil
	}
	fmt.Fprintf(&s, multiNode, shellQuote(path.Join(b.dir, "runner-%n.log")), shellQuote(path.Join(b.dir, "job.sh")))
	fmt.Fprintf(&s, "%s=%s/node-\"$SLURM_NODEID\"\nmkdir -p \"$%[1]s\" || exit 1\nexec %[3]s\n", nodeDirVar, shellQuote(b.dir), runner)
	return s.String(), nil
}

// multiNode is the part of a several-node script that runs in the batch
// step: the nodes' addresses in SLURM_NODEID order (each node's NodeAddr,
// or its name when Slurm has none), the first as MASTER_ADDR, a
// MASTER_PORT every node derives alike from the job id, then one copy of
// the script per node. --whole gives each node's copy the node's whole
// share of the allocation (CPUs, GPUs), which the runner's processes use.
// %[1]s is the runners' log pattern, %[2]s the script's path.
const multiNode = `if [ "${1-}" != node ]; then
  addrs=$( { scontrol -o show node "$SLURM_JOB_NODELIST" 2>/dev/null; echo ---; scontrol show hostnames "$SLURM_JOB_NODELIST"; } | awk '
    $0 == "---" { names = 1; next }
    !names { n = ""; a = ""
      for (i = 1; i <= NF; i++) { if ($i ~ /^NodeName=/) n = substr($i, 10); if ($i ~ /^NodeAddr=/) a = substr($i, 10) }
      if (n != "") addr[n] = a; next }
    { printf "%%s%%s", sep, (addr[$0] != "" ? addr[$0] : $0); sep = "," }')
  [ -n "$addrs" ] || { echo "ferry: no host names for $SLURM_JOB_NODELIST" >&2; exit 1; }
  export FERRY_NODE_COUNT="$SLURM_JOB_NUM_NODES" FERRY_NODE_ADDRESSES="$addrs"
  export MASTER_ADDR="${addrs%%%%,*}" MASTER_PORT=$((20000 + SLURM_JOB_ID %% 20000))
  exec srun --whole --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \
    --kill-on-bad-exit=1 --output=%[1]s /bin/bash %[2]s node
fi
export FERRY_NODE_RANK="$SLURM_NODEID"
`

// shellQuote quotes s for a POSIX shell: in single quotes, where each
// single quote of s closes the quotes, is escaped, and reopens them.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
