package slurm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/sshx"
	"github.com/ferry-ml/ferry/internal/testutil"
	"github.com/google/go-cmp/cmp"
)

// fakeRunner stands in for `ferry runner` on the compute nodes: it
// records its arguments and environment in its --dir, then sleeps
// FAKE_SLEEP seconds and exits FAKE_EXIT, both from the job's
// environment_variables.
const fakeRunner = `#!/bin/sh
dir= prev=
for a in "$@"; do [ "$prev" = --dir ] && dir=$a; prev=$a; done
printf '%s\n' "$@" > "$dir/args"
env > "$dir/env"
[ -n "${FAKE_SLEEP-}" ] && sleep "$FAKE_SLEEP"
exit "${FAKE_EXIT:-0}"
`

const testToken = "run-token-that-must-stay-secret"

// newTarget is a target on the test cluster, submitting on this host,
// that starts fakeRunner; edit changes its compute first.
func newTarget(t *testing.T, s testutil.Slurm, edit func(c *spec.Compute)) *Target {
	t.Helper()
	work := t.TempDir()
	runner := filepath.Join(work, "fake-runner.sh")
	if err := os.WriteFile(runner, []byte(fakeRunner), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &spec.Compute{Name: "hpc", Type: "slurm", Partition: s.Partition, WorkDir: work}
	if edit != nil {
		edit(c)
	}
	tg, err := New(Config{Compute: c, Runner: []string{"/bin/sh", runner}, Env: s.Env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// job is a job whose fake runner gets vars; its name is unique, and
// FAKE_MARK=name marks its processes.
func job(t *testing.T, vars map[string]string) (compute.Launch, string) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t-" + hex.EncodeToString(b[:])
	env := map[string]string{"FAKE_MARK": name}
	for k, v := range vars {
		env[k] = v
	}
	return compute.Launch{Job: name, Attempt: 1, APIURL: "http://127.0.0.1:1", RunToken: testToken,
		Spec: &spec.Job{Command: "x", EnvironmentVariables: env}}, name
}

// launch submits l and cancels it when the test ends.
func launch(t *testing.T, tg *Target, l compute.Launch) compute.Handle {
	t.Helper()
	h, err := tg.Launch(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tg.Cancel(context.Background(), h) })
	return h
}

// waitState polls Inspect until cond holds for h's state and returns it.
// The limit is generous: the cluster is shared with other tests, and a
// time limit takes Slurm up to its next check (30 s) past the minute.
func waitState(t *testing.T, tg *Target, h compute.Handle, what string, cond func(compute.EngineState) bool) compute.EngineState {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		m, err := tg.Inspect(context.Background(), []compute.Handle{h})
		if err != nil {
			t.Fatal(err)
		}
		st, ok := m[h]
		if !ok {
			st = compute.EngineState{Phase: compute.PhaseGone}
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("slurm job %s: not %s; last %+v", h, what, st)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func ended(st compute.EngineState) bool { return st.Phase == compute.PhaseEnded }

// record reads what the fake runner of a node recorded: its arguments
// and its environment as NAME → value.
func record(t *testing.T, tg *Target, l compute.Launch, node string) ([]string, map[string]string) {
	t.Helper()
	return readRecord(t, filepath.Join(tg.attemptDir(l.Job, l.Attempt), "node-"+node))
}

// readRecord reads what the fake runner whose --dir was dir recorded.
func readRecord(t *testing.T, dir string) ([]string, map[string]string) {
	t.Helper()
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return strings.Split(strings.TrimSpace(string(args)), "\n"), env
}

func TestMultiNodeRanks(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	tg := newTarget(t, s, nil)
	l, name := job(t, map[string]string{"SHARED": "it's $shared"})
	l.Spec.Resources = &spec.Resources{InstanceCount: 2}
	l.Spec.Distribution = &spec.Distribution{Type: "pytorch", ProcessCountPerInstance: 2}
	h := launch(t, tg, l)

	st := waitState(t, tg, h, "ended", ended)
	if st.Outcome != "Completed" || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("state %+v, want Completed with exit 0", st)
	}
	f := s.ScontrolJob(t, string(h))
	if f["JobName"] != name || f["NumNodes"] != "2" || f["NumTasks"] != "4" || f["Partition"] != s.Partition {
		t.Errorf("scontrol: JobName=%s NumNodes=%s NumTasks=%s Partition=%s, want %s, 2 nodes × 2 tasks on %s",
			f["JobName"], f["NumNodes"], f["NumTasks"], f["Partition"], name, s.Partition)
	}
	hosts := map[string]bool{}
	var port string
	for _, rank := range []string{"0", "1"} {
		args, env := record(t, tg, l, rank)
		for k, want := range map[string]string{
			"FERRY_NODE_RANK": rank, "SLURM_NODEID": rank, "FERRY_NODE_COUNT": "2",
			// The test cluster's nodes all have NodeAddr 127.0.0.1.
			"MASTER_ADDR": "127.0.0.1", "FERRY_NODE_ADDRESSES": "127.0.0.1,127.0.0.1",
			"FERRY_RUN_TOKEN": testToken, "SHARED": "it's $shared", "FAKE_MARK": name,
		} {
			if env[k] != want {
				t.Errorf("node %s: %s=%q, want %q", rank, k, env[k], want)
			}
		}
		if port == "" {
			port = env["MASTER_PORT"]
		} else if env["MASTER_PORT"] != port || port == "" {
			t.Errorf("node %s: MASTER_PORT=%q, node 0 had %q", rank, env["MASTER_PORT"], port)
		}
		hosts[env["SLURMD_NODENAME"]] = true
		wantArgs := []string{"runner", "--api", l.APIURL, "--job", name, "--attempt", "1",
			"--dir", filepath.Join(tg.attemptDir(l.Job, 1), "node-"+rank)}
		if strings.Join(args[:len(wantArgs)], " ") != strings.Join(wantArgs, " ") {
			t.Errorf("node %s: runner args %q, want them to start %q", rank, args, wantArgs)
		}
	}
	if len(hosts) != 2 {
		t.Errorf("the runners ran on %v, want two different nodes", hosts)
	}
	script, err := os.ReadFile(filepath.Join(tg.attemptDir(l.Job, 1), "job.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(script), testToken) {
		t.Error("the job script holds the run token")
	}
}

func TestPendingBehindAFullPartitionThenCancelled(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	// Fill the small partition's one node, so the next job pends.
	filler := s.Sbatch(t, "--partition="+s.Small, "--exclusive", "--wrap", "sleep 600")
	s.WaitJob(t, filler, "running", func(f map[string]string) bool { return f["JobState"] == "RUNNING" })

	tg := newTarget(t, s, func(c *spec.Compute) { c.Partition = s.Small })
	l, name := job(t, nil)
	h := launch(t, tg, l)
	st := waitState(t, tg, h, "pending with a reason", func(st compute.EngineState) bool {
		return st.Phase == compute.PhasePending && st.Reason != "" && st.Reason != "None"
	})
	if st.Reason != "Resources" && st.Reason != "Priority" {
		t.Errorf("pending reason %q, want Slurm's Resources (or Priority)", st.Reason)
	}

	if err := tg.Cancel(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, tg, h, "ended", ended)
	if st.Outcome != "Canceled" {
		t.Errorf("state after Cancel %+v, want Canceled", st)
	}
	if out, err := s.Command(context.Background(), "squeue", "-h", "-j", string(h)).Output(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("squeue still lists the cancelled job: %q, %v", out, err)
	}
	if err := tg.Cancel(context.Background(), h); err != nil {
		t.Errorf("a second Cancel = %v; it must be idempotent", err)
	}
	noProcess(t, name)
}

func TestCancelWhileRunningLeavesNoProcess(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	tg := newTarget(t, s, nil)
	l, name := job(t, map[string]string{"FAKE_SLEEP": "600"})
	h := launch(t, tg, l)
	waitState(t, tg, h, "running", func(st compute.EngineState) bool { return st.Phase == compute.PhaseRunning })
	// Running in Slurm's eyes comes before the runner has started.
	deadline := time.Now().Add(time.Minute)
	for !hasProcess(name) {
		if time.Now().After(deadline) {
			t.Fatal("the fake runner never started")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := tg.Cancel(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, tg, h, "ended", ended); st.Outcome != "Canceled" {
		t.Errorf("state after Cancel %+v, want Canceled", st)
	}
	noProcess(t, name)
}

func TestTimeLimit(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	// Slurm's limits are whole minutes: one minute is the shortest.
	tg := newTarget(t, s, func(c *spec.Compute) { c.DefaultTimeLimit = 1 })
	l, _ := job(t, map[string]string{"FAKE_SLEEP": "600"})
	h := launch(t, tg, l)
	if f := s.ScontrolJob(t, string(h)); f["TimeLimit"] != "00:01:00" {
		t.Errorf("TimeLimit=%s, want 00:01:00 from default_time_limit", f["TimeLimit"])
	}
	st := waitState(t, tg, h, "ended", ended)
	if st.Reason != "TIMEOUT" || st.Outcome != "Failed" || st.Requeue {
		t.Errorf("state %+v, want Failed by TIMEOUT", st)
	}
}

func TestFailedExitCode(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	tg := newTarget(t, s, nil)
	l, _ := job(t, map[string]string{"FAKE_EXIT": "3"})
	h := launch(t, tg, l)
	st := waitState(t, tg, h, "ended", ended)
	if st.Reason != "FAILED" || st.Outcome != "Failed" || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Errorf("state %+v, want FAILED with exit code 3", st)
	}
	// Among many ids Slurm does not know, it is found the same.
	hs := []compute.Handle{h}
	for i := range 20 {
		hs = append(hs, compute.Handle(strconv.Itoa(999999900+i)))
	}
	m, err := tg.Inspect(context.Background(), hs)
	if err != nil || len(m) != 1 || !cmp.Equal(m[h], st) {
		t.Errorf("Inspect of %d ids = %v, %v; want only %s, %+v", len(hs), m, err, h, st)
	}
	// A runner that gave up on a silent server keeps its final report in
	// its folder, where the server finds it.
	if _, ok := tg.FinalReport(l.Job, 1); ok {
		t.Error("FinalReport found a report the runner never kept")
	}
	report := filepath.Join(tg.attemptDir(l.Job, 1), "node-0", finalReportName)
	if err := os.WriteFile(report, []byte(`{"status":"Failed"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok := tg.FinalReport(l.Job, 1); !ok || string(got) != `{"status":"Failed"}` {
		t.Errorf("FinalReport = %q, %v", got, ok)
	}
	if _, ok := tg.FinalReport("../"+l.Job, 1); ok {
		t.Error("FinalReport read outside work_dir")
	}
	_, env := record(t, tg, l, "0")
	if env["FERRY_RUN_TOKEN"] != testToken || env["FERRY_NODE_RANK"] != "" {
		t.Errorf("a one-node job's runner: FERRY_RUN_TOKEN set %v, FERRY_NODE_RANK=%q (want unset: one machine)",
			env["FERRY_RUN_TOKEN"] == testToken, env["FERRY_NODE_RANK"])
	}
}

func TestInspectUnknownIsGone(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	tg := newTarget(t, s, nil)
	m, err := tg.Inspect(context.Background(), []compute.Handle{"999999998", "999999999", "not-a-job"})
	if err != nil || len(m) != 0 {
		t.Errorf("Inspect(unknown ids) = %v, %v; want no states (Gone)", m, err)
	}
	if err := tg.Cancel(context.Background(), "999999999"); err != nil {
		t.Errorf("Cancel(unknown id) = %v; want nil (idempotent)", err)
	}
	if err := tg.Cancel(context.Background(), "1; rm -rf /"); err == nil {
		t.Error("Cancel took a handle that is not a job id")
	}
}

func TestCheck(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	ctx := context.Background()
	if key, err := newTarget(t, s, nil).Check(ctx); err != nil || key != "" {
		t.Errorf("Check = %q, %v; want no host key and no error", key, err)
	}
	for _, c := range []struct {
		name, field, want string
		edit              func(*spec.Compute)
		env               []string
	}{
		{"wrong partition", "partition", `no partition "nosuch"; sinfo lists debug, small`, func(c *spec.Compute) { c.Partition = "nosuch" }, nil},
		{"work dir", "work_dir", "cannot make or write", func(c *spec.Compute) { c.WorkDir = "/dev/null/ferry" }, nil},
		// sinfo missing: a cluster that is not there takes sinfo a minute.
		{"no sinfo", "address", "sinfo does not answer on the server's host", nil, []string{"PATH=/nonexistent"}},
	} {
		tg := newTarget(t, s, c.edit)
		if c.env != nil {
			tg.host = &localHost{env: c.env}
		}
		_, err := tg.Check(ctx)
		var ce *CheckError
		if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Msg, c.want) {
			t.Errorf("%s: Check = %v; want a CheckError of %s saying %q", c.name, err, c.field, c.want)
		}
	}
}

// hasProcess says whether a process of the job marked name lives.
func hasProcess(name string) bool {
	for _, p := range testutil.Procs() {
		if p.HasEnv("FAKE_MARK=" + name) {
			return true
		}
	}
	return false
}

// noProcess fails the test unless every process of the job marked name
// is gone (Slurm takes a moment after the job ends: KillWait).
func noProcess(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for hasProcess(name) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of job %s outlived its cancel", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOverSSH submits through a login node reached over SSH (a real sshd
// on this host, which is also the cluster's): Check learns the host key
// to pin and copies the binary into work_dir/bin, a job runs through the
// copy, the run token reaches the runner through sbatch's environment,
// and a changed host key, a wrong port and a missing host key are refused
// with the field named.
func TestOverSSH(t *testing.T) {
	s := testutil.RequireSlurm(t)
	testutil.RequireSSHD(t)
	t.Parallel()
	sshd := testutil.StartSSHD(t)
	ctx := context.Background()
	work := t.TempDir()
	exe := filepath.Join(t.TempDir(), "ferry")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	login := func(hostKey string, port int) *spec.Compute {
		return &spec.Compute{Name: "hpc", Type: "slurm", Partition: s.Partition, WorkDir: work,
			Address: sshd.Address, HostKey: hostKey,
			SSHSettings: &spec.SSHSettings{AdminUsername: sshd.User, SSHPrivateKey: string(sshd.ClientKey), SSHPort: port}}
	}
	newSSH := func(c *spec.Compute, runner []string) *Target {
		tg, err := New(Config{Compute: c, Exe: exe, Runner: runner, Env: s.Env})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tg.Close() })
		return tg
	}

	tofu := newSSH(login(spec.HostKeyTOFU, sshd.Port), nil)
	key, err := tofu.Check(ctx)
	if err != nil || key != sshd.HostKeyLine {
		t.Fatalf("Check = %q, %v; want the host key %q to pin", key, err, sshd.HostKeyLine)
	}
	sum, err := fileDigest(exe)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(work, "bin", "ferry-"+sum[:16])); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the binary's copy on the login node: %v, %v", fi, err)
	}
	// The target that learnt the key keeps its connection and launches;
	// a new one must be given the key to pin.
	launch(t, tofu, compute.Launch{Job: "unpinned", Attempt: 1, Spec: &spec.Job{Command: "x"}})
	if _, err := newSSH(login(spec.HostKeyTOFU, sshd.Port), nil).Launch(ctx, compute.Launch{Job: "x", Attempt: 1, Spec: &spec.Job{Command: "x"}}); err == nil ||
		!strings.Contains(err.Error(), "host_key") {
		t.Errorf("Launch with a host key never recorded = %v; want it refused naming host_key", err)
	}

	pinned := newSSH(login(key, sshd.Port), nil)
	l, _ := job(t, nil)
	h := launch(t, pinned, l)
	if st := waitState(t, pinned, h, "ended", ended); st.Outcome != "Completed" {
		t.Fatalf("a job through the copied binary: %+v, want Completed", st)
	}

	runner := filepath.Join(work, "fake-runner.sh")
	if err := os.WriteFile(runner, []byte(fakeRunner), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := newSSH(login(key, sshd.Port), []string{"/bin/sh", runner})
	l, name := job(t, nil)
	h = launch(t, fake, l)
	if st := waitState(t, fake, h, "ended", ended); st.Outcome != "Completed" {
		t.Fatalf("state %+v, want Completed", st)
	}
	if _, env := record(t, fake, l, "0"); env["FERRY_RUN_TOKEN"] != testToken || env["FAKE_MARK"] != name {
		t.Errorf("the runner's environment over SSH: token passed %v, FAKE_MARK=%q", env["FERRY_RUN_TOKEN"] == testToken, env["FAKE_MARK"])
	}
	// An array over SSH: the tokens, one a line of stdin, reach each
	// task's runner through the login shell's read loop.
	l0, _ := job(t, nil)
	l1, _ := job(t, nil)
	ls := tokened(l0, l1)
	res := launchBatch(t, fake, ls)
	for i, r := range res {
		if r.Err != nil || !strings.HasSuffix(string(r.Handle), "_"+strconv.Itoa(i)) {
			t.Fatalf("LaunchBatch over SSH: launch %d: %+v, want task %d of an array", i, r, i)
		}
		if st := waitState(t, fake, r.Handle, "ended", ended); st.Outcome != "Completed" {
			t.Fatalf("task %d over SSH: %+v, want Completed", i, st)
		}
		if _, env := record(t, fake, ls[i], "0"); env["FERRY_RUN_TOKEN"] != ls[i].RunToken {
			t.Errorf("task %d over SSH: the runner did not get its own token", i)
		}
	}
	for _, tok := range []string{testToken, ls[0].RunToken, ls[1].RunToken} {
		if strings.Contains(sshd.Log(), tok) {
			t.Error("a run token is in sshd's log")
		}
	}

	for _, c := range []struct {
		name, field string
		compute     *spec.Compute
	}{
		{"no host key", "host_key", login("", sshd.Port)},
		{"closed port", "address", login(key, closedPort(t))},
	} {
		_, err := newSSH(c.compute, nil).Check(ctx)
		var ce *CheckError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: Check = %v; want a CheckError of %s", c.name, err, c.field)
		}
	}
	sshd.ChangeHostKey(t)
	_, err = newSSH(login(key, sshd.Port), nil).Check(ctx)
	var ce *CheckError
	if !errors.As(err, &ce) || ce.Field != "host_key" || !errors.Is(err, sshx.ErrHostKeyMismatch) {
		t.Errorf("Check after the host key changed = %v; want a CheckError of host_key wrapping ErrHostKeyMismatch", err)
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
