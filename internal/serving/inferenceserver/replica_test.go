package inferenceserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/serving/probe"
	"github.com/ferry-ml/ferry/internal/testutil"
	"github.com/google/go-cmp/cmp"
)

const roundTripScript = `
import json, os
model = None
calls = 0
def init():
    global model, calls
    calls += 1
    with open(os.path.join(os.environ["AZUREML_MODEL_DIR"], "weights.txt")) as f:
        model = f.read()
def run(raw_data):
    assert isinstance(raw_data, str), type(raw_data)
    kind = json.loads(raw_data)["kind"]
    if kind == "dict":
        return {"model": model, "init_calls": calls, "cwd": os.getcwd()}
    if kind == "list":
        return [1, "two", None]
    if kind == "str":
        return "hello"
    if kind == "number":
        return 2.5
    if kind == "bytes":
        return b"\x00raw"
`

// TestRoundTrip: init() once, run() per request with the body as a str,
// the value returned as JSON (a str as a JSON string, as Azure sends it),
// the model's files where AZUREML_MODEL_DIR says; under python3 from PATH
// and under Debian's /usr/bin/python3 where it is another interpreter.
func TestRoundTrip(t *testing.T) {
	pythons := []string{requirePython(t)}
	if p, err := filepath.EvalSymlinks("/usr/bin/python3"); err == nil {
		if first, _ := filepath.EvalSymlinks(pythons[0]); first != p {
			pythons = append(pythons, "/usr/bin/python3")
		}
	}
	for _, python := range pythons {
		t.Run(strings.ReplaceAll(python, "/", "_"), func(t *testing.T) {
			rep := startReplica(t, python, roundTripScript, nil)
			base := URL(rep.ready(t).Address)
			for _, tc := range []struct{ kind, want, ctype string }{
				{"dict", fmt.Sprintf(`{"model": "42", "init_calls": 1, "cwd": %q}`, rep.dir), "application/json"},
				{"list", `[1, "two", null]`, "application/json"},
				{"str", `"hello"`, "application/json"},
				{"number", `2.5`, "application/json"},
				{"bytes", "\x00raw", "application/octet-stream"},
			} {
				resp, body := post(t, base+"/score", fmt.Sprintf(`{"kind": %q}`, tc.kind))
				if resp.StatusCode != 200 || body != tc.want || resp.Header.Get("Content-Type") != tc.ctype {
					t.Errorf("%s: got %d %q (%s), want 200 %q (%s)", tc.kind, resp.StatusCode, body,
						resp.Header.Get("Content-Type"), tc.want, tc.ctype)
				}
			}
			if code, body := get(t, base+"/nowhere"); code != 404 {
				t.Errorf("GET /nowhere: %d %s, want 404", code, body)
			}
		})
	}
}

// TestRunExceptionIs500: the client gets a 500 naming the exception; the
// replica's stderr gets the traceback down to the script's line.
func TestRunExceptionIs500(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
def init():
    pass
def run(raw_data):
    raise ValueError("column 'age' is missing")
`, nil)
	base := URL(rep.ready(t).Address)
	resp, body := post(t, base+"/score", `{}`)
	if resp.StatusCode != 500 {
		t.Fatalf("status %d, want 500", resp.StatusCode)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if diff := cmp.Diff(map[string]string{"message": "ValueError: column 'age' is missing"}, got); diff != "" {
		t.Errorf("500 body (-want +got):\n%s", diff)
	}
	// The replica keeps serving after a failed request.
	if code, _ := get(t, base+"/"); code != 200 {
		t.Errorf("GET / after a failed run: %d", code)
	}
	for _, want := range []string{"Traceback (most recent call last)", "score.py\", line 5, in run", "ValueError: column 'age' is missing"} {
		rep.waitLog(t, want)
	}
}

// TestInitFailureExits: init() raising ends the replica with a non-zero
// status and the traceback on stderr, the reason a deployment shows.
func TestInitFailureExits(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
def init():
    raise FileNotFoundError("model.pkl is not in the model folder")
def run(raw_data):
    return 1
`, func(r *Replica) { r.Workers = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := WaitReady(ctx, rep.statuses); !errors.Is(err, ErrExited) {
		t.Fatalf("WaitReady: %v, want ErrExited", err)
	}
	<-rep.done
	var exit *exec.ExitError
	if !errors.As(rep.waitErr, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit: %v, want a non-zero status", rep.waitErr)
	}
	// A launcher probing over HTTP learns the same from the process's end.
	if err := probe.WaitProbe(ctx, http.DefaultClient, "http://127.0.0.1:1", "", time.Millisecond, rep.done); !errors.Is(err, probe.ErrExited) {
		t.Errorf("WaitProbe: %v, want ErrExited", err)
	}
	for _, want := range []string{"Traceback (most recent call last)", "in init", "FileNotFoundError: model.pkl is not in the model folder"} {
		if !strings.Contains(rep.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, rep.stderr)
		}
	}
}

// TestWorkersBothServe: WORKER_COUNT=2 (from the deployment's variables)
// starts two workers, each running init(), and two requests in flight at
// once are each answered by a different one: the first is held in run()
// until the second has arrived in the other worker.
func TestWorkersBothServe(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, gatePython+`
def init():
    open("init-%d" % os.getpid(), "w").close()
def run(raw_data):
    open("arrived-%d" % os.getpid(), "w").close()
    wait_for("gate")
    return os.getpid()
`, func(r *Replica) { r.Env = []string{"WORKER_COUNT=2"} })
	st := rep.ready(t)
	if len(st.Workers) != 2 {
		t.Fatalf("ready status lists workers %v, want 2", st.Workers)
	}
	base := URL(st.Address)
	pids := make(chan string, 2)
	send := func() {
		resp, err := http.Post(base+"/score", "text/plain", strings.NewReader("x"))
		if err != nil {
			pids <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		pids <- string(b)
	}
	arrived := func(n int) func() bool {
		return func() bool {
			m, _ := filepath.Glob(filepath.Join(rep.dir, "arrived-*"))
			return len(m) == n
		}
	}
	// The second request is sent once the first is held in run(): the busy
	// worker must leave its connection to the idle one, or it would wait
	// behind the first and never arrive.
	go send()
	testutil.WaitFor(t, time.Minute, "the first request in run()", arrived(1))
	go send()
	testutil.WaitFor(t, time.Minute, "the second request in run()", arrived(2))
	if err := os.WriteFile(filepath.Join(rep.dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{<-pids: true, <-pids: true}
	want := map[string]bool{fmt.Sprint(st.Workers[0]): true, fmt.Sprint(st.Workers[1]): true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answering pids (-want +got):\n%s", diff)
	}
	inits, _ := filepath.Glob(filepath.Join(rep.dir, "init-*"))
	if len(inits) != 2 {
		t.Errorf("init() ran in %d processes, want 2", len(inits))
	}
}

// TestLiveness: GET / answers 503 while init() runs and 200 once it has
// returned; /score is refused until then.
func TestLiveness(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, gatePython+`
def init():
    wait_for("gate")
def run(raw_data):
    return "ok"
`, nil)
	listening := <-rep.statuses
	if listening.State != StateListening {
		t.Fatalf("first status %+v, want listening", listening)
	}
	base := URL(listening.Address)
	if code, body := get(t, base+"/"); code != 503 {
		t.Errorf("GET / during init(): %d %s, want 503", code, body)
	}
	if resp, _ := post(t, base+"/score", "x"); resp.StatusCode != 503 {
		t.Errorf("POST /score during init(): %d, want 503", resp.StatusCode)
	}
	// Probes during init() do not succeed; WaitProbe returns once the gate
	// lets init() finish.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := probe.WaitProbe(ctx, http.DefaultClient, base, "", 20*time.Millisecond, rep.done)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitProbe during init(): %v, want the deadline", err)
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := probe.WaitProbe(ctx, http.DefaultClient, base, "", 20*time.Millisecond, rep.done); err != nil {
		t.Fatalf("WaitProbe after init(): %v", err)
	}
	if code, body := get(t, base+"/"); code != 200 || body != "Healthy" {
		t.Errorf("GET / after init(): %d %q, want 200 Healthy", code, body)
	}
	if err := probe.Probe(context.Background(), http.DefaultClient, base, ""); err != nil {
		t.Errorf("Probe: %v", err)
	}
}

// TestLostWorkerStopsReplica: a worker that dies after start stops the
// whole replica with a non-zero status, so that it is replaced whole.
func TestLostWorkerStopsReplica(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
import os
def init():
    pass
def run(raw_data):
    os._exit(9)
`, func(r *Replica) { r.Workers = 2 })
	base := URL(rep.ready(t).Address)
	if resp, err := http.Post(base+"/score", "text/plain", strings.NewReader("x")); err == nil {
		resp.Body.Close()
		t.Errorf("a request whose worker died got an answer: %s", resp.Status)
	}
	<-rep.done
	var exit *exec.ExitError
	if !errors.As(rep.waitErr, &exit) || exit.ExitCode() != 9 {
		t.Errorf("exit: %v, want status 9", rep.waitErr)
	}
	if !strings.Contains(rep.stderr.String(), "stopping the replica") {
		t.Errorf("stderr does not say why the replica stopped:\n%s", rep.stderr)
	}
}

// TestStopDrains: SIGTERM lets a request under way finish and be answered
// before the replica exits, with status 0.
func TestStopDrains(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, gatePython+`
def init():
    pass
def run(raw_data):
    open("arrived", "w").close()
    wait_for("gate")
    return "finished"
`, nil)
	base := URL(rep.ready(t).Address)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Post(base+"/score", "text/plain", strings.NewReader("x"))
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	testutil.WaitFor(t, time.Minute, "the request in run()", func() bool { _, err := os.Stat(filepath.Join(rep.dir, "arrived")); return err == nil })
	if err := rep.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rep.waitLog(t, "draining 1 request(s)")
	// A second SIGTERM while it drains (a launcher's again, or the
	// process group's) changes nothing.
	if err := rep.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := <-answer; got != `200 "finished"` {
		t.Errorf("the request under way got %s, want 200", got)
	}
	<-rep.done
	if rep.waitErr != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", rep.waitErr)
	}
	if strings.Contains(rep.stderr.String(), "Traceback") {
		t.Errorf("a traceback on stopping:\n%s", rep.stderr.String())
	}
}

// TestLivenessWhileBusy: with its one worker held in run(), the replica
// still answers GET / on a connection the prober already holds.
func TestLivenessWhileBusy(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, gatePython+`
def init():
    pass
def run(raw_data):
    open("arrived", "w").close()
    wait_for("gate")
    return "done"
`, nil)
	base := URL(rep.ready(t).Address)
	prober := &http.Client{Transport: &http.Transport{}}
	if err := probe.Probe(context.Background(), prober, base, ""); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		client := &http.Client{Transport: &http.Transport{}}
		resp, err := client.Post(base+"/score", "text/plain", strings.NewReader("x"))
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- string(b)
	}()
	testutil.WaitFor(t, time.Minute, "the request in run()", func() bool { _, err := os.Stat(filepath.Join(rep.dir, "arrived")); return err == nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := probe.Probe(ctx, prober, base, ""); err != nil {
		t.Errorf("probe while the worker is busy: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != `"done"` {
		t.Errorf("held request: %s", got)
	}
}
