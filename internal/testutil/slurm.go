package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SlurmConf is the configuration of the one-host test cluster that
// scripts/slurm-setup.sh writes and starts (munged, slurmctld, four
// slurmd). The script keeps it out of /etc/slurm, so a client finds the
// cluster only through SLURM_CONF (see Slurm.Env).
const SlurmConf = "/var/lib/ferry-slurm/slurm.conf"

// Slurm is the running test cluster, as a test needs it.
type Slurm struct {
	// Partition is the default partition and Nodes its node count (3).
	Partition string
	Nodes     int
	// Small is a partition of one node (2 CPUs) that no other partition
	// shares, so a test can fill it and see a job pend behind it.
	Small string
	// Env is what a Slurm client's environment must add to reach the
	// cluster: SLURM_CONF.
	Env []string
}

// RequireSlurm skips the test unless the test cluster answers: sbatch is
// installed and sinfo, pointed at SlurmConf, lists the partitions debug
// and small. The cluster is asked once per test binary: sinfo takes about
// 9 s to give up on a controller that does not answer.
func RequireSlurm(t testing.TB) Slurm {
	t.Helper()
	s, err := probeSlurm()
	if err != nil {
		skip(t, "needs the test Slurm cluster: as root run bash scripts/slurm-setup.sh (%v)", err)
	}
	return s
}

var probeSlurm = sync.OnceValues(func() (Slurm, error) {
	s := Slurm{Partition: "debug", Small: "small", Env: []string{"SLURM_CONF=" + SlurmConf}}
	if _, err := exec.LookPath("sbatch"); err != nil {
		return s, errors.New("sbatch is not installed")
	}
	if _, err := os.Stat(SlurmConf); err != nil {
		return s, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// %R is the partition's name without the default's '*'; %D its node count.
	out, err := s.Command(ctx, "sinfo", "-h", "-o", "%R %D").CombinedOutput()
	if err != nil {
		return s, fmt.Errorf("sinfo with SLURM_CONF=%s: %v: %s", SlurmConf, err, strings.TrimSpace(string(out)))
	}
	nodes := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if name, n, ok := strings.Cut(line, " "); ok {
			nodes[name], _ = strconv.Atoi(n)
		}
	}
	if nodes[s.Partition] < 2 || nodes[s.Small] != 1 {
		return s, fmt.Errorf("the cluster at %s has partitions %v; want %s with 2 or more nodes and %s with 1",
			SlurmConf, nodes, s.Partition, s.Small)
	}
	s.Nodes = nodes[s.Partition]
	return s, nil
})

// Command is exec.CommandContext with the cluster's Env added to this
// process's environment.
func (s Slurm) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), s.Env...)
	return cmd
}

// Sbatch submits a batch job with sbatch and args and returns its id; the
// job is cancelled when the test ends, so nothing it submitted outlives
// it. Its output goes to /dev/null unless args name an --output. With
// --wait in args, Sbatch returns when the job has ended and fails the test
// when the job failed.
func (s Slurm) Sbatch(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.Command(context.Background(), "sbatch",
		append([]string{"--parsable", "--output=/dev/null"}, args...)...).Output()
	// --parsable prints "id" or "id;cluster" as soon as the job is queued,
	// also before a --wait fails.
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if _, perr := strconv.Atoi(id); perr == nil {
		t.Cleanup(func() { _ = s.Command(context.Background(), "scancel", id).Run() })
	}
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("sbatch %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	if id == "" {
		t.Fatalf("sbatch %s printed no job id", strings.Join(args, " "))
	}
	return id
}

// ScontrolJob returns the fields of `scontrol show job` for job id
// (JobState, Reason, NodeList, ExitCode, ...). A finished job stays
// visible for MinJobAge (an hour on the test cluster).
func (s Slurm) ScontrolJob(t testing.TB, id string) map[string]string {
	t.Helper()
	out, err := s.Command(context.Background(), "scontrol", "-o", "show", "job", id).CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol show job %s: %v: %s", id, err, strings.TrimSpace(string(out)))
	}
	fields := map[string]string{}
	// -o prints one line of Key=Value pairs; only free-text fields a test
	// does not read (Command, WorkDir, StdOut) could hold a space.
	for _, kv := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

// WaitJob polls `scontrol show job` until cond holds for the job's fields
// and returns them; it fails the test with the last fields after a
// minute, which only a broken or badly overloaded cluster takes.
func (s Slurm) WaitJob(t testing.TB, id string, what string, cond func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		f := s.ScontrolJob(t, id)
		if cond(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: not %s after a minute: JobState=%s Reason=%s", id, what, f["JobState"], f["Reason"])
		}
		time.Sleep(200 * time.Millisecond)
	}
}
