package inferenceserver

import (
	"bufio"
	"bytes"
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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// requirePython skips the test unless a python3 of at least 3.8 runs.
func requirePython(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(p, "-c", "import sys; sys.exit(sys.version_info < (3, 8))").Run()
	}
	if err != nil {
		t.Skipf("needs python3 ≥ 3.8 on PATH (apt-get install python3): %v", err)
	}
	return p
}

// pythonWith returns the first of python3 and Debian's /usr/bin/python3
// that imports module, or skips the test.
func pythonWith(t *testing.T, module string) string {
	t.Helper()
	for _, p := range []string{requirePython(t), "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	t.Skipf("neither python3 nor /usr/bin/python3 has %s (apt-get install python3-%s)", module, module)
	return ""
}

// syncBuffer is a buffer the replica's log goroutine writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// replica is one inference server the test started.
type replica struct {
	cmd      *exec.Cmd
	statuses <-chan Status
	stdout   *syncBuffer
	stderr   *syncBuffer
	done     chan struct{}
	waitErr  error
	dir      string // the code folder
}

// startReplica writes script as score.py in a fresh code folder and
// starts a replica of it; edit may adjust the Replica first.
func startReplica(t testing.TB, python, script string, edit func(*Replica)) *replica {
	t.Helper()
	root := t.TempDir()
	code := filepath.Join(root, "code")
	model := filepath.Join(root, "model")
	for _, d := range []string{code, model} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(code, "score.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(model, "weights.txt"), []byte("42"), 0o644); err != nil {
		t.Fatal(err)
	}
	server, err := Install(filepath.Join(root, "servers"))
	if err != nil {
		t.Fatal(err)
	}
	r := Replica{Python: python, ServerDir: server, CodeDir: code, Script: "score.py", ModelDir: model}
	if edit != nil {
		edit(&r)
	}
	c, err := r.Command()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.Args[0], c.Args[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	rep := &replica{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{}), dir: code}
	cmd.Stderr = rep.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rep.statuses = Watch(out, rep.stdout)
	go func() {
		rep.waitErr = cmd.Wait()
		close(rep.done)
	}()
	t.Cleanup(func() {
		// The replica's own process group: its workers go with it even
		// if the parent is already gone.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-rep.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-rep.done
		}
		if t.Failed() {
			t.Logf("replica stdout:\n%s\nreplica stderr:\n%s", rep.stdout, rep.stderr)
		}
	})
	return rep
}

func (r *replica) ready(t testing.TB) Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := WaitReady(ctx, r.statuses)
	if err != nil {
		<-r.done
		t.Fatalf("replica not ready: %v (exit: %v)\nstderr:\n%s", err, r.waitErr, r.stderr)
	}
	return s
}

// waitLog waits for want in the replica's stderr, which reaches the test
// through a pipe some time after the replica wrote it.
func (r *replica) waitLog(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(r.stderr.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the replica's log lacks %q", want)
		}
	}
}

// gate waits for the file name in the code folder, as a script does to
// hold a request until the test lets it go.
const gatePython = `
import os, time
def wait_for(name):
    while not os.path.exists(name):
        time.sleep(0.01)
`

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

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
	if err := WaitProbe(ctx, http.DefaultClient, "http://127.0.0.1:1", time.Millisecond, rep.done); !errors.Is(err, ErrExited) {
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
	waitFor(t, arrived(1))
	go send()
	waitFor(t, arrived(2))
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

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
	}
}

// TestAzureRawHTTPScript: a script written for Azure with @rawhttp and
// AMLResponse runs unchanged: it sees the method, headers, query and raw
// body, and sets the status, headers and body of its answer.
func TestAzureRawHTTPScript(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
import json
from azureml.contrib.services.aml_request import AMLRequest, rawhttp
from azureml.contrib.services.aml_response import AMLResponse

def init():
    pass

@rawhttp
def run(request):
    if request.method == "GET":
        return AMLResponse("use POST, " + request.args.get("who", "nobody"), 200)
    if request.method == "POST":
        body = request.get_data(False)
        out = {"len": len(body), "type": request.headers.get("content-type"),
               "q": request.args.get("x"), "json": request.get_json()}
        return AMLResponse(out, 201, {"X-Model-Version": "3"}, json_str=True)
    return AMLResponse("bad request", 500)
`, nil)
	base := URL(rep.ready(t).Address)
	code, body := get(t, base+"/score?who=me")
	if code != 200 || body != "use POST, me" {
		t.Errorf("GET /score: %d %q", code, body)
	}
	req, _ := http.NewRequest("POST", base+"/score?x=7", strings.NewReader(`{"a": [1, 2]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || resp.Header.Get("X-Model-Version") != "3" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("POST: %d %v", resp.StatusCode, resp.Header)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	want := map[string]any{"len": 13.0, "type": "application/json", "q": "7", "json": map[string]any{"a": []any{1.0, 2.0}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("POST body (-want +got):\n%s", diff)
	}
}

// TestInferenceSchemaScript: a script decorated with inference_schema's
// @input_schema/@output_schema runs unchanged: the body's JSON keys become
// run()'s arguments, converted to the schema's types (numpy arrays where
// the interpreter has numpy).
func TestInferenceSchemaScript(t *testing.T) {
	python := requirePython(t)
	t.Run("standard", func(t *testing.T) {
		rep := startReplica(t, python, `
from inference_schema.schema_decorators import input_schema, output_schema
from inference_schema.parameter_types.standard_py_parameter_type import StandardPythonParameterType

def init():
    pass

@input_schema("data", StandardPythonParameterType([[1.0, 2.0]]))
@input_schema("scale", StandardPythonParameterType(1.0))
@output_schema(StandardPythonParameterType([3.0]))
def run(data, scale=1.0):
    return [sum(row) * scale for row in data]
`, nil)
		base := URL(rep.ready(t).Address)
		if resp, body := post(t, base+"/score", `{"data": [[1, 2], [3, 4]], "scale": 10}`); resp.StatusCode != 200 || body != "[30, 70]" {
			t.Errorf("score: %d %s", resp.StatusCode, body)
		}
		if resp, body := post(t, base+"/score", `[1, 2]`); resp.StatusCode != 400 || !strings.Contains(body, "data") {
			t.Errorf("a body that is not an object: %d %s, want 400 naming the inputs", resp.StatusCode, body)
		}
	})
	t.Run("numpy", func(t *testing.T) {
		python := pythonWith(t, "numpy")
		rep := startReplica(t, python, `
import numpy as np
from inference_schema.schema_decorators import input_schema, output_schema
from inference_schema.parameter_types.numpy_parameter_type import NumpyParameterType

def init():
    pass

@input_schema("data", NumpyParameterType(np.array([[1.0, 2.0, 3.0]])))
@output_schema(NumpyParameterType(np.array([6.0])))
def run(data):
    assert isinstance(data, np.ndarray) and data.dtype == np.float64, (type(data), data)
    return data.sum(axis=1)
`, nil)
		base := URL(rep.ready(t).Address)
		if resp, body := post(t, base+"/score", `{"data": [[1, 2, 3], [4, 5, 6]]}`); resp.StatusCode != 200 || body != "[6.0, 15.0]" {
			t.Errorf("score: %d %s", resp.StatusCode, body)
		}
		if resp, body := post(t, base+"/score", `{"data": [[1, 2]]}`); resp.StatusCode != 500 || !strings.Contains(body, "shape") {
			t.Errorf("wrong shape: %d %s, want 500 naming the shape", resp.StatusCode, body)
		}
	})
	t.Run("nested", func(t *testing.T) {
		python := pythonWith(t, "numpy")
		// The shape Azure's docs ask for to get a conforming swagger: a
		// nested Inputs and optional GlobalParameters.
		rep := startReplica(t, python, `
import numpy as np
from inference_schema.schema_decorators import input_schema, output_schema
from inference_schema.parameter_types.numpy_parameter_type import NumpyParameterType
from inference_schema.parameter_types.standard_py_parameter_type import StandardPythonParameterType

def init():
    pass

@input_schema(param_name="Inputs", param_type=StandardPythonParameterType({"data": NumpyParameterType(np.array([[0.5, 1.5]]))}))
@input_schema(param_name="GlobalParameters", param_type=StandardPythonParameterType(1.0))
@output_schema(output_type=StandardPythonParameterType({"Results": [1.0]}))
def run(Inputs, GlobalParameters=1.0):
    data = Inputs["data"]
    assert isinstance(data, np.ndarray), type(data)
    return {"Results": (data.sum(axis=1) * GlobalParameters).tolist()}
`, nil)
		base := URL(rep.ready(t).Address)
		if resp, body := post(t, base+"/score", `{"Inputs": {"data": [[1, 2], [3, 4]]}, "GlobalParameters": 2}`); resp.StatusCode != 200 || body != `{"Results": [6.0, 14.0]}` {
			t.Errorf("score: %d %s", resp.StatusCode, body)
		}
	})
}

// TestStreaming: a run() returning a generator is sent chunked, each piece
// as it is produced: the client reads the first before the generator has
// made the second (it waits for a gate the test opens only then).
func TestStreaming(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, gatePython+`
def init():
    pass
def run(raw_data):
    def tokens():
        yield "data: first\n\n"
        wait_for("gate")
        yield "data: second\n\n"
    return tokens()
`, nil)
	base := URL(rep.ready(t).Address)
	// A server that buffered the whole answer would hold it until the gate
	// opens, which it never does: the context ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/score", strings.NewReader("go"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if diff := cmp.Diff([]string{"chunked"}, resp.TransferEncoding); diff != "" {
		t.Errorf("transfer encoding (-want +got):\n%s", diff)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "data: first\n" {
		t.Fatalf("first piece: %q, %v", first, err)
	}
	if _, err := os.Stat(filepath.Join(rep.dir, "gate")); err == nil {
		t.Fatal("the gate is open before the test opened it")
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: second\n\n" {
		t.Errorf("rest: %q, %v", rest, err)
	}
}

// TestBodyLimit: a body over the replica's limit is refused with 413,
// whether its length is declared or it comes chunked; one at the limit
// is scored.
func TestBodyLimit(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
def init():
    pass
def run(raw_data):
    return len(raw_data)
`, func(r *Replica) { r.MaxRequestBytes = 1024 })
	base := URL(rep.ready(t).Address)
	if resp, body := post(t, base+"/score", strings.Repeat("a", 1024)); resp.StatusCode != 200 || body != "1024" {
		t.Errorf("1024 bytes: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, base+"/score", strings.Repeat("a", 1025)); resp.StatusCode != 413 || !strings.Contains(body, "1024") {
		t.Errorf("1025 bytes: %d %s, want 413 naming the limit", resp.StatusCode, body)
	}
	// io.MultiReader hides the length: the client sends it chunked.
	resp, err := http.Post(base+"/score", "text/plain", io.MultiReader(strings.NewReader(strings.Repeat("b", 4096))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("4096 bytes chunked: %d, want 413", resp.StatusCode)
	}
	if resp, body := post(t, base+"/score", "small"); resp.StatusCode != 200 || body != "5" {
		t.Errorf("after refusals: %d %s", resp.StatusCode, body)
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
	err := WaitProbe(ctx, http.DefaultClient, base, 20*time.Millisecond, rep.done)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitProbe during init(): %v, want the deadline", err)
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := WaitProbe(ctx, http.DefaultClient, base, 20*time.Millisecond, rep.done); err != nil {
		t.Fatalf("WaitProbe after init(): %v", err)
	}
	if code, body := get(t, base+"/"); code != 200 || body != "Healthy" {
		t.Errorf("GET / after init(): %d %q, want 200 Healthy", code, body)
	}
	if err := Probe(context.Background(), http.DefaultClient, base); err != nil {
		t.Errorf("Probe: %v", err)
	}
}

// TestScriptFolderAndShimOrder: the script imports a module beside it (its
// folder is first on sys.path), its prints reach the log and not the
// status stream, and an installed package wins over Ferry's stand-in of
// the same name.
func TestScriptFolderAndShimOrder(t *testing.T) {
	python := requirePython(t)
	site := t.TempDir()
	pkg := filepath.Join(site, "inference_schema")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"__init__.py":          "",
		"schema_decorators.py": "REAL = True\ndef input_schema(*a, **k):\n    return lambda f: f\n",
	} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := startReplica(t, python, `
import helper
from inference_schema import schema_decorators
def init():
    print("init says hello")
def run(raw_data):
    return {"helper": helper.NAME, "real": getattr(schema_decorators, "REAL", False)}
`, func(r *Replica) {
		if err := os.WriteFile(filepath.Join(r.CodeDir, "helper.py"), []byte("NAME = 'beside'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.Env = []string{"PYTHONPATH=" + site}
	})
	base := URL(rep.ready(t).Address)
	if resp, body := post(t, base+"/score", "x"); resp.StatusCode != 200 || body != `{"helper": "beside", "real": true}` {
		t.Errorf("score: %d %s", resp.StatusCode, body)
	}
	rep.waitLog(t, "init says hello")
	if strings.Contains(rep.stdout.String(), "init says hello") {
		t.Errorf("the script's print went to stdout, not the log:\nstdout:\n%s", rep.stdout)
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
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(rep.dir, "arrived")); return err == nil })
	if err := rep.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rep.waitLog(t, "draining 1 request(s)")
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
}

// TestStreamingAMLResponse: an AMLResponse whose body is a generator is
// streamed with its own content type (server-sent events here); a stream
// that raises midway ends without its last chunk, so the client sees an
// incomplete answer, and the traceback goes to the log.
func TestStreamingAMLResponse(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, `
from azureml.contrib.services.aml_response import AMLResponse
def init():
    pass
def run(raw_data):
    def events():
        yield "data: one\n\n"
        if raw_data == "fail":
            raise RuntimeError("the model lost its place")
        yield b"data: two\n\n"
    return AMLResponse(events(), 200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
`, nil)
	base := URL(rep.ready(t).Address)
	resp, body := post(t, base+"/score", "ok")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("Cache-Control") != "no-cache" || body != "data: one\n\ndata: two\n\n" {
		t.Errorf("events: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	r, err := http.Post(base+"/score", "text/plain", strings.NewReader("fail"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err == nil || string(b) != "data: one\n\n" {
		t.Errorf("a stream that raised: %q, %v; want its first event and an error", b, err)
	}
	rep.waitLog(t, "RuntimeError: the model lost its place")
}
