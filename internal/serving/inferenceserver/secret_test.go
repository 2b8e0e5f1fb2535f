package inferenceserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/serving/probe"
)

// secretScript is a @rawhttp script that counts its run() calls in the
// file "ran" and answers with the headers it was given.
const secretScript = `
import json, os
from azureml.contrib.services.aml_request import rawhttp
from azureml.contrib.services.aml_response import AMLResponse

def init():
    pass

@rawhttp
def run(request):
    with open("ran", "a") as f:
        f.write("x")
    return AMLResponse(json.dumps({"headers": sorted(k.lower() for k in request.headers.keys()),
                                   "env": os.environ.get("FERRY_REPLICA_SECRET", "")}), 200)
`

const testSecret = "s3cret-of-the-replica-0123456789"

// A replica with a secret answers only requests that carry it: without it
// 401, with a wrong one 403, on its TCP port, its Unix socket and its
// worker's socket alike, for liveness (GET /) as for scoring, before the
// request's body is asked for (Expect: 100-continue), and none of these
// reaches run(). With it, the request is scored, and the scoring script
// sees neither the header nor the variable.
func TestReplicaSecret(t *testing.T) {
	python := requirePython(t)
	sock := filepath.Join(socketDir(t), "replica.sock")
	rep := startReplica(t, python, secretScript, func(r *Replica) { r.Secret = testSecret; r.UnixSocket = sock })
	st := rep.ready(t)
	if len(st.WorkerSockets) != 1 {
		t.Fatalf("worker sockets: %+v", st.WorkerSockets)
	}
	places := map[string][2]string{ // network, address
		"TCP port": {"tcp", st.Address}, "Unix socket": {"unix", sock}, "worker's socket": {"unix", st.WorkerSockets[0].Path},
	}
	ran := func() int { b, _ := os.ReadFile(filepath.Join(rep.dir, "ran")); return len(b) }

	for where, at := range places {
		for _, c := range []struct {
			name, request string
			want          int
		}{
			{"liveness without the secret", "GET / HTTP/1.1\r\nHost: r\r\n\r\n", 401},
			{"scoring without the secret", "POST /score HTTP/1.1\r\nHost: r\r\nContent-Length: 2\r\n\r\n{}", 401},
			{"scoring with a wrong secret", "POST /score HTTP/1.1\r\nHost: r\r\n" + SecretHeader + ": " + testSecret + "x\r\nContent-Length: 2\r\n\r\n{}", 403},
			{"a wrong secret of the same length", "GET /score HTTP/1.1\r\nHost: r\r\n" + SecretHeader + ": " + strings.Repeat("x", len(testSecret)) + "\r\n\r\n", 403},
			{"a body announced without the secret", "POST /score HTTP/1.1\r\nHost: r\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", 401},
		} {
			code, body := exchangeOn(t, at[0], at[1], c.request)
			if code != c.want || !strings.Contains(body, "answers only Ferry's gateway") {
				t.Errorf("%s, %s: %d %q, want %d", where, c.name, code, body, c.want)
			}
		}
		code, body := exchangeOn(t, at[0], at[1], "POST /score HTTP/1.1\r\nHost: r\r\n"+SecretHeader+": "+testSecret+"\r\nX-Other: 1\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
		if code != 200 || !strings.Contains(body, `"x-other"`) || strings.Contains(strings.ToLower(body), "secret") {
			t.Errorf("%s, with the secret: %d %q, want 200 with the other headers and no secret", where, code, body)
		}
	}
	if n := ran(); n != len(places) {
		t.Errorf("run() ran %d times, want %d (the requests with the secret only)", n, len(places))
	}
	if strings.Contains(rep.stderr.String(), testSecret) || strings.Contains(rep.stdout.String(), testSecret) {
		t.Error("the replica's log holds its secret")
	}

	// A probe with the secret passes; one without fails.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := probe.Probe(ctx, http.DefaultClient, URL(st.Address), testSecret); err != nil {
		t.Errorf("a probe with the secret: %v", err)
	}
	if err := probe.Probe(ctx, http.DefaultClient, URL(st.Address), ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a probe without the secret: %v, want 401", err)
	}
}

// A replica told to require a secret (a replica of Ferry's) does not
// start without one: it would answer whoever reaches it.
func TestRequireSecretWithoutOne(t *testing.T) {
	python := requirePython(t)
	server, err := Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	code := t.TempDir()
	if err := os.WriteFile(filepath.Join(code, "score.py"), []byte(secretScript), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string]string{"unset": "", "empty": SecretEnv + "="} {
		cmd := exec.Command(python, filepath.Join(server, Program), "--script", filepath.Join(code, "score.py"), "--port", "0", RequireSecretFlag)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, SecretEnv+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if secret != "" {
			cmd.Env = append(cmd.Env, secret)
		}
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "$"+SecretEnv+" is empty") {
			t.Errorf("%s: started without a secret: %v\n%s", name, err, out)
		}
	}
}

// The probe package sends the header the replicas read.
func TestProbeSendsTheSecretHeader(t *testing.T) {
	if probe.SecretHeader != SecretHeader {
		t.Fatalf("probe.SecretHeader %q, inferenceserver.SecretHeader %q", probe.SecretHeader, SecretHeader)
	}
}

// exchangeOn sends request on a new connection to address and returns
// the answer's status and body.
func exchangeOn(t *testing.T, network, address, request string) (int, string) {
	t.Helper()
	c, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c) // a refusal closes the connection, and the requests that pass ask to
	text := string(b)
	var code int
	if _, err := fmt.Sscanf(text, "HTTP/1.1 %d", &code); err != nil {
		t.Fatalf("%s %s: no HTTP answer: %q", network, address, text)
	}
	_, body, _ := strings.Cut(text, "\r\n\r\n")
	return code, body
}

// ProbeProgram, the exec probe of replicas on Kubernetes, passes on a
// replica only with its secret in the environment: without it, or with
// a wrong one, it fails (exit 1) saying what it got, and it never
// prints the secret.
func TestProbeProgram(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, secretScript, func(r *Replica) { r.Secret = testSecret })
	st := rep.ready(t)
	_, port, err := net.SplitHostPort(st.Address)
	if err != nil {
		t.Fatal(err)
	}
	server, err := Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, secret string
		code         int
		says         string
	}{
		{"the replica's secret", testSecret, 0, ""},
		{"no secret", "", 1, SecretEnv + " is empty"},
		{"a wrong secret", testSecret + "x", 1, "403"},
	} {
		cmd := exec.Command(python, filepath.Join(server, ProbeProgram), "--port", port, "--timeout", "30")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, SecretEnv+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if c.secret != "" {
			cmd.Env = append(cmd.Env, SecretEnv+"="+c.secret)
		}
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != c.code || !strings.Contains(string(out), c.says) || strings.Contains(string(out), testSecret) {
			t.Errorf("%s: exit %d, %q; want exit %d saying %q, without the secret", c.name, code, out, c.code, c.says)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(rep.dir, "ran")); len(b) != 0 {
		t.Errorf("the probes reached run() %d times", len(b))
	}
}
