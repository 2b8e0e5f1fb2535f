package batchdriver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// gatedNode runs the driver with socket.create_connection refused while
// the file GATE does not exist (the driver's own code otherwise): so a
// test decides when a node's slots can first reach the master. TRIED is
// written at the first refused try: the slot is in its connect loop.
const gatedNode = `import os, runpy, socket, sys
gate, tried, driver = sys.argv[1], sys.argv[2], sys.argv[3]
real = socket.create_connection
def gated(addr, *a, **k):
    if not os.path.exists(gate):
        open(tried, "a").close()
        raise ConnectionRefusedError("refused by the test until " + gate + " exists")
    return real(addr, *a, **k)
socket.create_connection = gated
sys.argv = [driver] + sys.argv[4:]
runpy.run_path(driver, run_name="__main__")
`

// tinyJob is a two-node batch job's folder: the driver, a scoring script
// and an input of one file, a single mini-batch that node rank 0's own
// worker scores before any other node can ask for it.
type tinyJob struct {
	py, dir, driver string
}

func newTinyJob(t *testing.T) tinyJob {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (apt-get install python3)")
	}
	dir := t.TempDir()
	inst, err := Install(filepath.Join(dir, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "score.py"), []byte("def run(mb):\n    return [p[-4:] for p in mb]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in", "f000"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	return tinyJob{py: py, dir: dir, driver: filepath.Join(inst, Program)}
}

// node is the command of node rank's driver, listening on or reaching
// port; with a gate, it runs under gatedNode.
func (j tinyJob) node(ctx context.Context, rank, port int, gate, tried string) *exec.Cmd {
	args := []string{"--script", "score.py", "--input", "in", "--outputs", fmt.Sprintf("out-%d", rank),
		"--nodes", "2", "--concurrency", "1", "--connect-timeout", "30"}
	var cmd *exec.Cmd
	if gate != "" {
		cmd = exec.CommandContext(ctx, j.py, append([]string{"-u", "-c", gatedNode, gate, tried, j.driver}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, j.py, append([]string{"-u", j.driver}, args...)...)
	}
	cmd.Dir = j.dir
	cmd.WaitDelay = 5 * time.Second // a worker left behind by a killed node must not hold its log open
	cmd.Env = append(os.Environ(), "FERRY_API_URL=", "FERRY_JOB_ID=tiny", "BATCH_DRIVER_KEY=k3y",
		"NODE_RANK="+strconv.Itoa(rank), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
	return cmd
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitFile waits for path to exist, failing past a minute (a guard, not
// a measure).
func waitFile(t *testing.T, path, what string, logs ...*testutil.SyncBuffer) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, l := range logs {
				b.WriteString(l.String())
			}
			t.Fatalf("%s did not happen:\n%s", what, b.String())
		}
	}
}

// The race of issue 29 #6, made certain: node rank 1's slot starts its
// connect loop before rank 0 listens, and rank 0 scores the whole input
// (one mini-batch) before rank 1 first reaches it. Rank 0 keeps its queue
// open until rank 1's slot has been told the work is done, and rank 1
// ends because it was told so. The old driver closed the port once its
// own work was done, and rank 1 retried until --connect-timeout (30 s
// here, 1,800 s in a job) and failed.
func TestDriverOtherNodeLearnsTheWorkIsDoneAfterRankZeroFinished(t *testing.T) {
	j := newTinyJob(t)
	port := freePort(t)
	gate, tried := filepath.Join(j.dir, "gate"), filepath.Join(j.dir, "tried")
	// The guard only: a node that has not ended in two minutes hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var log0, log1 testutil.SyncBuffer
	rank1 := j.node(ctx, 1, port, gate, tried)
	rank1.Stdout, rank1.Stderr = &log1, &log1
	if err := rank1.Start(); err != nil {
		t.Fatal(err)
	}
	done1 := make(chan error, 1)
	go func() { done1 <- rank1.Wait() }()
	waitFile(t, tried, "node rank 1 trying to reach rank 0", &log1)

	rank0 := j.node(ctx, 0, port, "", "")
	rank0.Stdout, rank0.Stderr = &log0, &log0
	if err := rank0.Start(); err != nil {
		t.Fatal(err)
	}
	done0 := make(chan error, 1)
	go func() { done0 <- rank0.Wait() }()
	// Rank 0 says it completed (the old driver had closed its port by
	// then); only now may rank 1's slot reach it.
wait:
	for !strings.Contains(log0.String(), "batch: completed: 1 mini-batches scored") {
		select {
		case err := <-done0:
			if !strings.Contains(log0.String(), "batch: completed:") {
				t.Fatalf("node rank 0 ended (%v) without completing:\n%s", err, log0.String())
			}
			done0 <- err
			break wait
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done1; err != nil {
		t.Fatalf("node rank 1: %v\n%s\nnode rank 0:\n%s", err, log1.String(), log0.String())
	}
	if err := <-done0; err != nil {
		t.Fatalf("node rank 0: %v\n%s", err, log0.String())
	}
	if !strings.Contains(log1.String(), "node 1: node rank 0 says the work is done (1 of 1 worker(s) told)") {
		t.Errorf("node rank 1 ended without being told the work is done:\n%s", log1.String())
	}
	if out, err := os.ReadFile(filepath.Join(j.dir, "out-0", "predictions.csv")); err != nil || string(out) != "f000\n" {
		t.Errorf("predictions.csv: %q, %v", out, err)
	}
}

// The tiny case as a job runs it, 50 times in a row (10 with -short):
// both nodes started together, in either order, rank 1 sometimes before
// rank 0 listens; each time both end, and rank 1 because rank 0 told it
// the work is done. One run in 14 of the old driver left rank 1 retrying
// until --connect-timeout.
func TestDriverTinyInputTwoNodesManyTimes(t *testing.T) {
	j := newTinyJob(t)
	runs := 50
	if testing.Short() {
		runs = 10
	}
	for i := range runs {
		port := freePort(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard against a hang
		var log0, log1 testutil.SyncBuffer
		rank0, rank1 := j.node(ctx, 0, port, "", ""), j.node(ctx, 1, port, "", "")
		rank0.Stdout, rank0.Stderr = &log0, &log0
		rank1.Stdout, rank1.Stderr = &log1, &log1
		first, second := rank0, rank1
		if i%2 == 1 {
			first, second = rank1, rank0
		}
		if err := first.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := second.Start(); err != nil {
			cancel()
			_ = first.Process.Kill()
			_ = first.Wait()
			t.Fatal(err)
		}
		err0, err1 := rank0.Wait(), rank1.Wait()
		cancel()
		if err0 != nil || err1 != nil {
			t.Fatalf("run %d: node rank 0: %v\n%s\nnode rank 1: %v\n%s", i, err0, log0.String(), err1, log1.String())
		}
		if !strings.Contains(log1.String(), "node 1: node rank 0 says the work is done") {
			t.Fatalf("run %d: node rank 1 ended without being told the work is done:\n%s", i, log1.String())
		}
	}
}
