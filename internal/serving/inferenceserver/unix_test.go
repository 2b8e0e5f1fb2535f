package inferenceserver

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// A replica asked for a Unix socket answers there as on TCP (a gateway on
// the same host scores through it), hands those requests to its workers
// like the others, and removes the socket when it stops.
func TestUnixSocket(t *testing.T) {
	python := requirePython(t)
	sock := filepath.Join(socketDir(t), "replica.sock")
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

// A replica's status lines say where its Unix socket is and what tells a
// gateway it can reach it (OnThisHost): a replica started here passes,
// one whose boot id is another machine's does not, nor one whose path
// names, here, another socket than the one it bound. A path longer than
// a socket address holds (a deep job folder) is bound all the same.
func TestUnixSocketOnThisHost(t *testing.T) {
	python := requirePython(t)
	deep := t.TempDir()
	for len(deep) < 120 {
		deep = filepath.Join(deep, "a-folder-deep-down")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(deep, "private", "replica.sock")
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.UnixSocket = sock })
	st := rep.ready(t)
	if st.Unix != sock || st.BootID == "" || st.UnixIno == 0 {
		t.Fatalf("the ready status line lacks the socket: %+v\n%s", st, rep.stdout)
	}
	if !st.OnThisHost() {
		t.Fatalf("a replica started here is not on this host: %+v (boot id %q)", st, bootID())
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket's mode: %v %v, want 0600", fi, err)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the socket's folder, made by the replica: %v %v, want 0700, the replica's account's alone", fi, err)
	}

	elsewhere := st
	elsewhere.BootID = "3f1e0b7a-0000-4000-8000-another-host"
	if elsewhere.OnThisHost() {
		t.Error("a replica reported with another machine's boot id counts as on this host")
	}
	// Another machine's replica whose folder has the same path as a
	// socket here: same boot id faked, the file is not the one it bound.
	other := filepath.Join(socketDir(t), "other.sock")
	ln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	samePath := st
	samePath.Unix = other
	if samePath.OnThisHost() {
		t.Error("a path that here names another socket counts as the replica's")
	}
	for name, s := range map[string]Status{
		"no socket":     {Address: st.Address, BootID: st.BootID},
		"relative path": func() Status { s := st; s.Unix = "replica.sock"; return s }(),
		"no boot id":    func() Status { s := st; s.BootID = ""; return s }(),
	} {
		if s.OnThisHost() {
			t.Errorf("%s: counts as on this host", name)
		}
	}
}

// A Unix socket that cannot be made (here: its folder's folder is
// missing) is a saving lost, not a failure: the replica serves on TCP and
// its status lines name no socket, so no gateway tries one.
func TestUnixSocketThatCannotBeMade(t *testing.T) {
	python := requirePython(t)
	sock := filepath.Join(t.TempDir(), "missing", "deeper", "replica.sock")
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.UnixSocket = sock })
	st := rep.ready(t)
	if st.Unix != "" || st.OnThisHost() {
		t.Errorf("the status line names a socket that was not made: %+v", st)
	}
	if resp, _ := post(t, URL(st.Address)+"/score", "quick"); resp.StatusCode != 200 {
		t.Errorf("on TCP: %d", resp.StatusCode)
	}
	if !strings.Contains(rep.stderr.String(), "serving on TCP alone") {
		t.Errorf("the log does not say why there is no socket:\n%s", rep.stderr)
	}
}

// With a Unix socket, each worker listens on one of its own too, named in
// the status lines: every request on a connection to worker i's socket is
// answered by worker i (a gateway balancing across workers relies on
// it), on the same connection one after another. On SIGTERM a request
// under way there is answered, with Connection: close, before the worker
// ends; then the sockets are gone and a new connection is refused.
func TestWorkerSockets(t *testing.T) {
	python := requirePython(t)
	sock := filepath.Join(socketDir(t), "replica.sock")
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.Workers = 2; r.UnixSocket = sock })
	st := rep.ready(t)
	if len(st.WorkerSockets) != 2 || st.WorkerSockets[0].Path != sock+".w0" || st.WorkerSockets[1].Path != sock+".w1" {
		t.Fatalf("the ready status line's worker sockets: %+v\n%s", st.WorkerSockets, rep.stdout)
	}
	paths := st.WorkersOnThisHost()
	if len(paths) != 2 || paths[0] != sock+".w0" {
		t.Fatalf("WorkersOnThisHost: %v", paths)
	}
	workers := map[string]bool{fmt.Sprint(st.Workers[0]): true, fmt.Sprint(st.Workers[1]): true}

	answeredBy := map[string]string{}
	conns := map[string]*keptConn{}
	for _, p := range paths {
		conns[p] = dialKept(t, "unix", p)
		for i := range 5 {
			resp, pid, err := conns[p].score("quick")
			if err != nil || resp.StatusCode != 200 || !workers[pid] {
				t.Fatalf("request %d on %s: %v %v %q", i, p, resp, err, pid)
			}
			if answeredBy[p] == "" {
				answeredBy[p] = pid
			} else if answeredBy[p] != pid {
				t.Fatalf("requests on %s were answered by workers %s and %s: a worker's socket must be that worker's", p, answeredBy[p], pid)
			}
		}
	}
	if answeredBy[paths[0]] == answeredBy[paths[1]] {
		t.Fatalf("both worker sockets were answered by worker %s", answeredBy[paths[0]])
	}
	// A second connection to the same worker is served beside the first.
	if resp, pid, err := dialKept(t, "unix", paths[1]).score("quick"); err != nil || resp.StatusCode != 200 || pid != answeredBy[paths[1]] {
		t.Fatalf("a second connection to %s: %v %v %q", paths[1], resp, err, pid)
	}

	// Stop with a request under way on worker 0's socket.
	held := make(chan string, 1)
	go func() {
		resp, b, err := conns[paths[0]].score("hold")
		if err != nil {
			held <- err.Error()
			return
		}
		held <- fmt.Sprintf("%d %s close=%v", resp.StatusCode, b, resp.Close)
	}()
	testutil.WaitFor(t, time.Minute, "the held request in run()", func() bool { _, err := os.Stat(filepath.Join(rep.dir, "held")); return err == nil })
	_ = syscall.Kill(rep.cmd.Process.Pid, syscall.SIGTERM)
	rep.waitLog(t, "worker stopping: its own socket takes no more connections")
	if err := os.WriteFile(filepath.Join(rep.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := <-held, "200 "+answeredBy[paths[0]]+" close=true"; got != want {
		t.Fatalf("the request under way at SIGTERM: %q, want %q", got, want)
	}
	select {
	case <-rep.done:
	case <-time.After(time.Minute):
		t.Fatal("the replica did not stop within a minute of SIGTERM")
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the replica left worker socket %s behind (stat: %v)", p, err)
		}
	}
}

// A worker socket that is not, seen from here, the one the replica bound
// (or a replica not on this host) gives no worker sockets at all: the
// gateway then goes through the front rather than to a stranger.
func TestWorkerSocketsOnThisHostOnly(t *testing.T) {
	python := requirePython(t)
	sock := filepath.Join(socketDir(t), "replica.sock")
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.Workers = 2; r.UnixSocket = sock })
	st := rep.ready(t)
	if len(st.WorkersOnThisHost()) != 2 {
		t.Fatalf("WorkersOnThisHost: %v (%+v)", st.WorkersOnThisHost(), st.WorkerSockets)
	}
	other := filepath.Join(socketDir(t), "other.sock")
	ln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	stranger := st
	stranger.WorkerSockets = slices.Clone(st.WorkerSockets)
	stranger.WorkerSockets[1].Path = other
	elsewhere := st
	elsewhere.BootID = "3f1e0b7a-0000-4000-8000-another-host"
	for name, s := range map[string]Status{"a stranger's socket": stranger, "another host": elsewhere} {
		if got := s.WorkersOnThisHost(); got != nil {
			t.Errorf("%s: WorkersOnThisHost = %v, want none", name, got)
		}
	}
}

// The socket's folder is the replica's account's alone: the replica makes
// it 0700, and refuses a folder that other accounts may enter (it does
// not change the mode of a folder it did not make), one it does not own,
// or a link in its place, serving on TCP alone: whoever may enter the
// folder could put another socket where the gateway connects. A gateway,
// for its part, takes a socket for the replica's (OnThisHost) only while
// its folder is private.
func TestUnixSocketFolderIsPrivate(t *testing.T) {
	python := requirePython(t)
	dir := filepath.Join(t.TempDir(), "sockets")
	rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.UnixSocket = filepath.Join(dir, "replica.sock") })
	st := rep.ready(t)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the socket's folder: %v %v, want mode 0700", fi, err)
	}
	if !st.OnThisHost() {
		t.Fatalf("a replica's socket in its private folder is not on this host: %+v", st)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if st.OnThisHost() || st.WorkersOnThisHost() != nil {
		t.Error("a socket in a folder other accounts may enter counts as the replica's")
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{"a folder others may enter": open, "a link": link}
	if os.Geteuid() == 0 {
		// A folder of another account (nobody's): that account could
		// replace the socket.
		theirs := filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(theirs, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases["another account's folder"] = theirs
	} else {
		t.Log("not root: the case of another account's folder needs root to make one")
	}
	for name, d := range cases {
		rep := startReplica(t, python, dispatchScript, func(r *Replica) { r.UnixSocket = filepath.Join(d, "replica.sock") })
		st := rep.ready(t)
		if st.Unix != "" {
			t.Errorf("%s: the replica listens on a socket there: %+v", name, st)
		}
		if !strings.Contains(rep.stderr.String(), "serving on TCP alone") {
			t.Errorf("%s: the log does not say why there is no socket:\n%s", name, rep.stderr)
		}
		if _, err := os.Lstat(filepath.Join(d, "replica.sock")); !os.IsNotExist(err) {
			t.Errorf("%s: a socket was made there (%v)", name, err)
		}
	}
	if fi, err := os.Stat(open); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the folder others may enter: %v %v, want its mode 0755 left as it was", fi, err)
	}
}
