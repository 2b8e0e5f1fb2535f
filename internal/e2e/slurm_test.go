package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/compute/computetest"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// Ferry on the real test cluster (scripts/slurm-setup.sh): every job here
// goes through a real `ferry server`, sbatch and slurmd.

// startSlurm starts a server that reaches the test cluster (SLURM_CONF in
// its environment) and attaches a slurm compute named name on partition,
// submitting on this host. Its work_dir is a fresh folder, which every
// node sees: the nodes' slurmd run on this host.
func startSlurm(t *testing.T, sl testutil.Slurm, name, partition string) *server {
	t.Helper()
	s := startServerEnv(t, sl.Env, "--cancel-grace", "1s")
	s.mustFerry("compute", "attach", "-f", slurmFile(t, name, partition, filepath.Join(passableDir(t), "slurm"), ""))
	return s
}

func slurmFile(t *testing.T, name, partition, workDir, extra string) string {
	t.Helper()
	return computeFile(t, fmt.Sprintf("name: %s\ntype: slurm\npartition: %s\nwork_dir: %s\n%s", name, partition, workDir, extra))
}

// squeueJobs lists the cluster's live jobs named name (Ferry's
// --job-name is the job's name), as "id state reason".
func squeueJobs(t *testing.T, sl testutil.Slurm, name string) []string {
	t.Helper()
	out, err := sl.Command(context.Background(), "squeue", "-h", "-n", name, "-o", "%i %T %r").CombinedOutput()
	if err != nil {
		t.Fatalf("squeue: %v: %s", err, out)
	}
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "|"))
}

// 2 nodes x 2 processes of PyTorch DDP on two slurmd nodes of partition
// debug: srun starts one runner per node, each starts two ranks, and
// gloo's all-reduce over the four ranks sums 1+2+3+4.
func TestSlurmPyTorchDDPOnTwoNodes(t *testing.T) {
	sl := testutil.RequireSlurm(t)
	requireTorch(t)
	s := startSlurm(t, sl, "hpc-ddp", sl.Partition)
	job := jobFile(t, `command: /usr/bin/python3 ddp.py
code: src
compute: azureml:hpc-ddp
resources:
  instance_count: 2
distribution:
  type: pytorch
  process_count_per_instance: 2
`, map[string]string{"src/ddp.py": ddpScript})
	r := s.ferry("job", "create", "-f", job, "--stream", "--name", "slurm-ddp")
	if r.code != 0 {
		t.Fatalf("ddp job: %s\nserver:\n%s", r, s.output)
	}
	checkDDP(t, s, "slurm-ddp", r.stdout)
}

// A job pending behind a full partition shows Slurm's reason in `job
// show` and in `job create --stream`, and `job cancel` ends it: Canceled,
// the Slurm job gone, no process of it left.
func TestSlurmPendingShowsReasonAndCancels(t *testing.T) {
	sl := testutil.RequireSlurm(t)
	s := startSlurm(t, sl, "hpc-small", sl.Small)
	// Fill small (one node) from outside Ferry; Sbatch scancels it at the end.
	sl.Sbatch(t, "--partition="+sl.Small, "--exclusive", "--wrap", "sleep 600")

	file := jobFile(t, "command: echo ran\ncompute: azureml:hpc-small\n", nil)
	stream := exec.Command(ferryBin, "job", "create", "-f", file, "--stream", "--name", "pend")
	stream.Env = append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+s.home)
	var out, errb syncBuffer
	stream.Stdout, stream.Stderr = &out, &errb
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- stream.Wait() }()
	t.Cleanup(func() {
		if stream.ProcessState == nil {
			_ = stream.Process.Kill()
			<-done
		}
	})

	slurmReason := func(s string) bool { return strings.Contains(s, "Resources") || strings.Contains(s, "Priority") }
	deadline := time.Now().Add(30 * time.Second)
	var j job
	for {
		if r := s.ferry("job", "show", "pend", "-o", "json"); r.code == 0 {
			j = s.show("pend")
			if j.Status == "Queued" && slurmReason(j.StatusReason) && slurmReason(errb.String()) {
				break
			}
		}
		if time.Now().After(deadline) {
			_ = stream.Process.Signal(syscall.SIGQUIT) // its goroutines, to stderr
			<-done
			t.Fatalf("job pend: %s (%s); want Queued with Slurm's reason in job show and the stream; stream stderr:\n%s", j.Status, j.StatusReason, errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(squeueJobs(t, sl, "pend")) == 0 {
		t.Fatalf("job pend is Queued with reason %q but Slurm has no job of that name", j.StatusReason)
	}

	s.mustFerry("job", "cancel", "pend")
	j = s.waitStatus("pend", "Canceled")
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("job create --stream did not end after the cancel; stderr:\n%s", errb.String())
	}
	if strings.Contains(out.String(), "ran") {
		t.Errorf("the canceled pending job ran: %q", out.String())
	}
	for deadline := time.Now().Add(30 * time.Second); len(squeueJobs(t, sl, "pend")) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the canceled job is still in Slurm's queue: %v", squeueJobs(t, sl, "pend"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ps := computetest.HostJobProcs("pend"); len(ps) > 0 {
		t.Errorf("processes of the canceled job left: %v", ps)
	}
}

// The server is killed with SIGKILL while one job runs on small and two
// pend behind it in Slurm's queue. The running job's command ends while
// the server is down (its runner holds the allocation until it has
// reported to the server); after the restart every job completes with its
// whole log, and each ran exactly once (one marker line per run).
func TestSlurmServerKill9WithPendingAndRunningJobs(t *testing.T) {
	sl := testutil.RequireSlurm(t)
	s := startSlurm(t, sl, "hpc-kill", sl.Small)
	shared := jobWritableDir(t)
	gate := filepath.Join(shared, "gate")
	names := []string{"k9-run", "k9-pend1", "k9-pend2"}
	for i, n := range names {
		wait := ""
		if i == 0 {
			wait = fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done\n  ", gate)
		}
		job := jobFile(t, fmt.Sprintf(`command: |
  echo "attempt $FERRY_ATTEMPT" >> %s/%s.runs
  echo start
  %sfor i in $(seq 1 50); do echo "line $i"; done
  touch %s/%s.done
compute: azureml:hpc-kill
`, shared, n, wait, shared, n), nil)
		s.mustFerry("job", "create", "-f", job, "--name", n)
		if i == 0 {
			s.waitStatus(n, "Running")
		}
	}
	// Both wait in Slurm's queue before the kill: Queued, with the
	// engine's handle.
	for _, n := range names[1:] {
		for deadline := time.Now().Add(30 * time.Second); ; {
			j := s.show(n)
			if j.Status == "Queued" && handedOff(j) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s behind a running job on small: %s (%s), want Queued in Slurm's queue", n, j.Status, j.StatusReason)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	s.kill9()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(shared, "k9-run.done")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running job's command did not end while the server was down")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.start()

	var want strings.Builder
	want.WriteString("start\n")
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	for _, n := range names {
		j := s.waitStatus(n, "Completed", "Failed", "Canceled")
		if j.Status != "Completed" {
			t.Errorf("%s: %s (%s %s)", n, j.Status, j.StatusReason, j.Error)
		}
		if runs, err := os.ReadFile(filepath.Join(shared, n+".runs")); err != nil || string(runs) != "attempt 1\n" {
			t.Errorf("%s's runs: %q, %v; want it run once, as attempt 1", n, runs, err)
		}
		if log := s.mustFerry("job", "stream", n).stdout; log != want.String() {
			t.Errorf("%s's log after the restart:\n%s\nwant:\n%s", n, log, want.String())
		}
		if ps := computetest.HostJobProcs(n); len(ps) > 0 {
			t.Errorf("processes of %s left: %v", n, ps)
		}
	}
}

// handedOff reports whether a job's attempt was given to its target's
// engine: it has the engine's handle (a Slurm job id).
func handedOff(j job) bool { return j.Handle != "" }

// `compute attach -f` of a slurm compute is refused, naming the field,
// when the partition is not the cluster's (listing those it has), the
// login node does not answer, or the login node's host key is not the
// pinned one; nothing is stored after a refusal.
func TestSlurmAttachRefusals(t *testing.T) {
	sl := testutil.RequireSlurm(t)
	testutil.RequireSSHD(t)
	s := startServerEnv(t, sl.Env)
	sshd := testutil.StartSSHD(t)
	other := testutil.StartSSHD(t) // its host key is the "changed" one
	work := filepath.Join(passableDir(t), "slurm")
	login := func(name string, port int, hostKey string) string {
		f := slurmFile(t, name, sl.Partition, work, fmt.Sprintf(`address: %s
host_key: %q
ssh_settings:
  admin_username: %s
  ssh_port: %d
  ssh_private_key_file: id_test
`, sshd.Address, hostKey, sshd.User, port))
		writeFiles(t, filepath.Dir(f), map[string]string{"id_test": string(sshd.ClientKey)})
		return f
	}
	closed := freeAddr(t) // nothing listens there once freeAddr returns
	var closedPort int
	if _, err := fmt.Sscanf(closed[strings.LastIndex(closed, ":")+1:], "%d", &closedPort); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file string
		want       []string
	}{
		{"wrong-partition", slurmFile(t, "wrong-partition", "gpus", work, ""), []string{"partition", `"gpus"`, sl.Partition, sl.Small}},
		{"no-login-node", login("no-login-node", closedPort, sshd.HostKeyLine), []string{"address"}},
		{"changed-key", login("changed-key", sshd.Port, other.Fingerprint), []string{"host_key"}},
	}
	for _, c := range cases {
		r := s.ferry("compute", "attach", "-f", c.file)
		if r.code == 0 {
			t.Errorf("%s: attach succeeded, want it refused: %s", c.name, r)
			continue
		}
		mustContain(t, c.name+"'s refusal", r.stderr, c.want...)
	}
	list := s.mustFerry("compute", "list").stdout
	for _, c := range cases {
		if strings.Contains(list, c.name) {
			t.Errorf("compute list shows %s after its refusal:\n%s", c.name, list)
		}
	}
	// With its real key the same login node gets past the host key check:
	// the refusal above was about the key. (It logs in and runs sinfo,
	// which cannot find the test cluster there: the login shell lacks
	// SLURM_CONF, which a real login node's /etc/slurm would give.)
	if r := s.ferry("compute", "attach", "-f", login("right-key", sshd.Port, sshd.HostKeyLine)); strings.Contains(r.stderr, "host_key") {
		t.Errorf("the login node with its own key is refused for its host key: %s", r)
	}
}
