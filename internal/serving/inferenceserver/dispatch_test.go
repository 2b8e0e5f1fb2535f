package inferenceserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
	"github.com/google/go-cmp/cmp"
)

// dispatchScript holds "hold" in run() until the file "release" exists,
// holds "pair NAME" until two pair requests have arrived, and answers
// every request with the pid of the worker that ran it.
const dispatchScript = gatePython + `
import glob
def init():
    pass
def run(raw_data):
    kind, _, name = raw_data.partition(" ")
    if kind == "hold":
        open("held", "w").close()
        wait_for("release")
    elif kind == "pair":
        open("pair-" + name, "w").close()
        while len(glob.glob("pair-*")) < 2:
            time.sleep(0.01)
    return os.getpid()
`

// keptConn is one client connection kept alive across requests, as a
// gateway's pool keeps them.
type keptConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialKept(t *testing.T, network, address string) *keptConn {
	t.Helper()
	c, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keptConn{c: c, r: bufio.NewReader(c)}
}

// score sends body to /score on the connection and returns the answer.
// The deadline only guards against a hang.
func (k *keptConn) score(body string) (*http.Response, string, error) {
	_ = k.c.SetDeadline(time.Now().Add(2 * time.Minute))
	req := fmt.Sprintf("POST /score HTTP/1.1\r\nHost: replica\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(k.c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TestRequestsSpreadPerRequest: with two workers, requests on connections
// a client keeps alive go to whichever worker is free, not to the worker
// that accepted the connection. Four connections are opened while one
// worker is held in run(), so the other one accepts them all; then two
// requests on two of them, each held until both have arrived, must reach
// both workers. A replica that keeps a connection with the worker that
// accepted it never lets the second arrive.
func TestRequestsSpreadPerRequest(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.Workers = 2 })
	st := rep.ready(t)
	if len(st.Workers) != 2 {
		t.Fatalf("ready status lists workers %v, want 2", st.Workers)
	}
	workers := map[string]bool{fmt.Sprint(st.Workers[0]): true, fmt.Sprint(st.Workers[1]): true}
	exists := func(name string) func() bool {
		return func() bool { _, err := os.Stat(filepath.Join(rep.dir, name)); return err == nil }
	}

	held := dialKept(t, "tcp", st.Address)
	heldPid := make(chan string, 1)
	go func() {
		_, b, err := held.score("hold")
		if err != nil {
			b = err.Error()
		}
		heldPid <- b
	}()
	testutil.WaitFor(t, time.Minute, "the held request in run()", exists("held"))

	conns := make([]*keptConn, 4)
	other := ""
	for i := range conns {
		conns[i] = dialKept(t, "tcp", st.Address)
		resp, pid, err := conns[i].score("quick")
		if err != nil || resp.StatusCode != 200 || !workers[pid] {
			t.Fatalf("connection %d while a worker is held: %v %v %q", i, resp, err, pid)
		}
		if other == "" {
			other = pid
		} else if pid != other {
			t.Fatalf("with one worker held, connection %d was answered by %s, not the free worker %s", i, pid, other)
		}
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := <-heldPid; !workers[got] || got == other {
		t.Fatalf("the held request was answered by %q, want the other worker than %s", got, other)
	}

	pids := make(chan string, 2)
	for i, c := range conns[:2] {
		go func() {
			resp, b, err := c.score(fmt.Sprintf("pair %d", i))
			switch {
			case err != nil:
				b = err.Error()
			case resp.StatusCode != 200:
				b = fmt.Sprintf("%s: %s", resp.Status, b)
			}
			pids <- b
		}()
	}
	testutil.WaitFor(t, time.Minute, "both requests of the pair in run()", func() bool {
		m, _ := filepath.Glob(filepath.Join(rep.dir, "pair-*"))
		return len(m) == 2
	})
	got := map[string]bool{<-pids: true, <-pids: true}
	if diff := cmp.Diff(workers, got); diff != "" {
		t.Errorf("workers that answered the pair (-want +got):\n%s", diff)
	}
	// The connections stay open: each answers again.
	for i, c := range conns {
		if resp, pid, err := c.score("quick"); err != nil || resp.StatusCode != 200 || !workers[pid] {
			t.Errorf("connection %d afterwards: %v %v %q", i, resp, err, pid)
		}
	}
}

// TestStopClosesKeptConnections: on SIGTERM, a request that arrives on a
// connection kept open is still answered while another drains, with
// "Connection: close" so that the client sends nothing more on it; new
// connections are refused.
func TestStopClosesKeptConnections(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.Workers = 2 })
	st := rep.ready(t)
	held := dialKept(t, "tcp", st.Address)
	kept := dialKept(t, "tcp", st.Address)
	if resp, _, err := kept.score("quick"); err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before SIGTERM: %v %v (want 200, kept open)", resp, err)
	}
	answer := make(chan string, 1)
	go func() {
		resp, b, err := held.score("hold")
		if err != nil {
			b = err.Error()
		} else {
			b = fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		answer <- b
	}()
	testutil.WaitFor(t, time.Minute, "the held request in run()", func() bool { _, err := os.Stat(filepath.Join(rep.dir, "held")); return err == nil })
	if err := rep.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rep.waitLog(t, "draining 1 request(s)")
	resp, _, err := kept.score("quick")
	if err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Errorf("on a kept connection while draining: %v %v (want 200 with Connection: close)", resp, err)
	}
	if c, err := net.Dial("tcp", st.Address); err == nil {
		c.Close()
		t.Errorf("a new connection was accepted while draining")
	}
	if err := os.WriteFile(filepath.Join(rep.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := <-answer; !strings.HasPrefix(got, "200 ") {
		t.Errorf("the request under way got %q, want 200", got)
	}
	<-rep.done
	if rep.waitErr != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", rep.waitErr)
	}
}

// TestPipelinedRequests: two requests sent at once on one connection (a
// client that pipelines) are both answered, in order, and the connection
// stays usable: bytes a worker read past its request are not lost when it
// gives the connection back.
func TestPipelinedRequests(t *testing.T) {
	python := requirePython(t)
	rep := startReplica(t, python, echoScript, func(r *Replica) { r.Workers = 2 })
	st := rep.ready(t)
	k := dialKept(t, "tcp", st.Address)
	req := func(body string) string {
		return fmt.Sprintf("POST /score HTTP/1.1\r\nHost: replica\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	_ = k.c.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := io.WriteString(k.c, req("a")+req("bbb")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1", "3"} {
		resp, err := http.ReadResponse(k.r, nil)
		if err != nil {
			t.Fatalf("answer %s: %v", want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("pipelined answer: %d %q, want 200 %q", resp.StatusCode, b, want)
		}
	}
	if resp, body, err := k.score("four"); err != nil || resp.StatusCode != 200 || body != "4" {
		t.Errorf("the next request on the connection: %v %v %q", resp, err, body)
	}
}
