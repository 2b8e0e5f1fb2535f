package agent

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// The real ferry binary, built once when a test asks for it.
var (
	ferryOnce sync.Once
	ferryBin  string
	ferryErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if ferryBin != "" {
		os.RemoveAll(filepath.Dir(ferryBin))
	}
	os.Exit(code)
}

// buildFerry builds cmd/ferry. Other packages' tests say what is broken
// when it does not build, so here it is a skip, except under CI (as
// testutil does), where nothing is skipped.
func buildFerry(t *testing.T) string {
	t.Helper()
	ferryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-agent-test-")
		if err != nil {
			ferryErr = err
			return
		}
		ferryBin = filepath.Join(dir, "ferry")
		ferryErr = testutil.BuildFerry(ferryBin)
	})
	if ferryErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("building ferry: %v", ferryErr)
		}
		t.Skipf("the ferry binary does not build, so `ferry agent` cannot be run: %v", ferryErr)
	}
	return ferryBin
}

func procStrings(t *testing.T, pid int, what string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + what)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// TestFerryAgentCommand runs the real `ferry agent`, which starts the
// real `ferry runner`: the runner calls the workspace with the run token
// the agent gave it, and neither its arguments nor its environment hold
// the join token. SIGTERM stops the agent (exit 0) and not the runner.
func TestFerryAgentCommand(t *testing.T) {
	bin := buildFerry(t)
	fs := newFakeServer(t, nil)
	dir := t.TempDir()
	fs.set(func(fs *fakeServer) {
		fs.assign = []nodeproto.Assignment{{Job: "j", Attempt: 1, APIURL: fs.URL, RunToken: "run-secret-cli"}}
	})
	var stderr syncBuffer
	cmd := exec.Command(bin, "agent", "--server", fs.URL, "--name", "cli-node", "--dir", dir, "--cancel-grace", "3s")
	cmd.Env = append(os.Environ(), "FERRY_JOIN_TOKEN="+fs.joinToken)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	testutil.WaitFor(t, 30*time.Second, "the runner's first call", func() bool {
		return get(fs, func(fs *fakeServer) int { return len(fs.runnerAuth) }) > 0
	})
	if auth := get(fs, func(fs *fakeServer) string { return fs.runnerAuth[0] }); auth != "Bearer run-secret-cli" {
		t.Errorf("the runner called with %q, want its run token", auth)
	}
	var pid int
	testutil.WaitFor(t, 30*time.Second, "the runner in the state file", func() bool {
		data, err := os.ReadFile(filepath.Join(dir, StateFile))
		if err != nil {
			return false
		}
		var st state
		if err := json.Unmarshal(data, &st); err != nil || len(st.Runners) != 1 {
			return false
		}
		pid = st.Runners[0].PID
		return true
	})
	t.Cleanup(func() { killAndWait(t, pid) })
	fs.beatAfter(0, "the attempt in a heartbeat", runningIs(nodeproto.Running{Job: "j", Attempt: 1}))

	args := procStrings(t, pid, "cmdline")
	if !strings.HasPrefix(args[0], filepath.Join(dir, "bin")+"/") || args[1] != "runner" {
		t.Errorf("runner command line %q: want DIR/bin/ferry-... runner", args)
	}
	for _, want := range []string{"--cancel-grace 3s", "--env-cache-size 50g", "--dir " + runDir(dir, "j", 1)} {
		if !strings.Contains(strings.Join(args, " "), want) {
			t.Errorf("runner command line %q lacks %q", args, want)
		}
	}
	assertNoSecrets(t, "the runner's command line", strings.Join(args, " "), fs.joinToken, fs.nodeToken, "run-secret")
	env := "\n" + strings.Join(procStrings(t, pid, "environ"), "\n") + "\n"
	if !strings.Contains(env, "\nFERRY_RUN_TOKEN=run-secret-cli\n") {
		t.Error("the runner was not given its run token in its environment")
	}
	assertNoSecrets(t, "the runner's environment", env, fs.joinToken, fs.nodeToken, "FERRY_JOIN_TOKEN")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("ferry agent after SIGTERM: %v, want exit 0; output:\n%s", err, stderr.String())
	}
	exited <- nil // for the cleanup
	if !running(pid) {
		t.Error("the runner stopped with the agent")
	}
	if !strings.Contains(stderr.String(), "joined") {
		t.Errorf("the agent's log does not say it joined:\n%s", stderr.String())
	}
	assertNoSecrets(t, "the agent's log", stderr.String(), fs.joinToken, fs.nodeToken, "run-secret")
}

func TestFerryAgentNeedsJoinToken(t *testing.T) {
	bin := buildFerry(t)
	cmd := exec.Command(bin, "agent", "--server", "http://127.0.0.1:9", "--dir", t.TempDir())
	cmd.Env = append(os.Environ(), "FERRY_JOIN_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FERRY_JOIN_TOKEN is not set") {
		t.Errorf("ferry agent without a join token: %v\n%s", err, out)
	}
}

// TestLinksNoServerCode keeps the agent small and independent of the
// server: of Ferry's packages it may use only the wire protocols, nodeproto
// and, for exec/ssh/port-forward, session, isolation for the account
// jobs and sessions run as, runner/invocation for the runner's command
// line, buildinfo for its version, timerslack for the slack of what it
// starts, beneath to write into folders jobs can reach and serverurl for
// the file its server records its URL in (they import nothing of Ferry's:
// archtest holds them to that).
func TestLinksNoServerCode(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool (a test binary run on its own)")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/ferry-ml/ferry/"
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, mod) && dep != mod+"internal/agent" && dep != mod+"internal/nodeproto" && dep != mod+"internal/session" && dep != mod+"internal/isolation" && dep != mod+"internal/runner/invocation" && dep != mod+"internal/buildinfo" && dep != mod+"internal/timerslack" && dep != mod+"internal/beneath" && dep != mod+"internal/serverurl" {
			t.Errorf("the agent depends on %s; it may use only internal/nodeproto, internal/session, internal/isolation, internal/runner/invocation, internal/buildinfo, internal/timerslack, internal/beneath and internal/serverurl of Ferry's packages", dep)
		}
	}
}
