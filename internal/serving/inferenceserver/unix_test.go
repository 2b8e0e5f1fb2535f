package inferenceserver

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A replica asked for a Unix socket answers there as on TCP (a gateway on
// the same host scores through it), hands those requests to its workers
// like the others, and removes the socket when it stops.
func TestUnixSocket(t *testing.T) {
	python := requirePython(t)
	sock := filepath.Join(t.TempDir(), "replica.sock")
	// A socket file a replica before this one left does not stop it.
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.Workers = 2; r.UnixSocket = sock })
	st := rep.ready(t)
	workers := map[string]bool{fmt.Sprint(st.Workers[0]): true, fmt.Sprint(st.Workers[1]): true}

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	kept := &keptConn{c: c, r: bufio.NewReader(c)}
	for i := range 6 {
		resp, pid, err := kept.score("quick")
		if err != nil || resp.StatusCode != 200 || !workers[pid] {
			t.Fatalf("request %d on the Unix socket: %v %v %q", i, resp, err, pid)
		}
	}
	if resp, pid := post(t, URL(st.Address)+"/score", "quick"); resp.StatusCode != 200 || !workers[pid] {
		t.Fatalf("on TCP beside the Unix socket: %d %q", resp.StatusCode, pid)
	}

	_ = syscall.Kill(rep.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-rep.done:
	case <-time.After(time.Minute):
		t.Fatal("the replica did not stop within a minute of SIGTERM")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the replica left its Unix socket behind (stat: %v)", err)
	}
}
