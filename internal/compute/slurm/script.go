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

// batch is one sbatch: the attempts it starts, what Slurm is asked for,
// and the script that starts their runners. One attempt is a batch job of
// its own; several, which ask Slurm for the same (resourceOptions), are
// the tasks of one array job, task i running attempts[i].
type batch struct {
	compute  *spec.Compute
	attempts []attempt
	path     string   // where the script is written, on the shared work_dir
	runner   []string // the program (and leading arguments) of a runner
	cache    string   // the runners' blob cache
	envCache string   // the runners' built environments

	cancelGrace time.Duration
}

// attempt is one attempt of a batch and its folder under work_dir.
type attempt struct {
	launch compute.Launch
	dir    string
}

// nodeDirVar is the shell variable holding a node's runner folder; the
// runner's --dir is the one argument the script does not write literally.
// attemptDirVar holds the attempt's folder, which in an array script
// depends on the task. Both are FERRY_ names, which a job's own
// environment_variables may not use.
const (
	nodeDirVar    = "FERRY_NODE_DIR"
	attemptDirVar = "FERRY_ATTEMPT_DIR"
)

// isArray says whether the batch is an array job.
func (b batch) isArray() bool { return len(b.attempts) > 1 }

// options are the #SBATCH options of the batch (docs/slurm.md lists
// them): the attempt's name, folder and output, or the array's range,
// then resourceOptions.
func (b batch) options() []string {
	var opts []string
	if b.isArray() {
		// One name, folder and output file for all tasks: each task goes
		// to its attempt's folder and sends its output there itself.
		opts = []string{
			"--job-name=ferry-array",
			"--array=0-" + strconv.Itoa(len(b.attempts)-1),
			"--chdir=" + b.compute.WorkDir,
			"--output=/dev/null",
		}
	} else {
		a := b.attempts[0]
		opts = []string{
			"--job-name=" + a.launch.Job,
			"--chdir=" + a.dir,
			"--output=" + path.Join(a.dir, "slurm-%j.out"),
		}
	}
	return append(opts, resourceOptions(b.compute, b.attempts[0].launch.Spec)...)
}

// resourceOptions are the options that the compute and the job ask Slurm
// for: what decides where and how an attempt runs, and so what the
// attempts of one array job must have alike.
func resourceOptions(c *spec.Compute, j *spec.Job) []string {
	nodes, perNode := shape(j)
	opts := []string{
		"--partition=" + c.Partition,
		"--nodes=" + strconv.Itoa(nodes),
		"--ntasks-per-node=" + strconv.Itoa(perNode),
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
	if m := minutes(c, j); m > 0 {
		opts = append(opts, "--time="+strconv.FormatInt(m, 10))
	}
	return opts
}

// shape is the job's node count and tasks per node.
func shape(j *spec.Job) (nodes, perNode int) {
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
func minutes(c *spec.Compute, j *spec.Job) int64 {
	ceilMin := func(d time.Duration) int64 { return int64((d + time.Minute - 1) / time.Minute) }
	if l := j.Limits; l != nil && l.Timeout > 0 {
		return ceilMin(time.Duration(l.Timeout)*time.Second + finalizeSlack)
	}
	if s := c.DefaultTimeLimit; s > 0 {
		return ceilMin(time.Duration(s) * time.Second)
	}
	return 0
}

// script is the batch's script. sbatch runs it on the first node of the
// allocation (of each task's allocation, for an array). It first sets the
// attempt's part: its folder, its environment_variables and the runner's
// command line, as a function; an array script holds every task's part,
// picked by SLURM_ARRAY_TASK_ID. The rest is the same for one attempt or
// many. A job of one node runs its runner right there, as a job on one
// machine (the runner picks MASTER_ADDR and MASTER_PORT). A job of several
// nodes starts the script again on every node through srun, with the
// argument "node": each copy starts one runner with the node's place in
// the job (FERRY_NODE_RANK = SLURM_NODEID, the node's index in the
// allocation's host list), and the runner starts that node's processes
// (process_count_per_instance) with their ranks.
func (b batch) script() (string, error) {
	var s strings.Builder
	s.WriteString("#!/bin/bash\n")
	for _, o := range b.options() {
		if strings.ContainsAny(o, "\n\r\x00") {
			return "", fmt.Errorf("slurm: sbatch option %q holds a line break", o)
		}
		s.WriteString("#SBATCH " + o + "\n")
	}
	if !b.isArray() {
		a := b.attempts[0]
		fmt.Fprintf(&s, "# Ferry job %s, attempt %d: written by Ferry's slurm compute target.\n", a.launch.Job, a.launch.Attempt)
		part, err := b.attemptPart(a)
		if err != nil {
			return "", err
		}
		s.WriteString(part)
	} else {
		fmt.Fprintf(&s, "# Ferry: %d attempts, one a task of this array job: written by Ferry's slurm compute target.\n", len(b.attempts))
		s.WriteString("case \"${SLURM_ARRAY_TASK_ID-}\" in\n")
		for i, a := range b.attempts {
			part, err := b.attemptPart(a)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&s, "%d) # Ferry job %s, attempt %d.\n%s%s;;\n", i, a.launch.Job, a.launch.Attempt, part, taskOutput)
		}
		s.WriteString("*) echo \"ferry: array task ${SLURM_ARRAY_TASK_ID-} has no attempt\" >&2; exit 1 ;;\nesac\n")
		s.WriteString(taskToken)
	}
	if nodes, _ := shape(b.attempts[0].launch.Spec); nodes > 1 {
		fmt.Fprintf(&s, multiNode, shellQuote(b.path))
		fmt.Fprintf(&s, "%s=\"$%s/node-$SLURM_NODEID\"\n", nodeDirVar, attemptDirVar)
	} else {
		fmt.Fprintf(&s, "%s=\"$%s/node-0\"\n", nodeDirVar, attemptDirVar)
	}
	fmt.Fprintf(&s, "mkdir -p \"$%s\" || exit 1\nferry_runner\n", nodeDirVar)
	return s.String(), nil
}

// attemptPart is what the script sets for one attempt: its folder, its
// environment_variables, and ferry_runner, which starts its runner with
// the node's folder as --dir.
func (b batch) attemptPart(a attempt) (string, error) {
	l := a.launch
	inv := invocation.Invocation{API: l.APIURL, Job: l.Job, Attempt: l.Attempt, Dir: "\x00dir",
		Cache: b.cache, EnvCache: b.envCache, CancelGrace: b.cancelGrace}
	var cmd []string
	for _, arg := range append(slices.Clone(b.runner), inv.Args()...) {
		if arg == inv.Dir {
			cmd = append(cmd, `"$`+nodeDirVar+`"`)
			continue
		}
		cmd = append(cmd, shellQuote(arg))
	}
	var s strings.Builder
	fmt.Fprintf(&s, "%s=%s\n", attemptDirVar, shellQuote(a.dir))
	for _, k := range slices.Sorted(maps.Keys(l.Spec.EnvironmentVariables)) {
		if !envNameRe().MatchString(k) {
			return "", fmt.Errorf("slurm: environment_variables.%s is not a variable name", k)
		}
		fmt.Fprintf(&s, "export %s=%s\n", k, shellQuote(l.Spec.EnvironmentVariables[k]))
	}
	fmt.Fprintf(&s, "ferry_runner() { exec %s; }\n", strings.Join(cmd, " "))
	return s.String(), nil
}

// taskOutput ends a task's part of an array script: the array's output is
// /dev/null, so the task's batch step sends its own to its attempt's
// folder, named like its handle, and works there (what --chdir and
// --output do for a batch job of its own). The copies srun starts on the
// nodes of a job of several have their own output (runner-N.log).
const taskOutput = `if [ "${1-}" != node ]; then
  exec >"$FERRY_ATTEMPT_DIR/slurm-${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID.out" 2>&1 || exit 1
fi
cd "$FERRY_ATTEMPT_DIR" || exit 1
`

// taskToken gives an array task its own run token. The submit command
// exported every task's token as FERRY_RUN_TOKEN_<task>, so every task's
// environment holds them all: the task keeps its own as FERRY_RUN_TOKEN
// and drops the others before any of the job's code runs. srun's copies
// on the nodes of a job of several inherit FERRY_RUN_TOKEN alone, so they
// keep it.
const taskToken = `ferry_token=FERRY_RUN_TOKEN_$SLURM_ARRAY_TASK_ID
if [ -n "${!ferry_token+set}" ]; then
  export FERRY_RUN_TOKEN="${!ferry_token}"
fi
unset ferry_token $(compgen -v FERRY_RUN_TOKEN_)
`

// multiNode is the part of a several-node script that runs in the batch
// step: the nodes' addresses in SLURM_NODEID order (each node's NodeAddr,
// or its name when Slurm has none), the first as MASTER_ADDR, a
// MASTER_PORT every node derives alike from the job id (an array task's
// own), then one copy of the script per node. --whole gives each node's
// copy the node's whole share of the allocation (CPUs, GPUs), which the
// runner's processes use. %[1]s is the script's path.
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
    --kill-on-bad-exit=1 --output="$FERRY_ATTEMPT_DIR/runner-%%n.log" /bin/bash %[1]s node
fi
export FERRY_NODE_RANK="$SLURM_NODEID"
`

// shellQuote quotes s for a POSIX shell: in single quotes, where each
// single quote of s closes the quotes, is escaped, and reopens them.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
