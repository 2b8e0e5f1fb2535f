package exec

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/provider"
)

const secret = "Zq7J01Nt0k3nWv9x8HsPq2R" // no 4 bytes of it in any other text here

// requireTools skips the test unless the programs the example script
// needs are here.
func requireTools(t *testing.T) {
	t.Helper()
	for _, p := range []string{"bash", "python3", "setsid"} {
		if _, err := osexec.LookPath(p); err != nil {
			t.Skipf("needs %s (apt-get install bash python3 util-linux): %v", p, err)
		}
	}
}

// script writes a bash program and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "provider.sh")
	if err := os.WriteFile(p, []byte("#!/usr/bin/env bash\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(pool, name, script string) provider.LaunchRequest {
	return provider.LaunchRequest{Pool: pool, Name: name, Size: "Standard_DS3_v2",
		AgentArgs: []string{"-c", script, "agent"},
		AgentEnv:  []string{"FERRY_JOIN_TOKEN=" + secret, "FERRY_LOG=debug"}}
}

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

// gone says whether pid ends soon (a zombie has ended). A process
// dies a little after kill(2) returns, so it gets a while.
func gone(pid int) bool {
	for range 200 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); f[0] == "Z" || f[0] == "X" {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func TestExampleScriptRoundTrip(t *testing.T) {
	requireTools(t)
	ctx := context.Background()
	root, tmp := t.TempDir(), t.TempDir()
	p := newProvider(t, Config{
		Program: "../../../examples/providers/local-exec.sh",
		Env:     []string{"FERRY_EXEC_DIR=" + root, "FERRY_EXE=/bin/sh", "FERRY_EXEC_GRACE=5", "TMPDIR=" + tmp},
		Timeout: time.Minute,
	})
	t.Cleanup(func() {
		ms, _ := p.List(context.Background(), "")
		for _, m := range ms {
			p.Terminate(context.Background(), m.ID)
		}
	})
	agent := `printf %s "$FERRY_JOIN_TOKEN" | od -An -tx1 | tr -d ' \n' > token-hex; echo "$*" > args; exec sleep 300`
	a, err := p.Launch(ctx, request("cpu", "a", agent))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Launch(ctx, request("cpu", "b", agent))
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.Launch(ctx, request("gpu", "c", agent))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "cpu", "a")
	if got := waitFile(t, filepath.Join(dir, "token-hex")); got != hex.EncodeToString([]byte(secret)) {
		t.Errorf("the agent got FERRY_JOIN_TOKEN in hex %q; want %x", got, secret)
	}
	if got, want := waitFile(t, filepath.Join(dir, "args")), "--dir "+dir; got != want {
		t.Errorf("agent args %q; want %q", got, want)
	}

	type seen struct{ ID, Pool, State, Address string }
	list := func(pool string) []seen {
		t.Helper()
		ms, err := p.List(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		var out []seen
		for _, m := range ms {
			out = append(out, seen{m.ID, m.Pool, m.State, m.Address})
		}
		return out
	}
	if a.ID != "cpu/a" || b.ID != "cpu/b" || other.ID != "gpu/c" || a.State != "running" {
		t.Errorf("launched %+v, %+v, %+v", a, b, other)
	}
	want := []seen{{"cpu/a", "cpu", "running", "127.0.0.1"}, {"cpu/b", "cpu", "running", "127.0.0.1"}}
	if d := cmp.Diff(want, list("cpu")); d != "" {
		t.Errorf("List(cpu) (-want +got):\n%s", d)
	}
	if got := list(""); len(got) != 3 {
		t.Errorf("List(\"\") = %v; want all 3 machines", got)
	}
	// A machine taken back by hand is listed preempted, still reachable.
	if err := os.WriteFile(filepath.Join(root, "cpu", "b", "preempted"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	preempted := []seen{want[0], {"cpu/b", "cpu", "preempted", "127.0.0.1"}}
	if d := cmp.Diff(preempted, list("cpu")); d != "" {
		t.Errorf("List(cpu) with cpu/b preempted (-want +got):\n%s", d)
	}
	want[1] = preempted[1]

	pid, _ := strconv.Atoi(a.Labels["pid"])
	if err := p.Terminate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("agent %d still runs after Terminate", pid)
	}
	if d := cmp.Diff(want[1:], list("cpu")); d != "" {
		t.Errorf("List(cpu) after Terminate (-want +got):\n%s", d)
	}
	if err := p.Terminate(ctx, a.ID); err != nil {
		t.Errorf("second Terminate: %v; want nil", err)
	}

	// The token went only to the agent's environment: no file keeps it.
	for _, d := range []string{root, tmp} {
		filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(secret)) {
					t.Errorf("%s holds the join token", path)
				}
			}
			return nil
		})
	}
}

func TestProgramErrorQuotesStderr(t *testing.T) {
	p := newProvider(t, Config{Program: script(t, `echo "cloud says: quota exceeded for family NC" >&2; exit 1`)})
	_, err := p.Launch(context.Background(), request("cpu", "a", ""))
	if err == nil || !strings.Contains(err.Error(), "quota exceeded for family NC") || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("err = %v; want the exit status and the program's stderr", err)
	}
	if _, err := p.List(context.Background(), "cpu"); err == nil {
		t.Error("List: no error from a failing program")
	}
	if err := p.Terminate(context.Background(), "x"); err == nil {
		t.Error("Terminate: no error from a failing program")
	}
}

func TestBadOutput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, stdout, verb, want string
	}{
		{"not JSON", `not json`, "launch", "invalid JSON"},
		{"nothing", ``, "launch", "printed nothing"},
		{"two objects", `{"id":"a","state":"running"} {}`, "launch", "more than one JSON value"},
		{"array", `[]`, "list", "not an object"},
		{"no id", `{"state":"running"}`, "launch", `without an "id"`},
		{"bad state", `{"id":"a","state":"booting"}`, "launch", `state "booting"`},
		{"other pool", `{"id":"a","pool":"gpu","state":"running"}`, "launch", `pool "gpu"`},
		{"no machines", `{}`, "list", `no "machines" list`},
		{"twice", `{"machines":[{"id":"a","state":"running"},{"id":"a","state":"stopped"}]}`, "list", "twice"},
		{"bad listed state", `{"machines":[{"id":"a","state":""}]}`, "list", `state ""`},
		{"terminate not JSON", `ok`, "terminate", "invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t, Config{Program: script(t, "cat >/dev/null; echo 'some detail' >&2; printf '%s' '"+tc.stdout+"'")})
			var err error
			switch tc.verb {
			case "launch":
				_, err = p.Launch(ctx, request("cpu", "a", ""))
			case "list":
				_, err = p.List(ctx, "cpu")
			case "terminate":
				err = p.Terminate(ctx, "cpu/a")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "some detail") {
				t.Errorf("err = %v; want it to say %q and quote stderr", err, tc.want)
			}
		})
	}
}

func TestGoodOutputDefaults(t *testing.T) {
	ctx := context.Background()
	p := newProvider(t, Config{Program: script(t, `cat >/dev/null
case $1 in
list) echo '{"machines":[{"id":"i-1","state":"pending"},{"id":"i-2","state":"failed","labels":{"zone":"b"}},{"id":"i-4","state":"preempted"}], "next": null}' ;;
launch) echo '{"id":"i-3","state":"pending"}' ;;
esac`)})
	ms, err := p.List(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Machine{
		{ID: "i-1", Pool: "cpu", State: "pending"},
		{ID: "i-2", Pool: "cpu", State: "failed", Error: "the provider program gave no reason", Labels: map[string]string{"zone": "b"}},
		{ID: "i-4", Pool: "cpu", State: "preempted"},
	}
	if d := cmp.Diff(want, ms); d != "" {
		t.Errorf("List (-want +got):\n%s", d)
	}
	m, err := p.Launch(ctx, request("cpu", "n", ""))
	if d := cmp.Diff(provider.Machine{ID: "i-3", Pool: "cpu", State: "pending"}, m); err != nil || d != "" {
		t.Errorf("Launch = %v (-want +got):\n%s", err, d)
	}
}

func TestLaunchOfAFailedMachineTerminatesIt(t *testing.T) {
	log := filepath.Join(t.TempDir(), "terminated")
	p := newProvider(t, Config{Program: script(t, `in=$(cat)
case $1 in
launch) echo '{"id":"i-9","state":"failed","error":"no capacity in zone b"}' ;;
terminate) echo "$in" >> "`+log+`"; echo '{}' ;;
esac`)})
	_, err := p.Launch(context.Background(), request("cpu", "n", ""))
	if err == nil || !strings.Contains(err.Error(), "no capacity in zone b") {
		t.Errorf("err = %v; want the machine's error", err)
	}
	if got := waitFile(t, log); got != `{"id":"i-9"}` {
		t.Errorf("terminate got %q; want the failed machine's id", got)
	}
}

func TestSecretsNeverInErrors(t *testing.T) {
	ctx := context.Background()
	// A program that echoes its stdin (with the join token) to stderr
	// three times and fails, then pads stderr so that the first token
	// falls at every offset around the start of the part that is kept,
	// while the later ones are whole (and shorten the text once redacted).
	r := request("cpu", "a", "")
	r.AgentEnv = r.AgentEnv[:1]
	in, err := json.Marshal(launchInput{Pool: r.Pool, Name: r.Name, Size: r.Size, AgentArgs: r.AgentArgs,
		AgentEnv: map[string]string{"FERRY_JOIN_TOKEN": secret}})
	if err != nil {
		t.Fatal(err)
	}
	at, kept := bytes.Index(in, []byte(secret)), stderrTail+len(secret)
	prog := script(t, `in=$(cat); printf '%s\n%s\n%s\n' "$in" "$in" "$in" >&2; head -c "$PAD" /dev/zero | tr '\0' x >&2; exit 1`)
	// The kept bytes start at 3*(len(in)+1)+pad-kept; put that start from
	// just before the first token to just after it.
	for start := at - 2; start <= at+len(secret)+2; start++ {
		pad := start + kept - 3*(len(in)+1)
		p := newProvider(t, Config{Program: prog, Env: []string{"PAD=" + strconv.Itoa(pad)}})
		_, err := p.Launch(ctx, r)
		if err == nil {
			t.Fatal("no error")
		}
		msg := err.Error()
		// No piece of the token as long as 4 bytes, wherever it was cut.
		for i := 0; i+4 <= len(secret); i++ {
			if strings.Contains(msg, secret[i:i+4]) {
				t.Fatalf("stderr cut at %d: the error shows part of the join token (%q): %s", start-at, secret[i:i+4], msg)
			}
		}
		if !strings.Contains(msg, `"FERRY_JOIN_TOKEN":"[redacted]"`) {
			t.Errorf("want the echoed stdin, redacted: %s", msg)
		}
	}

	// Also in what a broken program prints on stdout, and in a machine
	// it reports.
	for _, body := range []string{
		`sed 's/^/garbage /'`,
		`cat >/dev/null; echo '{"id":"i-1","state":"failed","error":"bad token ` + secret + `"}'`,
		`cat >/dev/null; echo '{"id":"` + secret + `","state":"exploded"}'`,
	} {
		p := newProvider(t, Config{Program: script(t, body)})
		_, err := p.Launch(ctx, request("cpu", "a", ""))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("program %q: err = %v; want an error without the join token", body, err)
		}
	}
}

func TestTimeoutKillsTheProgram(t *testing.T) {
	dir := t.TempDir()
	p := newProvider(t, Config{Timeout: time.Second, Program: script(t, `echo $$ > "`+dir+`/pid.tmp"
sleep 300 & echo $! > "`+dir+`/child.tmp"
mv "`+dir+`/pid.tmp" "`+dir+`/pid"; mv "`+dir+`/child.tmp" "`+dir+`/child"
echo "still working" >&2; wait`)})
	_, err := p.Launch(context.Background(), request("cpu", "a", ""))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 1s") {
		t.Fatalf("err = %v; want a timeout", err)
	}
	for _, f := range []string{"pid", "child"} {
		pid, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, f)))
		if !gone(pid) {
			t.Errorf("%s %d still runs after the timeout", f, pid)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newProvider(t, Config{Program: script(t, "sleep 300")}).List(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled List: err = %v; want context.Canceled", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Program: "/nonexistent/provider"},
		{Program: "/bin/sh", Env: []string{"NOEQUALS"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
	p := newProvider(t, Config{Program: "/bin/true"})
	r := request("cpu", "a", "")
	r.AgentEnv = append(r.AgentEnv, secret)
	if _, err := p.Launch(context.Background(), r); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("malformed agent env: err = %v; want an error without the entry", err)
	}
	if err := p.Terminate(context.Background(), ""); err == nil {
		t.Error("Terminate(\"\"): no error")
	}
}
