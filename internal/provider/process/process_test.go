package process

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/provider"
)

const secret = "s3cret-join-token-value"

// newProvider makes a provider whose "agents" are /bin/sh scripts, and
// terminates whatever it left running when the test ends.
func newProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	if cfg.Exe == "" {
		cfg.Exe = "/bin/sh"
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ms, err := p.List(context.Background(), "")
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, m := range ms {
			if err := p.Terminate(context.Background(), m.ID); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return p
}

// shAgent is a launch request whose agent runs script with sh; the
// provider appends "--dir DIR", which the script sees as "$@".
func shAgent(pool, name string, gpus int, script string) provider.LaunchRequest {
	return provider.LaunchRequest{Pool: pool, Name: name, Size: "Standard_DS3_v2", GPUs: gpus,
		AgentArgs: []string{"-c", script, "agent"},
		AgentEnv:  []string{"FERRY_JOIN_TOKEN=" + secret}}
}

// sleeper records what the agent got, then sleeps.
const sleeper = `echo "args: $*"; echo "${CUDA_VISIBLE_DEVICES-unset}" > cvd
printf %s "$FERRY_JOIN_TOKEN" | od -An -tx1 | tr -d ' \n' > token-hex
echo started > ready; exec sleep 300`

func launch(t *testing.T, p *Provider, r provider.LaunchRequest) provider.Machine {
	t.Helper()
	m, err := p.Launch(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitFile waits for the agent to write a file and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for range 600 {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
	return ""
}

// waitState waits until List shows the machine in state.
func waitState(t *testing.T, p *Provider, id, state string) provider.Machine {
	t.Helper()
	var last provider.Machine
	for range 600 {
		ms, err := p.List(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.ID == id {
				last = m
			}
		}
		if last.State == state {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("machine %s never became %s; last seen %+v", id, state, last)
	return last
}

func gone(pid int) bool {
	info, err := readProc(pid)
	return err != nil || info.dead()
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(waitFile(t, path))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestLaunchListAndGPUShares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProvider(t, Config{GPUs: []int{0, 1, 2, 3}})
	a := launch(t, p, shAgent("gpu", "a", 2, sleeper))
	b := launch(t, p, shAgent("gpu", "b", 2, sleeper))
	if a.ID != "gpu/a" || b.ID != "gpu/b" {
		t.Fatalf("IDs %q, %q; want gpu/a, gpu/b", a.ID, b.ID)
	}
	for _, m := range []provider.Machine{a, b} {
		waitFile(t, filepath.Join(m.Labels["dir"], "ready"))
	}
	ms, err := p.List(ctx, "gpu")
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ ID, Pool, State, Address, GPUs, CVD string }
	var got []seen
	for _, m := range ms {
		got = append(got, seen{m.ID, m.Pool, m.State, m.Address, m.Labels["gpus"], waitFile(t, filepath.Join(m.Labels["dir"], "cvd"))})
	}
	want := []seen{
		{"gpu/a", "gpu", "running", "127.0.0.1", "0,1", "0,1"},
		{"gpu/b", "gpu", "running", "127.0.0.1", "2,3", "2,3"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("List (-want +got):\n%s", d)
	}
	if other, err := p.List(ctx, "other"); err != nil || len(other) != 0 {
		t.Errorf("List(other) = %v, %v; want none", other, err)
	}

	log := waitFile(t, a.Labels["log"])
	if want := "args: --dir " + a.Labels["dir"]; !strings.Contains(log, want) {
		t.Errorf("agent.log = %q; want the agent to get %q", log, want)
	}

	_, err = p.Launch(ctx, shAgent("gpu", "c", 1, sleeper))
	if err == nil || !strings.Contains(err.Error(), "wants 1 GPUs, but only 0 of the host's 4 are free") {
		t.Fatalf("third machine: err = %v; want a clear out-of-GPUs error", err)
	}
	if ms, _ := p.List(ctx, "gpu"); len(ms) != 2 {
		t.Errorf("a failed launch left a machine: %v", ms)
	}

	// A CPU machine on a GPU host sees no GPU: the variable is set, empty.
	cpu := launch(t, p, shAgent("cpu", "n1", 0, sleeper))
	waitFile(t, filepath.Join(cpu.Labels["dir"], "ready"))
	if got := waitFile(t, filepath.Join(cpu.Labels["dir"], "cvd")); got != "" {
		t.Errorf("CPU machine on a GPU host: CUDA_VISIBLE_DEVICES=%q; want set and empty", got)
	}

	// GPUs of a terminated machine are free again, lowest first.
	if err := p.Terminate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	c := launch(t, p, shAgent("gpu", "c", 1, sleeper))
	if got := waitFile(t, filepath.Join(c.Labels["dir"], "cvd")); got != "0" {
		t.Errorf("after terminating gpu/a, gpu/c got CUDA_VISIBLE_DEVICES=%q; want 0", got)
	}
}

func TestHostWithoutGPUs(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "7")
	p := newProvider(t, Config{})
	_, err := p.Launch(context.Background(), shAgent("gpu", "a", 1, sleeper))
	if err == nil || !strings.Contains(err.Error(), "wants 1 GPUs, but this host has none") {
		t.Errorf("GPU machine on a host without GPUs: err = %v", err)
	}
	// Nothing to hide: the variable is left as the server has it.
	m := launch(t, p, shAgent("cpu", "a", 0, sleeper))
	if got := waitFile(t, filepath.Join(m.Labels["dir"], "cvd")); got != "7" {
		t.Errorf("CUDA_VISIBLE_DEVICES=%q; want the server's own (7)", got)
	}
}

func TestRestartListsTheSameMachines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	p := newProvider(t, Config{Dir: dir, GPUs: []int{0, 1}})
	a := launch(t, p, shAgent("pool", "a", 1, sleeper))
	launch(t, p, shAgent("pool", "b", 1, sleeper))
	before, err := p.List(ctx, "pool")
	if err != nil {
		t.Fatal(err)
	}

	again := newProvider(t, Config{Dir: dir, GPUs: []int{0, 1}})
	after, err := again.List(ctx, "pool")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("a new provider over the same Dir lists (-before +after):\n%s", d)
	}
	if _, err := again.Launch(ctx, shAgent("pool", "c", 1, sleeper)); err == nil {
		t.Error("the new provider handed out a GPU that a running machine holds")
	}
	got, err := again.Get(ctx, a.ID)
	if err != nil || got.State != provider.StateRunning {
		t.Errorf("Get(%s) = %+v, %v; want it running", a.ID, got, err)
	}
	if err := again.Terminate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, a.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after Terminate: err = %v; want ErrNotFound", err)
	}
}

func TestDeadAgentIsStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProvider(t, Config{GPUs: []int{0}})
	m := launch(t, p, shAgent("pool", "short", 1, "exit 3"))
	got := waitState(t, p, m.ID, provider.StateStopped)
	if got.Address != "" {
		t.Errorf("stopped machine has address %q; want none", got.Address)
	}
	// Its GPU is free for others, and it stays listed until terminated.
	launch(t, p, shAgent("pool", "next", 1, sleeper))
	if err := p.Terminate(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(got.Labels["dir"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Terminate left the machine's directory: %v", err)
	}
}

func TestReusedPIDIsNotTheAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProvider(t, Config{GPUs: []int{0}})
	other := exec.Command("sleep", "300")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	info, err := readProc(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// A record of an agent that had the same pid but started at another
	// time, as after the agent died and the pid was handed out again.
	dir := p.machineDir("pool", "old")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rec := &record{ID: "pool/old", Pool: "pool", Name: "old", PID: other.Process.Pid, BootID: p.boot,
		StartTime: info.Start - 1, GPUs: []int{0}}
	if err := writeRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	got, err := p.Get(ctx, "pool/old")
	if err != nil || got.State != provider.StateStopped {
		t.Fatalf("Get = %+v, %v; want stopped", got, err)
	}
	launch(t, p, shAgent("pool", "new", 1, sleeper)) // GPU 0 is not held by the dead record
	if err := p.Terminate(ctx, "pool/old"); err != nil {
		t.Fatal(err)
	}
	if gone(other.Process.Pid) {
		t.Error("Terminate killed an unrelated process that reused the agent's pid")
	}
}

func TestTerminateStopsEverythingOnTheMachine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProvider(t, Config{})
	// A child in the agent's group, and one in a session of its own (as
	// the agent starts runners) that only its directory gives away.
	m := launch(t, p, shAgent("pool", "a", 0, `sleep 300 & echo $! > child.tmp; mv child.tmp child
setsid sleep 300 & echo $! > escaped.tmp; mv escaped.tmp escaped; wait`))
	dir := m.Labels["dir"]
	agent, _ := strconv.Atoi(m.Labels["pid"])
	child, escaped := readPID(t, filepath.Join(dir, "child")), readPID(t, filepath.Join(dir, "escaped"))
	if err := p.Terminate(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	for what, pid := range map[string]int{"agent": agent, "child": child, "escaped runner": escaped} {
		if !gone(pid) {
			t.Errorf("%s (pid %d) still runs after Terminate", what, pid)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Terminate left %s: %v", dir, err)
	}
	if ms, _ := p.List(ctx, ""); len(ms) != 0 {
		t.Errorf("List after Terminate = %v", ms)
	}
	for _, id := range []string{m.ID, "pool/never"} {
		if err := p.Terminate(ctx, id); err != nil {
			t.Errorf("Terminate(%s) of a gone machine: %v; want nil", id, err)
		}
	}
	if err := p.Terminate(ctx, "not-an-id"); err == nil {
		t.Error("Terminate of a malformed ID: no error")
	}
}

func TestTerminateKillsWhatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	p := newProvider(t, Config{Grace: 100 * time.Millisecond})
	m := launch(t, p, shAgent("pool", "stubborn", 0, `trap '' TERM; sleep 300 & echo $! > child.tmp; mv child.tmp child; wait`))
	agent, _ := strconv.Atoi(m.Labels["pid"])
	child := readPID(t, filepath.Join(m.Labels["dir"], "child"))
	if err := p.Terminate(context.Background(), m.ID); err != nil {
		t.Fatal(err)
	}
	if !gone(agent) || !gone(child) {
		t.Errorf("agent gone: %v, child gone: %v; want both killed after the grace", gone(agent), gone(child))
	}
}

func TestSecretsStayInTheEnvironment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProvider(t, Config{})
	m := launch(t, p, shAgent("pool", "a", 0, sleeper))
	// It got there (shown in hex: the script must not hold the token, or
	// the test would put it on the command line itself).
	if got := waitFile(t, filepath.Join(m.Labels["dir"], "token-hex")); got != hex.EncodeToString([]byte(secret)) {
		t.Errorf("the agent got FERRY_JOIN_TOKEN in hex %q; want %x", got, secret)
	}
	for _, f := range []string{filepath.Join(m.Labels["dir"], recordFile), "/proc/" + m.Labels["pid"] + "/cmdline"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the join token", f)
		}
	}

	bad := newProvider(t, Config{Exe: "/nonexistent/ferry"})
	var errs []error
	_, err := bad.Launch(ctx, shAgent("pool", "a", 0, sleeper))
	errs = append(errs, err)
	_, err = p.Launch(ctx, shAgent("pool", "a", 0, sleeper)) // exists
	errs = append(errs, err)
	r := shAgent("pool", "b", 0, sleeper)
	r.AgentEnv = append(r.AgentEnv, secret) // not KEY=VALUE
	_, err = p.Launch(ctx, r)
	errs = append(errs, err)
	for i, err := range errs {
		if err == nil {
			t.Errorf("launch %d: no error", i)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("launch %d: the error shows the join token: %v", i, err)
		}
	}
	if ms, _ := bad.List(ctx, ""); len(ms) != 0 {
		t.Errorf("a launch that could not start its agent left %v", ms)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProvider(t, Config{GPUs: []int{0}})
	for _, r := range []provider.LaunchRequest{
		shAgent("../up", "a", 0, sleeper),
		shAgent("pool", "", 0, sleeper),
		shAgent("pool", "a/b", 0, sleeper),
		shAgent("pool", "a", -1, sleeper),
	} {
		if _, err := p.Launch(ctx, r); err == nil {
			t.Errorf("Launch(pool %q, name %q, GPUs %d): no error", r.Pool, r.Name, r.GPUs)
		}
	}
	if _, err := p.List(ctx, "../up"); err == nil {
		t.Error("List(../up): no error")
	}
	if _, err := p.Get(ctx, "pool/nothing"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of an unknown machine: %v; want ErrNotFound", err)
	}
	for _, cfg := range []Config{
		{Dir: t.TempDir()},
		{Exe: "/bin/sh"},
		{Exe: "/bin/sh", Dir: t.TempDir(), GPUs: []int{0, 0}},
		{Exe: "/bin/sh", Dir: t.TempDir(), GPUs: []int{-1}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

func TestUnreadableRecordIsFailedAndTerminable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProvider(t, Config{})
	dir := p.machineDir("pool", "broken")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, recordFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := p.List(ctx, "pool")
	if err != nil || len(ms) != 1 || ms[0].State != provider.StateFailed || ms[0].ID != "pool/broken" {
		t.Fatalf("List = %+v, %v; want pool/broken failed", ms, err)
	}
	if err := p.Terminate(ctx, "pool/broken"); err != nil {
		t.Fatal(err)
	}
	if ms, _ := p.List(ctx, "pool"); len(ms) != 0 {
		t.Errorf("List after Terminate = %v", ms)
	}
}
