package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// fastClock runs the agent's time a hundred times faster than the wall
// clock: a heartbeat every second is one every 10ms.
type fastClock struct{ start time.Time }

const speedup = 100

func (c fastClock) Now() time.Time                         { return c.start.Add(time.Since(c.start) * speedup) }
func (c fastClock) After(d time.Duration) <-chan time.Time { return time.After(d / speedup) }

// fakeRunner stands in for `ferry runner`: it records its arguments,
// environment and pid in its --dir, then runs until a file named exit
// appears there (exit 0) or it gets SIGTERM (writes terminated, exits 143).
// It answers a file named ping by renaming it to pong.
const fakeRunner = `#!/bin/sh
dir=""
prev=""
for a in "$@"; do
	[ "$prev" = "--dir" ] && dir=$a
	prev=$a
done
[ -n "$dir" ] || exit 64
printf '%s\n' "$@" > "$dir/args"
env > "$dir/env"
echo start >> "$dir/starts"
# The trap comes before the pid: a test that has read the pid may have
# the agent signal the runner at once.
trap 'echo term > "$dir/terminated"; exit 143' TERM
echo $$ > "$dir/pid.tmp" && mv "$dir/pid.tmp" "$dir/pid"
while [ -d "$dir" ] && [ ! -e "$dir/exit" ]; do
	[ -e "$dir/ping" ] && mv "$dir/ping" "$dir/pong"
	sleep 0.01
done
exit 0
`

// testAgent is an agent run by a test, with a fake runner.
type testAgent struct {
	t      *testing.T
	dir    string
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// startAgent runs an agent against fs in dir; edit changes its Config.
func startAgent(t *testing.T, fs *fakeServer, dir string, edit func(*Config)) *testAgent {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "fake-runner")
	if err := os.WriteFile(exe, []byte(fakeRunner), 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg := Config{
		Server: fs.URL, Name: "node-a", JoinToken: fs.joinToken, Dir: dir, Exe: exe,
		Env:   append(os.Environ(), "FERRY_JOIN_TOKEN="+fs.joinToken),
		Clock: fastClock{start: time.Now()},
		Log:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{t: t, dir: dir, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-ta.done
		assertNoSecrets(t, "the agent's log", logs.String(), fs.joinToken, fs.nodeToken, "run-secret")
	})
	return ta
}

// wait waits for Run to return.
func (ta *testAgent) wait() error {
	ta.t.Helper()
	select {
	case err := <-ta.done:
		ta.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		ta.t.Fatal("timed out waiting for the agent to exit")
		return nil
	}
}

// stop stops the agent as SIGTERM does and returns what Run returned.
func (ta *testAgent) stop() error {
	ta.t.Helper()
	ta.cancel()
	return ta.wait()
}

func (ta *testAgent) exited() bool {
	select {
	case err := <-ta.done:
		ta.done <- err
		return true
	default:
		return false
	}
}

// runDir is where the agent runs an attempt.
func runDir(nodeDir, job string, attempt int) string {
	return filepath.Join(nodeDir, "runs", job, strconv.Itoa(attempt))
}

// runnerPID waits for the fake runner of an attempt to be up and returns
// its pid. It makes sure the runner is killed at the end of the test.
func runnerPID(t *testing.T, rd string) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, 30*time.Second, "the runner in "+rd, func() bool {
		data, err := os.ReadFile(filepath.Join(rd, "pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	t.Cleanup(func() { killAndWait(t, pid) })
	return pid
}

// killAndWait kills a process and waits until it is gone, so no runner
// outlives its test or writes into a directory being removed.
func killAndWait(t *testing.T, pid int) {
	t.Helper()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	testutil.WaitFor(t, 30*time.Second, "process "+strconv.Itoa(pid)+" to end", func() bool {
		st, _, err := procStat(pid)
		return err != nil || st == 'Z' || st == 'X'
	})
}

// assertNotSignaled checks that the fake runner in rd has had no SIGTERM
// so far. A runner runs its trap before it looks for a ping again, so one
// that had a signal before the ping never answers it.
func assertNotSignaled(t *testing.T, rd string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(rd, "ping"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(rd, name))
		return err == nil
	}
	testutil.WaitFor(t, 30*time.Second, "the runner to answer", func() bool { return exists("pong") || exists("terminated") })
	if exists("terminated") {
		t.Errorf("the runner in %s got SIGTERM", rd)
	}
	os.Remove(filepath.Join(rd, "pong"))
}

func running(pid int) bool {
	st, _, err := procStat(pid)
	return err == nil && st != 'Z' && st != 'X'
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(data), "\n"), "\n")
}

// envOf reads the environment a fake runner recorded.
func envOf(t *testing.T, rd string) map[string][]string {
	t.Helper()
	env := map[string][]string{}
	for _, kv := range readLines(t, filepath.Join(rd, "env")) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = append(env[k], v)
	}
	return env
}

func readState(t *testing.T, dir string) (state, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st, string(data)
}

func runningIs(want ...nodeproto.Running) func(nodeproto.Heartbeat) bool {
	return func(hb nodeproto.Heartbeat) bool {
		return cmp.Equal(hb.Running, append([]nodeproto.Running{}, want...))
	}
}

func TestAgentRunsAssignments(t *testing.T) {
	fakeNvidiaSMI(t, fourGPUs, 0)
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	ta := startAgent(t, fs, dir, func(c *Config) {
		// The process provider gave this node GPUs 1 and 2 of the host.
		c.Env = append(c.Env, "CUDA_VISIBLE_DEVICES=1,2", "FERRY_RUN_TOKEN=run-secret-stale")
		c.EnvCacheSize = "50g"
		c.CancelGrace = 7 * time.Second
	})

	testutil.WaitFor(t, 30*time.Second, "the join", func() bool { return get(fs, func(fs *fakeServer) int { return len(fs.joins) }) == 1 })
	join := get(fs, func(fs *fakeServer) nodeproto.JoinRequest { return fs.joins[0] })
	if join.Name != "node-a" || join.Facts.CPUs < 1 || join.Facts.MemoryBytes <= 0 {
		t.Errorf("join request = %+v", join)
	}
	if d := cmp.Diff([]nodeproto.GPU{
		{Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemoryMB: 81920},
		{Index: 2, Name: "NVIDIA H100 80GB HBM3", MemoryMB: 81559},
	}, join.Facts.GPUs); d != "" {
		t.Errorf("the node's GPUs are the ones CUDA_VISIBLE_DEVICES names (-want +got):\n%s", d)
	}
	fs.beatAfter(0, "a heartbeat with nothing running", runningIs())

	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{
			Job: "train", Attempt: 1, Rank: 1, APIURL: "http://api.example:8580", RunToken: "run-secret-1", GPUs: []int{2},
			Env: map[string]string{"MASTER_ADDR": "10.0.0.5", "WORLD_SIZE": "2", "NODE_RANK": "1",
				"FERRY_RUN_TOKEN": "evil", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "BAD=NAME": "x"},
		}, {
			Job: "cpu-job", Attempt: 3, RunToken: "run-secret-2", APIURL: "http://api.example:8580",
		}}
	})
	trainDir, cpuDir := runDir(dir, "train", 1), runDir(dir, "cpu-job", 3)
	trainPID, cpuPID := runnerPID(t, trainDir), runnerPID(t, cpuDir)
	fs.beatAfter(0, "a heartbeat with both attempts", runningIs(
		nodeproto.Running{Job: "cpu-job", Attempt: 3}, nodeproto.Running{Job: "train", Attempt: 1, Rank: 1}))

	wantArgs := []string{"runner", "--api", "http://api.example:8580", "--job", "train", "--attempt", "1",
		"--dir", trainDir, "--cache", filepath.Join(dir, "cache"), "--env-cache", filepath.Join(dir, "env-cache"),
		"--env-cache-size", "50g", "--cancel-grace", "7s"}
	if d := cmp.Diff(wantArgs, readLines(t, filepath.Join(trainDir, "args"))); d != "" {
		t.Errorf("runner arguments (-want +got):\n%s", d)
	}
	env := envOf(t, trainDir)
	for k, want := range map[string][]string{
		"FERRY_RUN_TOKEN":      {"run-secret-1"},
		"CUDA_VISIBLE_DEVICES": {"2"},
		"CUDA_DEVICE_ORDER":    {"PCI_BUS_ID"},
		"MASTER_ADDR":          {"10.0.0.5"},
		"WORLD_SIZE":           {"2"},
		"NODE_RANK":            {"1"},
		"PATH":                 {os.Getenv("PATH")},
		"FERRY_JOIN_TOKEN":     nil,
		"BAD":                  nil,
	} {
		if d := cmp.Diff(want, env[k]); d != "" {
			t.Errorf("runner's %s (-want +got):\n%s", k, d)
		}
	}
	cpuEnv := envOf(t, cpuDir)
	if d := cmp.Diff([]string{""}, cpuEnv["CUDA_VISIBLE_DEVICES"]); d != "" {
		t.Errorf("an attempt without GPUs on a GPU node must see none (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"run-secret-2"}, cpuEnv["FERRY_RUN_TOKEN"]); d != "" {
		t.Errorf("second runner's run token (-want +got):\n%s", d)
	}
	for _, rd := range []string{trainDir, cpuDir} {
		args, _ := os.ReadFile(filepath.Join(rd, "args"))
		assertNoSecrets(t, "a runner's arguments", string(args), "run-secret", fs.joinToken, fs.nodeToken)
		envText, _ := os.ReadFile(filepath.Join(rd, "env"))
		assertNoSecrets(t, "a runner's environment", string(envText), fs.joinToken, fs.nodeToken, "run-secret-stale", "evil")
	}

	// The server keeps listing both; each runs once.
	polls := get(fs, func(fs *fakeServer) int { return fs.polls })
	testutil.WaitFor(t, 30*time.Second, "more polls", func() bool { return get(fs, func(fs *fakeServer) int { return fs.polls }) >= polls+5 })
	for _, rd := range []string{trainDir, cpuDir} {
		if n := len(readLines(t, filepath.Join(rd, "starts"))); n != 1 {
			t.Errorf("%s started %d times, want once", rd, n)
		}
	}

	// A runner that ends is reaped, leaves the heartbeat and the state
	// file, and is not started again though the server still lists it.
	if err := os.WriteFile(filepath.Join(cpuDir, "exit"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n := fs.numBeats()
	fs.beatAfter(n, "a heartbeat without the ended attempt", runningIs(nodeproto.Running{Job: "train", Attempt: 1, Rank: 1}))
	testutil.WaitFor(t, 30*time.Second, "the ended runner to be reaped", func() bool { return !running(cpuPID) })
	polls = get(fs, func(fs *fakeServer) int { return fs.polls })
	testutil.WaitFor(t, 30*time.Second, "more polls", func() bool { return get(fs, func(fs *fakeServer) int { return fs.polls }) >= polls+5 })
	if n := len(readLines(t, filepath.Join(cpuDir, "starts"))); n != 1 {
		t.Errorf("an ended attempt was started %d times, want once", n)
	}
	st, raw := readState(t, dir)
	if len(st.Runners) != 1 || st.Runners[0].PID != trainPID || st.Runners[0].Job != "train" || st.Runners[0].StartTime == 0 {
		t.Errorf("state file = %s, want the train runner alone", raw)
	}
	assertNoSecrets(t, "the state file", raw, fs.joinToken, fs.nodeToken, "run-secret")

	// SIGTERM to the agent leaves the runner alone.
	if err := ta.stop(); err != nil {
		t.Errorf("agent stopped with %v, want nil", err)
	}
	assertNotSignaled(t, trainDir)
}

func TestStopFromHeartbeat(t *testing.T) {
	fakeNvidiaSMI(t, "", 0) // a node without GPUs, even on a host with some
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	startAgent(t, fs, dir, nil)
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 2, RunToken: "run-secret-1"}}
	})
	rd := runDir(dir, "j", 2)
	pid := runnerPID(t, rd)
	env := envOf(t, rd)
	if _, ok := env["CUDA_VISIBLE_DEVICES"]; ok && os.Getenv("CUDA_VISIBLE_DEVICES") == "" {
		t.Error("a node without GPUs set CUDA_VISIBLE_DEVICES")
	}
	if d := cmp.Diff([]string{"runner", "--api", fs.URL}, readLines(t, filepath.Join(rd, "args"))[:3]); d != "" {
		t.Errorf("without an api_url, runners get the server's URL (-want +got):\n%s", d)
	}
	fs.beatAfter(0, "the attempt in a heartbeat", runningIs(nodeproto.Running{Job: "j", Attempt: 2}))

	fs.set(func(fs *fakeServer) { fs.reply.Stop = []nodeproto.Running{{Job: "j", Attempt: 2}} })
	testutil.WaitFor(t, 30*time.Second, "the runner to get SIGTERM", func() bool {
		_, err := os.Stat(filepath.Join(rd, "terminated"))
		return err == nil
	})
	n := fs.numBeats()
	fs.beatAfter(n, "a heartbeat without the stopped attempt", runningIs())
	testutil.WaitFor(t, 30*time.Second, "the stopped runner to be reaped", func() bool { return !running(pid) })
	if n := len(readLines(t, filepath.Join(rd, "starts"))); n != 1 {
		t.Errorf("a stopped attempt still listed by the server was started %d times, want once", n)
	}
}

func TestDrain(t *testing.T) {
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	ta := startAgent(t, fs, dir, nil)
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "long", Attempt: 1, RunToken: "run-secret-1"}}
	})
	rd := runDir(dir, "long", 1)
	runnerPID(t, rd)

	fs.set(func(fs *fakeServer) { fs.reply.Drain = true })
	// The agent sends a heartbeat after it has applied the last reply: two
	// more heartbeats, and it has heard of the drain.
	n := fs.numBeats()
	testutil.WaitFor(t, 30*time.Second, "heartbeats after the drain", func() bool { return fs.numBeats() >= n+2 })
	fs.set(func(fs *fakeServer) {
		fs.assign = append(fs.assign, nodeproto.Assignment{Job: "late", Attempt: 1, RunToken: "run-secret-2"})
	})
	n = fs.numBeats()
	testutil.WaitFor(t, 30*time.Second, "heartbeats after the late assignment", func() bool { return fs.numBeats() >= n+5 })
	if ta.exited() {
		t.Fatal("the agent exited while a runner was running")
	}
	if _, err := os.Stat(runDir(dir, "late", 1)); err == nil {
		t.Error("a draining node started new work")
	}
	if err := os.WriteFile(filepath.Join(rd, "exit"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ta.wait(); err != nil {
		t.Errorf("drained agent exited with %v, want nil", err)
	}
	if st, raw := readState(t, dir); len(st.Runners) != 0 {
		t.Errorf("state after the drain = %s, want no runners", raw)
	}
}

func TestDrainWithNothingRunning(t *testing.T) {
	fs := newFakeServer(t, nil)
	fs.set(func(fs *fakeServer) { fs.reply.Drain = true })
	ta := startAgent(t, fs, t.TempDir(), nil)
	if err := ta.wait(); err != nil {
		t.Errorf("agent exited with %v, want nil", err)
	}
}

func TestServerOutage(t *testing.T) {
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	ta := startAgent(t, fs, dir, nil)
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, RunToken: "run-secret-1"}}
	})
	rd := runDir(dir, "j", 1)
	pid := runnerPID(t, rd)
	fs.beatAfter(0, "the attempt in a heartbeat", runningIs(nodeproto.Running{Job: "j", Attempt: 1}))

	fs.set(func(fs *fakeServer) { fs.down = true })
	testutil.WaitFor(t, 30*time.Second, "retries during the outage", func() bool {
		return get(fs, func(fs *fakeServer) int { return fs.refused }) >= 20
	})
	if ta.exited() {
		t.Fatalf("the agent exited during an outage: %v", ta.wait())
	}
	if !running(pid) {
		t.Error("the runner stopped during the outage")
	}
	n := fs.numBeats()
	fs.set(func(fs *fakeServer) { fs.down = false })
	fs.beatAfter(n, "a heartbeat after the outage that reports the runner", runningIs(nodeproto.Running{Job: "j", Attempt: 1}))
	assertNotSignaled(t, rd)
	if n := len(readLines(t, filepath.Join(rd, "starts"))); n != 1 {
		t.Errorf("the runner was started %d times, want once", n)
	}
	testutil.WaitFor(t, 30*time.Second, "the end of the outage in the log", func() bool {
		return strings.Contains(ta.logs.String(), "server reachable again")
	})
	// One warning per kind of call and outage, not one per retry.
	if n := strings.Count(ta.logs.String(), "level=WARN msg=\"cannot reach the server"); n != 2 {
		t.Errorf("%d outage warnings, want 2 (heartbeat and poll); log:\n%s", n, ta.logs.String())
	}
}

// An agent whose server stays away past GiveUpAfter exits with
// ErrServerGone, and leaves its runners running: they give up on their own.
func TestAgentGivesUpOnSilentServer(t *testing.T) {
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	ta := startAgent(t, fs, dir, func(c *Config) { c.GiveUpAfter = time.Minute })
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, RunToken: "run-secret-1"}}
	})
	pid := runnerPID(t, runDir(dir, "j", 1))
	fs.set(func(fs *fakeServer) { fs.down = true })
	if err := ta.wait(); !errors.Is(err, ErrServerGone) {
		t.Fatalf("Run = %v, want ErrServerGone", err)
	}
	if !running(pid) {
		t.Error("the runner stopped with the agent")
	}

	// An agent that never reached its server gives up too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ta = startAgent(t, &fakeServer{URL: "http://" + addr, joinToken: "join-secret-7f3a", nodeToken: "node-secret-91c2"},
		t.TempDir(), func(c *Config) { c.GiveUpAfter = time.Minute })
	if err := ta.wait(); !errors.Is(err, ErrServerGone) {
		t.Fatalf("Run without a server = %v, want ErrServerGone", err)
	}
}

func TestJoinWaitsForTheServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ta := startAgent(t, &fakeServer{URL: "http://" + addr, joinToken: "join-secret-7f3a", nodeToken: "node-secret-91c2"},
		t.TempDir(), nil)
	testutil.WaitFor(t, 30*time.Second, "the agent to find the server unreachable", func() bool {
		return strings.Contains(ta.logs.String(), "cannot reach the server")
	})
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	fs := newFakeServer(t, ln)
	fs.set(func(fs *fakeServer) { fs.down = true })
	testutil.WaitFor(t, 30*time.Second, "joins refused with 503", func() bool { return get(fs, func(fs *fakeServer) int { return fs.refused }) >= 3 })
	fs.set(func(fs *fakeServer) { fs.down = false })
	fs.beatAfter(0, "a heartbeat", runningIs())
	if n := get(fs, func(fs *fakeServer) int { return len(fs.joins) }); n != 1 {
		t.Errorf("%d joins, want 1", n)
	}
}

func TestJoinRefused(t *testing.T) {
	fs := newFakeServer(t, nil)
	fs.set(func(fs *fakeServer) { fs.joinStatus = 403 })
	ta := startAgent(t, fs, t.TempDir(), nil)
	err := ta.wait()
	if !errors.Is(err, ErrJoinRefused) {
		t.Fatalf("Run = %v, want ErrJoinRefused", err)
	}
	for _, want := range []string{"403 Forbidden", "join token revoked", "name: taken by another node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	assertNoSecrets(t, "the error", err.Error(), fs.joinToken)
	if n := get(fs, func(fs *fakeServer) int { return len(fs.joins) }); n != 1 {
		t.Errorf("%d joins after a 403, want 1", n)
	}
}

func TestWrongJoinToken(t *testing.T) {
	fs := newFakeServer(t, nil)
	ta := startAgent(t, fs, t.TempDir(), func(c *Config) { c.JoinToken = "not-the-token" })
	if err := ta.wait(); !errors.Is(err, ErrJoinRefused) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Run = %v, want ErrJoinRefused with the 401", err)
	}
}

func TestForgottenNode(t *testing.T) {
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	ta := startAgent(t, fs, dir, nil)
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, RunToken: "run-secret-1"}}
	})
	rd := runDir(dir, "j", 1)
	runnerPID(t, rd)
	fs.beatAfter(0, "the attempt in a heartbeat", runningIs(nodeproto.Running{Job: "j", Attempt: 1}))

	fs.set(func(fs *fakeServer) { fs.forget = true })
	err := ta.wait()
	if !errors.Is(err, ErrForgotten) || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "node token revoked") {
		t.Errorf("Run = %v, want ErrForgotten with the server's 401", err)
	}
	assertNotSignaled(t, rd)
}

func TestRestartAdoptsLiveRunners(t *testing.T) {
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	first := startAgent(t, fs, dir, nil)
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, RunToken: "run-secret-1"}}
	})
	rd := runDir(dir, "j", 1)
	pid := runnerPID(t, rd)
	fs.beatAfter(0, "the attempt in a heartbeat", runningIs(nodeproto.Running{Job: "j", Attempt: 1}))
	if err := first.stop(); err != nil {
		t.Fatalf("first agent: %v", err)
	}

	// Two entries that must not be taken for runners: a process that has
	// ended, and a live process (this test) whose start time is not the
	// recorded one, as when a pid is recycled.
	dead := exec.Command("true")
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	_, deadStart, err := procStat(dead.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()
	_, selfStart, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	st, _ := readState(t, dir)
	if len(st.Runners) != 1 || st.Runners[0].PID != pid {
		t.Fatalf("state left by the first agent: %+v", st.Runners)
	}
	st.Runners = append(st.Runners,
		&proc{Job: "gone", Attempt: 1, PID: dead.Process.Pid, StartTime: deadStart},
		&proc{Job: "recycled", Attempt: 4, PID: os.Getpid(), StartTime: selfStart + 1})
	data, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(dir, StateFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	fs.set(func(fs *fakeServer) {
		// The server lists the live attempt and one that ended while the
		// agent was away: neither is started (again).
		fs.assign = append(fs.assign, nodeproto.Assignment{Job: "gone", Attempt: 1, RunToken: "run-secret-2"})
	})

	n := fs.numBeats()
	second := startAgent(t, fs, dir, nil)
	fs.beatAfter(n, "the adopted attempt in the second agent's heartbeat", runningIs(nodeproto.Running{Job: "j", Attempt: 1}))
	polls := get(fs, func(fs *fakeServer) int { return fs.polls })
	testutil.WaitFor(t, 30*time.Second, "more polls", func() bool { return get(fs, func(fs *fakeServer) int { return fs.polls }) >= polls+5 })
	if n := len(readLines(t, filepath.Join(rd, "starts"))); n != 1 {
		t.Errorf("the adopted attempt was started %d times, want once", n)
	}
	if _, err := os.Stat(runDir(dir, "gone", 1)); err == nil {
		t.Error("an attempt that ended while the agent was away was run again")
	}
	st, raw := readState(t, dir)
	if len(st.Runners) != 1 || st.Runners[0].PID != pid {
		t.Errorf("state after adoption = %s, want the live runner alone", raw)
	}

	// A Stop reaches an adopted runner too, and its end is noticed
	// though it is not the agent's child.
	fs.set(func(fs *fakeServer) { fs.reply.Stop = []nodeproto.Running{{Job: "j", Attempt: 1}} })
	testutil.WaitFor(t, 30*time.Second, "the adopted runner to get SIGTERM", func() bool {
		_, err := os.Stat(filepath.Join(rd, "terminated"))
		return err == nil
	})
	n = fs.numBeats()
	fs.beatAfter(n, "a heartbeat without the adopted runner", runningIs())
	if err := second.stop(); err != nil {
		t.Errorf("second agent: %v", err)
	}
	if st, raw := readState(t, dir); len(st.Runners) != 0 {
		t.Errorf("state = %s, want no runners", raw)
	}
}

func TestOneAgentPerDirectory(t *testing.T) {
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	startAgent(t, fs, dir, nil)
	fs.beatAfter(0, "the first agent's heartbeat", runningIs())
	err := Run(context.Background(), Config{Server: fs.URL, JoinToken: "x", Dir: dir, Exe: "/bin/false"})
	if err == nil || !strings.Contains(err.Error(), "another agent") {
		t.Errorf("second agent on the same directory: %v", err)
	}
}

func TestRefusesUnsafeJobNames(t *testing.T) {
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	ta := startAgent(t, fs, dir, nil)
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "../escape", Attempt: 1, RunToken: "run-secret-1"},
			{Job: "..", Attempt: 1, RunToken: "run-secret-1"}}
	})
	testutil.WaitFor(t, 30*time.Second, "the refusals in the log", func() bool {
		return strings.Count(ta.logs.String(), "cannot be a directory name") == 2
	})
	if entries, _ := os.ReadDir(filepath.Join(dir, "runs")); len(entries) != 0 {
		t.Errorf("runs/ holds %v", entries)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Error("a job name led out of the node's directory")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Server: "ftp://x", JoinToken: "t", Dir: "d"}, "server URL"},
		{Config{Server: "http://x", Dir: "d"}, "FERRY_JOIN_TOKEN"},
		{Config{Server: "http://x", JoinToken: "t"}, "--dir"},
	} {
		if err := Run(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

func TestRunnerEnvReservedNames(t *testing.T) {
	a := &agent{log: slog.New(slog.DiscardHandler), env: []string{"PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1", "CUDA_DEVICE_ORDER=FASTEST_FIRST"}}
	env := a.runnerEnv(nodeproto.Assignment{RunToken: "rt", Env: map[string]string{"FERRY_API_URL": "x", "A": "b=c"}})
	want := []string{"CUDA_VISIBLE_DEVICES=0,1", "CUDA_DEVICE_ORDER=FASTEST_FIRST", "PATH=/bin", "A=b=c", "FERRY_RUN_TOKEN=rt"}
	if d := cmp.Diff(want, env, cmpSorted); d != "" {
		t.Errorf("a node without GPUs passes its own CUDA variables on (-want +got):\n%s", d)
	}
	a.hasGPUs = true
	env = a.runnerEnv(nodeproto.Assignment{RunToken: "rt", GPUs: []int{3, 1}})
	want = []string{"CUDA_VISIBLE_DEVICES=3,1", "CUDA_DEVICE_ORDER=FASTEST_FIRST", "PATH=/bin", "FERRY_RUN_TOKEN=rt"}
	if d := cmp.Diff(want, env, cmpSorted); d != "" {
		t.Errorf("runner env (-want +got):\n%s", d)
	}
}

var cmpSorted = cmpopts.SortSlices(func(x, y string) bool { return x < y })

// An agent given the file its server records its URL in follows the
// server to another address: once the old one stops answering, it reads
// the file and heartbeats at the new one, with the runner it started
// before, which it had given the same file. The switch is logged once.
func TestAgentFollowsServerFile(t *testing.T) {
	a := newFakeServer(t, nil)
	file := filepath.Join(t.TempDir(), "server.url")
	if err := os.WriteFile(file, []byte(a.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ta := startAgent(t, a, dir, func(c *Config) { c.ServerFile = file })
	running := nodeproto.Running{Job: "j", Attempt: 1}
	a.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, RunToken: "run-secret-1"}}
	})
	rd := runDir(dir, "j", 1)
	runnerPID(t, rd)
	a.beatAfter(0, "the attempt in a heartbeat", runningIs(running))
	args := strings.Join(readLines(t, filepath.Join(rd, "args")), " ") + " "
	if !strings.Contains(args, "--api "+a.URL+" ") || !strings.Contains(args, "--api-file "+file+" ") {
		t.Errorf("the runner's arguments %q do not name the server's URL and its file", args)
	}

	// The server comes back elsewhere, as the same workspace: it knows
	// the node and its attempt.
	b := newFakeServer(t, nil)
	b.set(func(fs *fakeServer) {
		fs.joins = []nodeproto.JoinRequest{{Name: "node-a"}}
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, RunToken: "run-secret-1"}}
	})
	if err := os.WriteFile(file, []byte(b.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.srv.Listener.Close()
	a.srv.CloseClientConnections()
	b.beatAfter(0, "a heartbeat at the server's new address with the attempt", runningIs(running))
	if ta.exited() {
		t.Fatalf("the agent exited: %v", ta.wait())
	}
	if n := len(readLines(t, filepath.Join(rd, "starts"))); n != 1 {
		t.Errorf("the runner was started %d times, want once", n)
	}
	if n := strings.Count(ta.logs.String(), "the server is at another URL now"); n != 1 {
		t.Errorf("the switch was logged %d times, want once; log:\n%s", n, ta.logs.String())
	}
	if get(b, func(fs *fakeServer) int { return len(fs.joins) }) != 1 {
		t.Error("the agent joined again at the new address: it had a node token")
	}
}
