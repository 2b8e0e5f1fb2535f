// Command batch measures batch endpoints: mini-batches per second scored
// through Ferry (a batch endpoint's job on the local target, the embedded
// batch driver with -workers workers) against the same scoring function
// over the same mini-batches in one plain Python process, per worker.
// See README.md.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// scoreScript does a little arithmetic per file, as a small model would.
const scoreScript = `import os

def init():
    global weights
    weights = [((i * 7919) %% 101) / 100.0 for i in range(64)]

def run(mini_batch):
    rows = []
    for path in mini_batch:
        with open(path) as f:
            xs = [float(x) for x in f.read().split()]
        s = 0.0
        for _ in range(%d):
            for i, x in enumerate(xs):
                s += x * weights[i %% 64]
        rows.append((os.path.basename(path), round(s, 3)))
    return rows
`

// plainPeer runs the same script over the same mini-batches in one
// process and prints the mini-batches per second of the run() calls.
const plainPeer = `import importlib.util, os, sys, time
root, size = sys.argv[1], int(sys.argv[2])
spec = importlib.util.spec_from_file_location("score", sys.argv[3])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
m.init()
files = sorted(os.listdir(root))
batches = [[os.path.join(root, f) for f in files[i:i + size]] for i in range(0, len(files), size)]
t = time.monotonic()
for b in batches:
    m.run(b)
print(len(batches) / (time.monotonic() - t))
`

func main() {
	files := flag.Int("files", 2000, "input files")
	size := flag.Int("mini-batch-size", 10, "files per mini-batch")
	workers := flag.Int("workers", 2, "max_concurrency_per_instance")
	work := flag.Int("work", 20, "passes over each file's numbers per run() (the scoring cost)")
	rounds := flag.Int("rounds", 3, "measurements of each, alternated")
	flag.Parse()
	if err := run(*files, *size, *workers, *work, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench/batch:", err)
		os.Exit(1)
	}
}

func run(files, size, workers, work, rounds int) error {
	root, err := os.MkdirTemp("", "ferry-bench-batch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	// Jobs run as ferry-job when the bench runs as root: it must reach
	// the work dir and read the app.
	if err := os.Chmod(root, 0o711); err != nil {
		return err
	}
	bin := filepath.Join(root, "ferry")
	if err := testutil.BuildFerry(bin); err != nil {
		return err
	}
	app := filepath.Join(root, "app")
	data := filepath.Join(app, "data")
	for _, d := range []string{filepath.Join(app, "code"), data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(app, "code", "score.py"), fmt.Appendf(nil, scoreScript, work), 0o644); err != nil {
		return err
	}
	for i := range files {
		var b strings.Builder
		for j := range 64 {
			fmt.Fprintf(&b, "%d ", (i*31+j)%97)
		}
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("f%05d.txt", i)), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	files2 := map[string]string{
		"endpoint.yml": "name: bench-batch\n",
		"deployment.yml": fmt.Sprintf(`name: plain
endpoint_name: bench-batch
code_configuration: {code: code, scoring_script: score.py}
compute: local
settings:
  max_concurrency_per_instance: %d
  mini_batch_size: %d
  output_action: append_row
`, workers, size),
	}
	for name, text := range files2 {
		if err := os.WriteFile(filepath.Join(app, name), []byte(text), 0o644); err != nil {
			return err
		}
	}

	srv, err := startServer(bin, root)
	if err != nil {
		return err
	}
	defer srv.stop()
	if _, err := srv.ferry("batch-endpoint", "create", "-f", filepath.Join(app, "endpoint.yml")); err != nil {
		return err
	}
	if _, err := srv.ferry("batch-deployment", "create", "-f", filepath.Join(app, "deployment.yml")); err != nil {
		return err
	}

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("%d files, mini-batches of %d (%d mini-batches), %d workers, work %d; load %s", files, size, (files+size-1)/size, workers, work, load)
	fmt.Printf("%-6s %14s %14s %14s %12s %12s\n", "round", "plain mb/s", "ferry mb/s", "ferry e2e mb/s", "per worker", "e2e/worker")
	var perWorker, e2eWorker []float64
	for r := range rounds {
		// The peer runs just before and just after Ferry's job, and their
		// mean is its figure: on a shared machine the load drifts.
		before, err := plainRate(app, data, size)
		if err != nil {
			return err
		}
		scoring, e2e, err := srv.ferryRate(data, fmt.Sprintf("bench-%d", r), (files+size-1)/size)
		if err != nil {
			return err
		}
		after, err := plainRate(app, data, size)
		if err != nil {
			return err
		}
		plain := (before + after) / 2
		pw, ew := scoring/float64(workers)/plain, e2e/float64(workers)/plain
		perWorker, e2eWorker = append(perWorker, pw), append(e2eWorker, ew)
		fmt.Printf("%-6d %14.1f %14.1f %14.1f %11.2fx %11.2fx\n", r+1, plain, scoring, e2e, pw, ew)
	}
	fmt.Printf("median per worker: scoring %.2fx, end to end %.2fx (aim: at least 0.5x)\n", median(perWorker), median(e2eWorker))
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("load after: %s", load)
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func plainRate(app, data string, size int) (float64, error) {
	cmd := exec.Command("python3", "-c", plainPeer, data, strconv.Itoa(size), filepath.Join(app, "code", "score.py"))
	// A session of its own, as a job's shell has: with the kernel's
	// autogroup scheduling, a session is what gets a fair share of the
	// CPUs, and on a loaded machine a peer left in the bench's session
	// would share one share with everything else the bench's caller runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("plain python: %w", err)
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

type server struct {
	bin, home, url, token string
	cmd                   *exec.Cmd
}

func startServer(bin, root string) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := filepath.Join(root, "data")
	s := &server{bin: bin, home: filepath.Join(root, "home"), url: "http://" + addr}
	s.cmd = exec.Command(bin, "server", "--data-dir", dir, "--work-dir", filepath.Join(root, "work"), "--addr", addr)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if tok, err := os.ReadFile(filepath.Join(dir, "owner.token")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "server.json")); err == nil {
				s.token = strings.TrimSpace(string(tok))
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("server did not start:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the server and what it started (its local executor and
// runners are in its process group's session or below its guard).
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func (s *server) ferry(args ...string) (string, error) {
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), "FERRY_URL="+s.url, "FERRY_TOKEN="+s.token, "FERRY_HOME="+s.home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ferry %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

var scoringRe = regexp.MustCompile(`scoring took ([0-9.]+) s: ([0-9.]+) mini-batches/s`)

// ferryRate invokes the endpoint and returns the mini-batches per second
// of its scoring (the driver's first mini-batch out to its last result)
// and of the whole job (started to ended: snapshot, input and driver
// start included).
func (s *server) ferryRate(data, job string, batches int) (scoring, e2e float64, err error) {
	log, err := s.ferry("batch-endpoint", "invoke", "bench-batch", "--input", data, "--job-name", job, "--stream")
	if err != nil {
		return 0, 0, err
	}
	m := scoringRe.FindStringSubmatch(log)
	if m == nil {
		return 0, 0, fmt.Errorf("job %s: no scoring time in its log:\n%s", job, log)
	}
	scoring, _ = strconv.ParseFloat(m[2], 64)
	out, err := s.ferry("job", "show", job, "-o", "json")
	if err != nil {
		return 0, 0, err
	}
	var j struct {
		Started, Ended time.Time
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		return 0, 0, err
	}
	return scoring, float64(batches) / j.Ended.Sub(j.Started).Seconds(), nil
}
