package e2e

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/compute/computetest"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// The server is killed with SIGKILL while a local job runs under a runner
// process of its own; the job carries on, and once the server is back it
// completes with every log line and its outputs.
func TestServerKill9WhileJobRuns(t *testing.T) { serverKill9WhileJobRuns(t, "--local-executor=false") }

// The same with the job in the local executor, which outlives the server
// and serves the restarted one.
func TestServerKill9WhileExecutorJobRuns(t *testing.T) {
	serverKill9WhileJobRuns(t, "--local-executor")
}

func serverKill9WhileJobRuns(t *testing.T, args ...string) {
	s := startServer(t, args...)
	gate := filepath.Join(passableDir(t), "gate")
	file := jobFile(t, fmt.Sprintf(`command: |
  for i in $(seq 1 20); do echo "before $i"; done
  while [ ! -e %s ]; do sleep 0.05; done
  for i in $(seq 1 20); do echo "after $i"; done
  echo done > outputs/result.txt
`, gate), nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	if slices.Contains(args, "--local-executor") && len(executorPIDs(s)) != 1 {
		t.Fatalf("the job runs under executors %v, want one", executorPIDs(s))
	}

	s.kill9()
	// While the server is down the job goes on and writes more output.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	s.start()

	r := s.mustFerry("job", "stream", name)
	var want strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&want, "before %d\n", i)
	}
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&want, "after %d\n", i)
	}
	if r.stdout != want.String() {
		t.Fatalf("log after restart:\n%s\nwant:\n%s", r.stdout, want.String())
	}
	j := s.show(name)
	if j.Status != "Completed" {
		t.Fatalf("job = %+v", j)
	}
	dl := t.TempDir()
	s.mustFerry("job", "download", name, "--download-path", dl)
	if got, err := os.ReadFile(filepath.Join(dl, "artifacts", "outputs", "result.txt")); err != nil || string(got) != "done\n" {
		t.Fatalf("output = %q, %v", got, err)
	}
}

// A follower of the log rides out a server restart and ends with the
// whole log.
func TestStreamSurvivesServerRestart(t *testing.T) {
	s := startServer(t)
	gate := filepath.Join(passableDir(t), "gate")
	file := jobFile(t, fmt.Sprintf(`command: |
  echo first
  while [ ! -e %s ]; do sleep 0.05; done
  echo second
`, gate), nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	// The follower is streaming (it printed the first line) before the
	// server dies: a `job stream` started while no server answers says
	// so and exits, which is not what this test is about.
	b := s.ferryBackground("job", "stream", name)
	testutil.WaitFor(t, 60*time.Second, "the stream's first line", func() bool { return strings.Contains(b.out.String(), "first\n") })
	s.kill9()
	time.Sleep(300 * time.Millisecond)
	s.start()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
		if code := b.cmd.ProcessState.ExitCode(); code != 0 || b.out.String() != "first\nsecond\n" {
			t.Fatalf("stream across restart: exit %d\n--- stdout\n%s\n--- stderr\n%s", code, b.out, b.errout)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("stream did not end; stdout so far:\n%s\nstderr:\n%s", b.out, b.errout)
	}
}

// A runner that dies is noticed by its lease and its job is failed, and
// the job's whole tree dies with the runner: the slot is not reused while
// a grandchild of the job still runs.
func TestLostRunnerFailsJob(t *testing.T) { lostRunnerFailsJob(t, "--local-executor=false") }

// The same on the local executor: killing it is killing the runner of
// every job it runs.
func TestLostExecutorFailsJob(t *testing.T) { lostRunnerFailsJob(t, "--local-executor") }

func lostRunnerFailsJob(t *testing.T, args ...string) {
	s := startServer(t, append([]string{"--lease-timeout", "2s"}, args...)...)
	file := jobFile(t, "command: bash -c 'sleep 1000 & sleep 1000' & setsid sleep 1000 & echo forked; sleep 1000\n", nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	if killRunnerOf(s, name) == 0 {
		t.Fatal("runner process not found")
	}
	j := s.waitStatus(name, "Failed")
	mustContain(t, "reason", j.StatusReason, "runner lost")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		left := jobProcs(name)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				var pid int
				fmt.Sscan(p, &pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("processes of job %s outlived its runner:\n%s", name, strings.Join(left, "\n"))
		}
	}
}

// killRunnerOf kills with SIGKILL what runs job name: its `ferry runner`,
// found by its command line, or else the local executor of s (the
// executor proper, not its guard). It says how many it killed.
func killRunnerOf(s *server, name string) int {
	killed := 0
	var executors []int
	for _, p := range testutil.Procs() {
		cmdline := strings.Join(p.Args, " ")
		switch {
		case len(p.Args) > 1 && p.Args[1] == "runner" && strings.Contains(cmdline, name):
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			killed++
		case len(p.Args) > 2 && p.Args[1] == "local-executor" && p.Args[2] == "--serve" && strings.Contains(cmdline, s.work+"/"):
			executors = append(executors, p.PID)
		}
	}
	if killed > 0 {
		return killed
	}
	for _, pid := range executors {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(executors)
}

// jobProcs are the live processes of a job, found by the FERRY_JOB_ID
// that every process of it inherits.
func jobProcs(name string) []string { return computetest.HostJobProcs(name) }

// Ctrl-C stops streaming, not the job.
func TestInterruptStopsStreamingNotTheJob(t *testing.T) {
	s := startServer(t, "--cancel-grace", "1s")
	file := jobFile(t, "command: echo started; sleep 30\n", nil)
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	s.waitStatus(name, "Running")
	cmd := exec.Command(ferryBin, "job", "stream", name)
	cmd.Env = append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+s.home)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && !strings.Contains(out.String(), "started"); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("stream after Ctrl-C: %v\n%s", err, out)
	}
	mustContain(t, "stream output", out.String(), "started", "stopped streaming")
	if st := s.show(name).Status; st != "Running" {
		t.Fatalf("job is %s after Ctrl-C of the stream, want Running", st)
	}
	s.mustFerry("job", "cancel", name)
	j := s.waitStatus(name, "Canceled")
	if j.StatusReason != "canceled by owner" {
		t.Errorf("reason = %q, want who canceled", j.StatusReason)
	}
}

// A job logs metrics while the server is down: the runner takes them,
// keeps them in its queue, and once the server is back every point is
// recorded exactly once, in order, before the job shows as ended.
func TestMetricsSurviveServerOutage(t *testing.T) {
	s := startServer(t)
	gate := filepath.Join(passableDir(t), "gate") // the job's account must see it
	file := jobFile(t, fmt.Sprintf(`code: .
command: python3 log.py %s
`, gate), map[string]string{"log.py": `import json, os, sys, time, urllib.request

def log(step):
    req = urllib.request.Request(
        os.environ["FERRY_API_URL"] + "/v1/jobs/" + os.environ["FERRY_JOB_ID"] + "/metrics",
        data=json.dumps({"name": "loss", "value": 1.0 / step, "step": step}).encode(),
        headers={"Authorization": "Bearer " + os.environ["FERRY_RUN_TOKEN"]}, method="POST")
    urllib.request.urlopen(req, timeout=10).read()  # no retries: a failure fails the job

for step in range(1, 21):
    log(step)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
for step in range(21, 41):
    log(step)
    time.sleep(0.02)
print("logged 40")
`})
	name := strings.TrimSpace(s.mustFerry("job", "create", "-f", file).stdout)
	metrics := func() []apitypes.Metric {
		t.Helper()
		code, body := s.call("GET", "/v1/jobs/"+name+"/metrics", s.token, nil)
		var ms []apitypes.Metric
		if code != 200 || json.Unmarshal(body, &ms) != nil {
			t.Fatalf("GET metrics: %d %s", code, body)
		}
		return ms
	}
	for deadline := time.Now().Add(time.Minute); len(metrics()) < 20; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.work, "runs", name, "1", "std.log"))
			rlog, _ := os.ReadFile(filepath.Join(s.work, "runs", name, "1", "runner.log"))
			t.Fatalf("the first 20 points did not arrive: %v\njob log:\n%s\nrunner log:\n%s", metrics(), log, rlog)
		}
	}

	s.kill9()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The job logs the other 20 points while the server is down.
	queue := filepath.Join(s.work, "runs", name, "1", "metrics.jsonl")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		data, _ := os.ReadFile(queue)
		if strings.Count(string(data), "\n") == 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not queue 40 points in %s:\n%s", queue, data)
		}
	}
	time.Sleep(3 * time.Second) // an outage of some seconds: the runner keeps retrying
	s.start()

	j := s.waitStatus(name, "Completed", "Failed")
	if j.Status != "Completed" {
		t.Fatalf("job = %+v\n%s", j, s.mustFerry("job", "stream", name).stdout)
	}
	var steps []int64
	for _, m := range metrics() {
		steps = append(steps, m.Step)
	}
	var want []int64
	for i := int64(1); i <= 40; i++ {
		want = append(want, i)
	}
	if d := cmp.Diff(want, steps); d != "" {
		t.Fatalf("steps recorded (-want +got):\n%s", d)
	}
}
