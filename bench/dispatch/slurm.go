package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/compute/slurm"
	"github.com/ferry-ml/ferry/internal/spec"
)

// slurmConf is where scripts/slurm-setup.sh writes the one-host test
// cluster's configuration (testutil.SlurmConf; the bench is not a test, so
// it does not import testutil). A SLURM_CONF already set wins, so the bench
// can be pointed at another cluster.
const slurmConf = "/var/lib/ferry-slurm/slurm.conf"

// slurmEnv is the environment of every Slurm command the bench runs.
func slurmEnv() []string {
	if os.Getenv("SLURM_CONF") != "" {
		return os.Environ()
	}
	return append(os.Environ(), "SLURM_CONF="+slurmConf)
}

// slurmCmd runs one Slurm client command and returns its stdout.
func slurmCmd(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = slurmEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// benchSlurm submits n jobs of `true` to a Slurm cluster, one sbatch each
// as a user would, and waits until every one of them has finished: it
// follows the job ids it was given (squeue by user reads nothing when USER
// is unset, and would time the submissions only), then checks with scontrol
// that each one COMPLETED, so a failed job cannot pass for a fast one. The
// rate is n over the time from the first submission to the last finish.
func benchSlurm(n int) (float64, error) {
	if _, err := exec.LookPath("sbatch"); err != nil {
		return 0, fmt.Errorf("sbatch not installed")
	}
	if _, err := slurmCmd("sinfo", "-h"); err != nil {
		return 0, fmt.Errorf("no Slurm cluster answers (start the test cluster with `bash scripts/slurm-setup.sh`): %v", err)
	}
	ids := make([]string, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		out, err := slurmCmd("sbatch", "--parsable", "--output=/dev/null", "--wrap", "true")
		if err != nil {
			return 0, err
		}
		// --parsable prints "id" or "id;cluster".
		id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
		if id == "" {
			return 0, fmt.Errorf("sbatch printed no job id")
		}
		ids = append(ids, id)
	}
	list := strings.Join(ids, ",")
	for {
		// squeue's default states are the unfinished ones (pending,
		// running, completing, ...): empty means all have finished.
		out, err := slurmCmd("squeue", "-h", "-j", list, "-o", "%i")
		if err != nil {
			return 0, err
		}
		if strings.TrimSpace(out) == "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if err := slurmAllCompleted(ids); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// slurmAllCompleted checks with scontrol that each job ended COMPLETED.
// It needs the cluster's MinJobAge to keep finished jobs listed (the test
// cluster keeps them an hour); a job it cannot find is an error, not a pass.
func slurmAllCompleted(ids []string) error {
	out, err := slurmCmd("scontrol", "show", "job", "-o")
	if err != nil {
		return err
	}
	state := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		var id, st string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "JobId="); ok {
				id = v
			} else if v, ok := strings.CutPrefix(f, "JobState="); ok {
				st = v
			}
		}
		if id != "" {
			state[id] = st
		}
	}
	bad := 0
	var first string
	for _, id := range ids {
		if st := state[id]; st != "COMPLETED" {
			if bad == 0 {
				first = fmt.Sprintf("job %s is %q", id, st)
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d Slurm jobs did not complete (%s); the figure would be wrong", bad, len(ids), first)
	}
	return nil
}

// benchSlurmTarget submits n jobs through the slurm compute target's
// Launch, one after another as benchSlurm's sbatch, and waits with its
// Inspect until every one has ended, each COMPLETED: the target's own
// cost per job over direct sbatch. No server runs, so the jobs' runner
// is /bin/true (it ignores the runner's arguments); what the target adds
// is its submit command (mkdir, the script written, sbatch), the script's
// start, and the polling by Inspect. It also returns Launch's duration,
// p50 and p99: from the call to the handle, which is when the attempt is
// Queued in Ferry with the handle stored.
func benchSlurmTarget(n int) (rate float64, p50, p99 time.Duration, err error) {
	work, err := os.MkdirTemp("", "ferry-bench-slurm-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(work)
	var env []string
	if os.Getenv("SLURM_CONF") == "" {
		env = []string{"SLURM_CONF=" + slurmConf}
	}
	c := &spec.Compute{Name: "bench", Type: "slurm", Partition: "debug", WorkDir: work}
	tg, err := slurm.New(slurm.Config{Compute: c, Runner: []string{"/bin/true"}, Env: env})
	if err != nil {
		return 0, 0, 0, err
	}
	defer tg.Close()
	ctx := context.Background()
	pending := map[compute.Handle]bool{}
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		h, err := tg.Launch(ctx, compute.Launch{Job: fmt.Sprintf("bench-%d", i), Attempt: 1,
			APIURL: "http://127.0.0.1:1", Spec: &spec.Job{Command: "true"}})
		if err != nil {
			return 0, 0, 0, err
		}
		lat = append(lat, time.Since(t0))
		pending[h] = true
	}
	for len(pending) > 0 {
		hs := make([]compute.Handle, 0, len(pending))
		for h := range pending {
			hs = append(hs, h)
		}
		states, err := tg.Inspect(ctx, hs)
		if err != nil {
			return 0, 0, 0, err
		}
		for _, h := range hs {
			switch st, ok := states[h]; {
			case !ok:
				return 0, 0, 0, fmt.Errorf("slurm job %s is gone before it was seen to end", h)
			case st.Phase == compute.PhaseEnded && st.Outcome != "Completed":
				return 0, 0, 0, fmt.Errorf("slurm job %s ended %s (%s); the figure would be wrong", h, st.Outcome, st.Reason)
			case st.Phase == compute.PhaseEnded:
				delete(pending, h)
			}
		}
		if len(pending) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return float64(n) / elapsed.Seconds(), lat[len(lat)/2], lat[len(lat)*99/100], nil
}

// benchFerrySlurm runs n jobs of `true` through a real ferry server on a
// slurm compute of the test cluster's default partition, from submission
// to the last one Completed (each runs the real runner under srun and
// reports to the server). Its second figure is how long a submitted job
// takes to be Queued in Slurm's own queue as Ferry shows it (the hand-off
// event, after which the job carries its Slurm job id), from the status
// history of 100 of the jobs.
func benchFerrySlurm(bin string, n int) (rate float64, q50, q99 time.Duration, err error) {
	tmp, err := os.MkdirTemp("", "ferry-bench-slurm-server-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(tmp)
	if os.Getenv("SLURM_CONF") == "" {
		os.Setenv("SLURM_CONF", slurmConf) // the server and its Slurm commands read it
	}
	work := filepath.Join(tmp, "slurm-work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return 0, 0, 0, err
	}
	c, stop, _, err := startServer(bin, tmp, runtime.NumCPU())
	if err != nil {
		return 0, 0, 0, err
	}
	defer stop()
	ctx := context.Background()
	if _, err := c.CreateCompute(ctx, &spec.Compute{Name: "hpc", Type: "slurm", Partition: "debug", WorkDir: work}); err != nil {
		return 0, 0, 0, fmt.Errorf("create the slurm compute: %w", err)
	}
	rate, _, _, submitted, err := burst(c, n, "hpc")
	if err != nil {
		return 0, 0, 0, err
	}
	var lat []time.Duration
	step := max(1, n/100)
	for i := 0; i < n; i += step {
		name := fmt.Sprintf("bench-%05d", i)
		j, err := c.GetJob(ctx, name)
		if err != nil {
			return 0, 0, 0, err
		}
		for k := 1; k < len(j.History); k++ {
			if h := j.History[k]; h.From == "Queued" && h.To == "Queued" && strings.Contains(h.Reason, "handed to compute") {
				lat = append(lat, j.History[k].Time.Sub(submitted[name]))
				break
			}
		}
	}
	if len(lat) == 0 {
		return 0, 0, 0, fmt.Errorf("no job's history shows its hand-off to Slurm (a Queued event: handed to compute ...)")
	}
	slices.Sort(lat)
	return rate, lat[len(lat)/2].Round(100 * time.Microsecond), lat[len(lat)*99/100].Round(100 * time.Microsecond), nil
}
