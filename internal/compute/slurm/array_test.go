package slurm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// recordingHost is the target's real host, keeping every command line it
// ran: what `ps` on the submitting host could have shown.
type recordingHost struct {
	host
	mu   sync.Mutex
	cmds []string
}

func (h *recordingHost) run(ctx context.Context, cmd string, stdin []byte) ([]byte, error) {
	h.mu.Lock()
	h.cmds = append(h.cmds, cmd)
	h.mu.Unlock()
	return h.host.run(ctx, cmd, stdin)
}

// sbatches counts the submit commands run.
func (h *recordingHost) sbatches() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.cmds {
		if strings.Contains(c, "sbatch --parsable") {
			n++
		}
	}
	return n
}

// recorded returns the target with its host recording.
func recorded(tg *Target) *recordingHost {
	h := &recordingHost{host: tg.host}
	tg.host = h
	return h
}

// launchBatch runs LaunchBatch and cancels every handle it gave when the
// test ends.
func launchBatch(t *testing.T, tg *Target, ls []compute.Launch) []compute.Launched {
	t.Helper()
	res := tg.LaunchBatch(context.Background(), ls)
	if len(res) != len(ls) {
		t.Fatalf("LaunchBatch gave %d results for %d launches", len(res), len(ls))
	}
	for _, r := range res {
		if r.Handle != "" {
			t.Cleanup(func() { _ = tg.Cancel(context.Background(), r.Handle) })
		}
	}
	return res
}

// tokened gives each launch a token of its own, as the workspace does.
func tokened(ls ...compute.Launch) []compute.Launch {
	for i := range ls {
		ls[i].RunToken = fmt.Sprintf("%s-secret-%d", testToken, i)
	}
	return ls
}

// arrayOfHandles returns the array id shared by hs ("" when they do not
// share one) and checks the task indices are 0, 1, ...
func arrayOfHandles(t *testing.T, hs ...compute.Handle) string {
	t.Helper()
	var id string
	for i, h := range hs {
		a, task, ok := strings.Cut(string(h), "_")
		if !ok || task != fmt.Sprint(i) || (id != "" && a != id) {
			return ""
		}
		id = a
	}
	return id
}

// TestBatchOfOneShapeIsOneArray: three launches alike are one sbatch;
// each task runs its own attempt's runner (job, attempt, folder, token,
// variables) with no other task's token, writes its Slurm output into its
// folder, and Inspect, together with a plain job's id, gives each its own
// end and exit code. No token is on a command line or in the script.
func TestBatchOfOneShapeIsOneArray(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	tg := newTarget(t, s, nil)
	rec := recorded(tg)
	var ls []compute.Launch
	for i := range 3 {
		l, _ := job(t, map[string]string{"OWN": fmt.Sprintf("value %d", i), "FAKE_EXIT": fmt.Sprint(i)})
		l.Attempt = i + 1
		ls = append(ls, l)
	}
	ls = tokened(ls...)
	res := launchBatch(t, tg, ls)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("launch %d: %v", i, r.Err)
		}
	}
	hs := []compute.Handle{res[0].Handle, res[1].Handle, res[2].Handle}
	arrayID := arrayOfHandles(t, hs...)
	if arrayID == "" || rec.sbatches() != 1 {
		t.Fatalf("handles %v from %d sbatch commands; want the tasks 0-2 of one array", hs, rec.sbatches())
	}
	if f := s.ScontrolJob(t, string(hs[2])); f["ArrayJobId"] != arrayID || f["ArrayTaskId"] != "2" || f["JobName"] != "ferry-array" {
		t.Errorf("scontrol of %s: ArrayJobId=%s ArrayTaskId=%s JobName=%s", hs[2], f["ArrayJobId"], f["ArrayTaskId"], f["JobName"])
	}
	plain := launch(t, tg, tokened(ls[0])[0])
	for _, h := range append(hs, plain) {
		waitState(t, tg, h, "ended", ended)
	}

	// One Inspect for the tasks, a plain job and ids Slurm does not know.
	m, err := tg.Inspect(context.Background(), append([]compute.Handle{plain, compute.Handle(arrayID + "_7"), "999999977"}, hs...))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 4 {
		t.Errorf("Inspect answered for %d handles, want the 3 tasks and the plain job: %v", len(m), m)
	}
	for i, h := range hs {
		st := m[h]
		if st.Phase != compute.PhaseEnded || st.ExitCode == nil || *st.ExitCode != i || (i == 0) != (st.Outcome == "Completed") {
			t.Errorf("task %d: %+v, want ended with exit code %d", i, st, i)
		}
		l := ls[i]
		args, env := record(t, tg, l, "0")
		wantArgs := []string{"runner", "--api", l.APIURL, "--job", l.Job, "--attempt", fmt.Sprint(l.Attempt),
			"--dir", filepath.Join(tg.attemptDir(l.Job, l.Attempt), "node-0")}
		if strings.Join(args[:len(wantArgs)], " ") != strings.Join(wantArgs, " ") {
			t.Errorf("task %d: runner args %q, want them to start %q", i, args, wantArgs)
		}
		if env["FERRY_RUN_TOKEN"] != l.RunToken || env["OWN"] != fmt.Sprintf("value %d", i) || env["FAKE_MARK"] != l.Job {
			t.Errorf("task %d: own token %v, OWN=%q, FAKE_MARK=%q", i, env["FERRY_RUN_TOKEN"] == l.RunToken, env["OWN"], env["FAKE_MARK"])
		}
		for k := range env {
			if strings.HasPrefix(k, "FERRY_RUN_TOKEN_") {
				t.Errorf("task %d: its runner got %s", i, k)
			}
		}
		dir := tg.attemptDir(l.Job, l.Attempt)
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("task %d: attempt folder %v, %v; want 0700", i, fi, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "slurm-"+string(h)+".out")); err != nil {
			t.Errorf("task %d: its Slurm output in its folder: %v", i, err)
		}
	}
	scripts, _ := filepath.Glob(filepath.Join(tg.c.WorkDir, "arrays", "*.sh"))
	if len(scripts) != 1 {
		t.Fatalf("array scripts %v, want one", scripts)
	}
	script, err := os.ReadFile(scripts[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if strings.Contains(string(script), l.RunToken) {
			t.Error("the array's script holds a run token")
		}
		for _, c := range rec.cmds {
			if strings.Contains(c, l.RunToken) {
				t.Errorf("a command line holds a run token: %s", c)
			}
		}
	}
	// The runner's final report is the attempt's, whichever way it ran
	// (read on this host: the target's own host again, not the recorder).
	tg.host = rec.host
	report := filepath.Join(tg.attemptDir(ls[1].Job, ls[1].Attempt), "node-0", finalReportName)
	if err := os.WriteFile(report, []byte(`{"status":"Failed"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok := tg.FinalReport(ls[1].Job, ls[1].Attempt); !ok || string(got) != `{"status":"Failed"}` {
		t.Errorf("FinalReport of task 1 = %q, %v", got, ok)
	}
}

// TestBatchOfShapesAndBadLaunches: launches of two shapes are two arrays,
// one alike to no other is a job of its own, and a launch that cannot be
// submitted fails alone. The array of two-node jobs runs each task's
// runner on two nodes with the node's rank.
func TestBatchOfShapesAndBadLaunches(t *testing.T) {
	s := testutil.RequireSlurm(t)
	t.Parallel()
	tg := newTarget(t, s, nil)
	rec := recorded(tg)
	one := func() compute.Launch { l, _ := job(t, nil); return l }
	two := func() compute.Launch {
		l, _ := job(t, nil)
		l.Spec.Resources = &spec.Resources{InstanceCount: 2}
		return l
	}
	timed := one()
	timed.Spec.Limits = &spec.Limits{Timeout: 60}
	badName := one()
	badName.Job = "../escape"
	noSpec := one()
	noSpec.Spec = nil
	badEnv := one()
	badEnv.Spec.EnvironmentVariables["not a name"] = "x"
	ls := tokened(one(), two(), badName, one(), timed, noSpec, two(), badEnv, one())
	newline := one()
	newline.RunToken = "two\nlines"
	ls = append(ls, newline)
	res := launchBatch(t, tg, ls)

	for i, want := range map[int]string{2: "job name", 5: "no job spec", 7: "environment_variables.not a name", 9: "line break"} {
		if res[i].Err == nil || !strings.Contains(res[i].Err.Error(), want) || res[i].Handle != "" {
			t.Errorf("bad launch %d: %+v, want an error saying %q", i, res[i], want)
		}
		if strings.Contains(fmt.Sprint(res[i].Err), "lines") {
			t.Errorf("launch %d's error shows its token: %v", i, res[i].Err)
		}
	}
	for _, i := range []int{0, 1, 3, 4, 6, 8} {
		if res[i].Err != nil {
			t.Fatalf("launch %d failed beside bad ones: %v", i, res[i].Err)
		}
	}
	ones := arrayOfHandles(t, res[0].Handle, res[3].Handle, res[8].Handle)
	twos := arrayOfHandles(t, res[1].Handle, res[6].Handle)
	if ones == "" || twos == "" || ones == twos || !jobIDRe().MatchString(string(res[4].Handle)) || rec.sbatches() != 3 {
		t.Fatalf("handles %v from %d sbatch commands; want an array of 3, an array of 2 and a job of its own", res, rec.sbatches())
	}
	if f := s.ScontrolJob(t, string(res[4].Handle)); f["TimeLimit"] != "00:06:00" {
		t.Errorf("the timed job's TimeLimit=%s, want 00:06:00", f["TimeLimit"])
	}
	for _, i := range []int{0, 1, 3, 4, 6, 8} {
		if st := waitState(t, tg, res[i].Handle, "ended", ended); st.Outcome != "Completed" {
			t.Errorf("launch %d (%s): %+v, want Completed", i, res[i].Handle, st)
		}
	}
	for _, i := range []int{1, 6} {
		hosts := map[string]bool{}
		for _, rank := range []string{"0", "1"} {
			_, env := record(t, tg, ls[i], rank)
			if env["FERRY_NODE_RANK"] != rank || env["FERRY_RUN_TOKEN"] != ls[i].RunToken || env["FAKE_MARK"] != ls[i].Job {
				t.Errorf("launch %d node %s: FERRY_NODE_RANK=%q, own token %v, FAKE_MARK=%q", i, rank, env["FERRY_NODE_RANK"],
					env["FERRY_RUN_TOKEN"] == ls[i].RunToken, env["FAKE_MARK"])
			}
			hosts[env["SLURMD_NODENAME"]] = true
			if _, err := os.Stat(filepath.Join(tg.attemptDir(ls[i].Job, ls[i].Attempt), "runner-"+rank+".log")); err != nil {
				t.Errorf("launch %d node %s: its runner's log in the attempt's folder: %v", i, rank, err)
			}
		}
		if len(hosts) != 2 {
			t.Errorf("launch %d's runners ran on %v, want two nodes", i, hosts)
		}
	}
}

// TestArrayTasksPendRunAndCancelAlone runs an array on the one-node small
// partition behind a job that fills it: each task pends with Slurm's
// reason; cancelling one pending task ends it (Canceled, not forgotten)
// and leaves its siblings pending; once the node is free a task runs, and
// its token is on no process's command line; cancelled while running, it
// leaves no process, and the last ends with its exit code. Not parallel:
// it holds the small partition.
func TestArrayTasksPendRunAndCancelAlone(t *testing.T) {
	s := testutil.RequireSlurm(t)
	filler := s.Sbatch(t, "--partition="+s.Small, "--exclusive", "--wrap", "sleep 600")
	s.WaitJob(t, filler, "running", func(f map[string]string) bool { return f["JobState"] == "RUNNING" })

	tg := newTarget(t, s, func(c *spec.Compute) { c.Partition = s.Small })
	l0, name0 := job(t, map[string]string{"FAKE_SLEEP": "600"})
	l1, _ := job(t, nil)
	l2, _ := job(t, map[string]string{"FAKE_EXIT": "4"})
	ls := tokened(l0, l1, l2)
	res := launchBatch(t, tg, ls)
	var hs []compute.Handle
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("launch %d: %v", i, r.Err)
		}
		hs = append(hs, r.Handle)
	}
	if arrayOfHandles(t, hs...) == "" {
		t.Fatalf("handles %v, want one array", hs)
	}
	pending := func(st compute.EngineState) bool {
		return st.Phase == compute.PhasePending && st.Reason != "" && st.Reason != "None"
	}
	for i, h := range hs {
		if st := waitState(t, tg, h, "pending with a reason", pending); st.Reason != "Resources" && st.Reason != "Priority" {
			t.Errorf("task %d: pending reason %q, want Slurm's Resources (or Priority)", i, st.Reason)
		}
	}

	if err := tg.Cancel(context.Background(), hs[1]); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, tg, hs[1], "ended", ended); st.Outcome != "Canceled" {
		t.Errorf("the cancelled pending task: %+v, want Canceled", st)
	}
	m, err := tg.Inspect(context.Background(), hs)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if !pending(m[hs[i]]) {
			t.Errorf("task %d after its sibling's cancel: %+v, want still pending", i, m[hs[i]])
		}
	}
	if err := tg.Cancel(context.Background(), hs[1]); err != nil {
		t.Errorf("a second Cancel of the task = %v; want nil", err)
	}

	if out, err := s.Command(context.Background(), "scancel", filler).CombinedOutput(); err != nil {
		t.Fatalf("scancel the filler: %v: %s", err, out)
	}
	waitState(t, tg, hs[0], "running", func(st compute.EngineState) bool { return st.Phase == compute.PhaseRunning })
	// Running in Slurm's eyes comes before the runner has started.
	deadline := time.Now().Add(time.Minute)
	for !hasProcess(name0) {
		if time.Now().After(deadline) {
			t.Fatal("the fake runner of task 0 never started")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range testutil.Procs() {
		for _, l := range ls {
			if strings.Contains(p.CmdLine(), l.RunToken) {
				t.Errorf("process %d shows a run token on its command line: %s", p.PID, p.CmdLine())
			}
		}
	}
	if err := tg.Cancel(context.Background(), hs[0]); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, tg, hs[0], "ended", ended); st.Outcome != "Canceled" {
		t.Errorf("the cancelled running task: %+v, want Canceled", st)
	}
	noProcess(t, name0)
	if st := waitState(t, tg, hs[2], "ended", ended); st.Reason != "FAILED" || st.ExitCode == nil || *st.ExitCode != 4 {
		t.Errorf("the last task: %+v, want FAILED with exit code 4", st)
	}
}
