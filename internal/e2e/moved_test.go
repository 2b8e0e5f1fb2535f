package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A server stopped and started again on its data dir at another address
// (--addr) loses nothing it ran on this host: the local job's runner (or
// the local executor) and the process cluster's node agent, with its
// runner, call the old address, find it gone, read the server's new URL
// from the work dir's server.url and carry on there. Both jobs complete
// with their whole logs, in their first attempt; the node is the same.
func TestServerMovedWhileJobsRun(t *testing.T) {
	serverMovedWhileJobsRun(t, "--local-executor=false")
}

// The same with the local job in the local executor.
func TestServerMovedWhileExecutorJobsRun(t *testing.T) {
	serverMovedWhileJobsRun(t, "--local-executor")
}

func serverMovedWhileJobsRun(t *testing.T, args ...string) {
	s := startServer(t, args...)
	oldURL := s.url
	gate := filepath.Join(jobWritableDir(t), "gate")
	script := func(who string) string {
		return fmt.Sprintf(`command: |
  for i in $(seq 1 10); do echo "%[1]s before $i"; done
  while [ ! -e %[2]s ]; do sleep 0.05; done
  for i in $(seq 1 10); do echo "%[1]s after $i"; done
`, who, gate)
	}
	s.mustFerry("job", "create", "--name", "local-long", "-f", jobFile(t, script("local"), nil))
	s.mustFerry("compute", "create", "-f", clusterFile(t, "solo", "Standard_DS1_v2", 1, 600))
	s.mustFerry("job", "create", "--name", "cluster-long", "-f", jobFile(t, script("cluster")+"compute: azureml:solo\n", nil))
	s.waitStatus("local-long", "Running")
	s.waitStatus("cluster-long", "Running")
	waitLog(t, s, "local-long", "local before 10")
	waitLog(t, s, "cluster-long", "cluster before 10")
	nodes := nodeNames(s.waitNodes("solo", 1, "Busy"))

	s.stop()
	// While no server runs, the jobs go on and write more of their logs.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	s.addr = freeAddr(t)
	s.start()
	if s.url == oldURL {
		t.Fatalf("the server came back at its old URL %s", oldURL)
	}
	if b, err := os.ReadFile(filepath.Join(s.work, "server.url")); err != nil || strings.TrimSpace(string(b)) != s.url {
		t.Fatalf("the work dir's server.url holds %q (%v), want %s", b, err, s.url)
	}

	for _, who := range []string{"local", "cluster"} {
		name := who + "-long"
		j := s.waitStatus(name, "Completed", "Failed", "Canceled")
		if j.Status != "Completed" {
			t.Errorf("%s: %s (%s)\nserver output:\n%s", name, j.Status, j.StatusReason, s.output)
			continue
		}
		var want strings.Builder
		for _, when := range []string{"before", "after"} {
			for i := 1; i <= 10; i++ {
				fmt.Fprintf(&want, "%s %s %d\n", who, when, i)
			}
		}
		if got := s.mustFerry("job", "stream", name).stdout; got != want.String() {
			t.Errorf("%s's log after the move:\n%s\nwant:\n%s", name, got, want.String())
		}
		var ran []string
		for _, h := range j.History {
			ran = append(ran, h.To)
		}
		if n := strings.Count(strings.Join(ran, " "), "Running"); n != 1 {
			t.Errorf("%s ran %d times (history %v), want once: it was retried", name, n, ran)
		}
	}
	// The node's agent takes new work from the server at its new address:
	// a node that kept calling the old one would be lost, and the job
	// would run on another.
	s.mustFerry("job", "create", "--name", "cluster-after", "-f", jobFile(t, "command: echo after the move\ncompute: azureml:solo\n", nil))
	if j := s.waitStatus("cluster-after", "Completed", "Failed", "Canceled"); j.Status != "Completed" {
		t.Errorf("cluster-after: %s (%s)", j.Status, j.StatusReason)
	}
	if got := nodeNames(s.waitNodes("solo", 1, "Idle")); !slices.Equal(got, nodes) {
		t.Errorf("the cluster's nodes are %v after the move, were %v", got, nodes)
	}
	// The runner of the local job says where it went.
	log, err := os.ReadFile(filepath.Join(s.work, "runs", "local-long", "1", "runner.log"))
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "the local runner's log", string(log), "the server is at another URL now", "from="+oldURL, "to="+s.url)
}

// The CLI's local workspace moved to another address by writing one into
// $FERRY_HOME/server.addr, as the error of a taken address says to, keeps
// the local job it ran: the job completes with its whole log.
func TestLocalWorkspaceMovedKeepsRunningWork(t *testing.T) {
	w := newLocalWorkspace(t)
	gate := filepath.Join(jobWritableDir(t), "gate")
	w.mustFerry("job", "create", "--name", "local-long", "-f", jobFile(t, fmt.Sprintf(`command: |
  echo before
  while [ ! -e %s ]; do sleep 0.05; done
  echo after
`, gate), nil))
	s := w.server()
	oldURL := s.url
	s.waitStatus("local-long", "Running")
	waitLog(t, s, "local-long", "before")

	w.mustFerry("server", "stop")
	addr := freeAddr(t)
	if err := os.WriteFile(filepath.Join(w.home, "server.addr"), []byte(addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustFerry("job", "list")
	s = w.server()
	if s.url != "http://"+addr {
		t.Fatalf("the workspace came back at %s, want http://%s (was %s)", s.url, addr, oldURL)
	}
	if j := s.waitStatus("local-long", "Completed", "Failed", "Canceled"); j.Status != "Completed" {
		t.Fatalf("local-long: %s (%s)\nserver log:\n%s", j.Status, j.StatusReason, w.log())
	}
	if got := s.mustFerry("job", "stream", "local-long").stdout; got != "before\nafter\n" {
		t.Errorf("local-long's log after the move: %q, want %q", got, "before\nafter\n")
	}
}
