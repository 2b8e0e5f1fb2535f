package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// These tests prove that the cluster scripts/slurm-setup.sh starts really
// runs work the way the Slurm compute target (issue 12) will use it.
//
// What they found on Debian 12's Slurm 22.05 with four slurmd on one host:
// a job of 2 nodes x 2 tasks (sbatch -N2 --ntasks-per-node=2) starts, with
// srun, 4 tasks with SLURM_PROCID 0..3, SLURM_NODEID 0,0,1,1 and
// SLURM_LOCALID 0,1,0,1, on two distinct nodes (SLURMD_NODENAME node1 and
// node2; hostname is this host for both); /usr/bin/python3 imports
// torch.distributed inside such a step. slurmd sets SLURM_CONF in a job's
// environment even with --export=NONE (which also leaves PATH unset).

// taskRow is what one srun task of a 2x2 job reports about itself.
type taskRow struct{ ProcID, NodeID, LocalID int }

func TestSlurmTwoNodesTwoTasksPerNode(t *testing.T) {
	t.Parallel()
	s := RequireSlurm(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "tasks")
	script := filepath.Join(dir, "job.sh")
	body := fmt.Sprintf("#!/bin/bash\nsrun bash -c 'echo $SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID $SLURMD_NODENAME $SLURM_JOB_NODELIST' > %s\n", out)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	id := s.Sbatch(t, "--wait", "--partition="+s.Partition, "--nodes=2", "--ntasks-per-node=2", script)

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []taskRow
	nodeOf := map[int]string{}     // SLURM_NODEID -> SLURMD_NODENAME
	nodeLists := map[string]bool{} // SLURM_JOB_NODELIST as each task saw it
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("task line %q: want PROCID NODEID LOCALID NODENAME NODELIST", line)
		}
		var r taskRow
		for i, p := range []*int{&r.ProcID, &r.NodeID, &r.LocalID} {
			if *p, err = strconv.Atoi(f[i]); err != nil {
				t.Fatalf("task line %q: field %d: %v", line, i, err)
			}
		}
		got = append(got, r)
		if prev, ok := nodeOf[r.NodeID]; ok && prev != f[3] {
			t.Errorf("SLURM_NODEID %d ran on both %s and %s", r.NodeID, prev, f[3])
		}
		nodeOf[r.NodeID] = f[3]
		nodeLists[f[4]] = true
	}
	slices.SortFunc(got, func(a, b taskRow) int { return a.ProcID - b.ProcID })
	want := []taskRow{{0, 0, 0}, {1, 0, 1}, {2, 1, 0}, {3, 1, 1}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tasks of a 2x2 job (-want +got):\n%s", d)
	}
	if len(nodeOf) != 2 || nodeOf[0] == nodeOf[1] {
		t.Errorf("tasks ran on nodes %v; want two distinct nodes", nodeOf)
	}
	job := s.ScontrolJob(t, id)
	if d := cmp.Diff(map[string]bool{job["NodeList"]: true}, nodeLists); d != "" {
		t.Errorf("SLURM_JOB_NODELIST in the tasks vs scontrol's NodeList (-want +got):\n%s", d)
	}
	if job["JobState"] != "COMPLETED" {
		t.Errorf("job %s: JobState=%s, want COMPLETED", id, job["JobState"])
	}
}

// The DDP test will run torch.distributed in such steps; Debian's torch is
// visible only to /usr/bin/python3.
func TestSlurmStepImportsTorch(t *testing.T) {
	t.Parallel()
	s := RequireSlurm(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		skip(t, "needs Debian's torch (apt-get install python3-torch, or bash scripts/test-setup.sh): %v", err)
	}
	out := filepath.Join(t.TempDir(), "torch")
	s.Sbatch(t, "--wait", "--partition="+s.Partition, "--nodes=2", "--ntasks-per-node=2", "--output="+out,
		"--wrap", `srun /usr/bin/python3 -c 'import os, torch.distributed as d; print(os.environ["SLURM_PROCID"], d.is_available())'`)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(got)
	if d := cmp.Diff([]string{"0 True", "1 True", "2 True", "3 True"}, got); d != "" {
		t.Errorf("torch.distributed in 4 srun tasks (-want +got):\n%s", d)
	}
}

func TestSlurmPendingBehindFullPartitionCancels(t *testing.T) {
	t.Parallel()
	s := RequireSlurm(t)
	// One job that takes the small partition's only node whole.
	filler := s.Sbatch(t, "--partition="+s.Small, "--exclusive", "--wrap", "sleep 300")
	s.WaitJob(t, filler, "RUNNING", func(f map[string]string) bool { return f["JobState"] == "RUNNING" })

	waiting := s.Sbatch(t, "--partition="+s.Small, "--wrap", "true")
	f := s.WaitJob(t, waiting, "PENDING with a reason", func(f map[string]string) bool {
		return f["JobState"] == "PENDING" && f["Reason"] != "None"
	})
	// Resources, or Priority when another job waits for the node too.
	if r := f["Reason"]; r != "Resources" && r != "Priority" {
		t.Errorf("pending job %s: Reason=%s, want Resources or Priority", waiting, r)
	}
	out, err := s.Command(t.Context(), "squeue", "-h", "-j", waiting, "-o", "%T %r").CombinedOutput()
	if err != nil {
		t.Fatalf("squeue: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "PENDING "+f["Reason"]; got != want {
		t.Errorf("squeue -o '%%T %%r' for job %s = %q, want %q", waiting, got, want)
	}

	// RUNNING is set when the job is allocated, a moment before slurmd
	// has started its script.
	WaitForReason(t, 30*time.Second, "a process of running job "+filler, func() (bool, string) {
		return len(jobProcs(filler)) > 0, "none has SLURM_JOB_ID=" + filler
	})
	for _, id := range []string{waiting, filler} {
		if out, err := s.Command(t.Context(), "scancel", id).CombinedOutput(); err != nil {
			t.Fatalf("scancel %s: %v: %s", id, err, out)
		}
		s.WaitJob(t, id, "CANCELLED", func(f map[string]string) bool { return f["JobState"] == "CANCELLED" })
	}
	// The running job's sleep ends with it (after KillWait at most).
	WaitForReason(t, 30*time.Second, "no process of cancelled job "+filler, func() (bool, string) {
		left := jobProcs(filler)
		return len(left) == 0, fmt.Sprintf("still running: %v", left)
	})
}

// jobProcs lists the processes of Slurm job id: slurmstepd gives each of
// them SLURM_JOB_ID.
func jobProcs(id string) []string {
	var out []string
	for _, p := range Procs() {
		if p.HasEnv("SLURM_JOB_ID=" + id) {
			out = append(out, fmt.Sprintf("%d %s", p.PID, p.CmdLine()))
		}
	}
	return out
}
