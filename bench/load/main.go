// Command load puts a real `ferry server` (the built binary, on loopback,
// with a fresh data directory) under many concurrent API clients and
// reports latency per operation, errors and the server's memory.
//
//	go run ./bench/load [-clients 200] [-duration 60s] [-seed 100000]
//	                    [-think 500ms] [-submit-rate 20] [-peer-duration 15s]
//
// Before the server starts, -seed finished jobs (Completed, one in ten
// with a metric) are written into its store through internal/store/sqlite
// directly, one transaction per job, as the server would have left them.
// During the run every client loops over a mix of operations, waiting a
// random time in [0, -think) between two (0: back to back, a closed loop
// that finds the server's throughput): submitting a tiny job on local
// (at most -submit-rate a second, so the run stays bounded; a client that
// finds no submission left shows a job instead), `job list` (newest 50, as
// the CLI asks), `job show` (with history) of a random job, reading a
// finished job's log as `job stream` does, and posting a metric with the
// run token of a running job (the job writes its FERRY_RUN_TOKEN to a file
// only this process and the job can read; it is never printed).
//
// The peer is a trivial net/http handler on loopback under the same
// clients and think time: the floor that the client, the kernel and Go's
// HTTP stack give on this machine. Server RSS is read from /proc/PID/status
// after seeding and after the load, its CPU time from /proc/PID/stat, and
// the machine's load average is printed beside them, since other work on
// the same CPUs shows in the tail latencies.
//
// It prints figures and ratios; it asserts nothing.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
)

type config struct {
	clients      int
	duration     time.Duration
	seed         int
	think        time.Duration
	submitRate   int
	peerDuration time.Duration
}

func main() {
	var c config
	flag.IntVar(&c.clients, "clients", 200, "concurrent clients")
	flag.DurationVar(&c.duration, "duration", 60*time.Second, "how long the clients run against the server")
	flag.IntVar(&c.seed, "seed", 100000, "finished jobs written into the store before the server starts")
	flag.DurationVar(&c.think, "think", 500*time.Millisecond, "each client waits a random time below this between two requests (0: none)")
	flag.IntVar(&c.submitRate, "submit-rate", 20, "job submissions a second, at most, across all clients")
	flag.DurationVar(&c.peerDuration, "peer-duration", 15*time.Second, "how long the clients run against the trivial peer handler")
	flag.Parse()
	if c.clients < 1 || c.duration <= 0 || c.seed < 0 || c.think < 0 || c.submitRate < 0 {
		fmt.Fprintln(os.Stderr, "load: -clients and -duration must be positive; -seed, -think and -submit-rate not negative")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// The operations of the mix, with their weights.
const (
	opSubmit = "submit"
	opList   = "job list"
	opShow   = "job show"
	opLog    = "log stream"
	opMetric = "metric post"
	opPeer   = "peer GET"
)

var mix = []struct {
	op     string
	weight int
}{{opSubmit, 5}, {opList, 20}, {opShow, 30}, {opLog, 20}, {opMetric, 25}}

func run(c config) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// A root server runs jobs as an unprivileged account, which must pass
	// through to the folder the metric job leaves its token in.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return err
	}
	bin := filepath.Join(tmp, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
		return fmt.Errorf("build ferry (run from the repository root): %v\n%s", err, out)
	}
	fmt.Printf("load benchmark: %d clients for %v, think time uniform in [0, %v), %d seeded finished jobs, %d CPUs\n\n",
		c.clients, c.duration, c.think, c.seed, runtime.NumCPU())

	dataDir := filepath.Join(tmp, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	t0 := time.Now()
	if err := seed(filepath.Join(dataDir, "ferry.db"), c.seed); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if c.seed > 0 {
		fmt.Printf("seeded %d finished jobs through the store in %v\n", c.seed, time.Since(t0).Round(time.Millisecond))
	}

	srv, err := startServer(bin, tmp, dataDir)
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.prepare(tmp); err != nil {
		return err
	}
	// One of each read, so that RSS after seeding counts the warm caches.
	for _, op := range []string{opList, opShow, opLog} {
		if r := srv.do(context.Background(), op, c.seed); r.err != nil || r.status >= 300 {
			return fmt.Errorf("warm-up %s: status %d %v", op, r.status, r.err)
		}
	}
	rssSeeded, _ := procStatus(srv.cmd.Process.Pid, "VmRSS")

	load0 := loadAverage()
	cpu0, _ := cpuTime(srv.cmd.Process.Pid)
	res := drive(c.clients, c.duration, c.think, c.submitRate, func(ctx context.Context, op string) result {
		return srv.do(ctx, op, c.seed)
	}, false)
	cpu1, _ := cpuTime(srv.cmd.Process.Pid)
	load1 := loadAverage()
	rssAfter, _ := procStatus(srv.cmd.Process.Pid, "VmRSS")
	hwm, _ := procStatus(srv.cmd.Process.Pid, "VmHWM")

	peer, err := startPeer()
	if err != nil {
		return err
	}
	peerRes := drive(c.clients, c.peerDuration, c.think, 0, func(ctx context.Context, _ string) result {
		return peer.get(ctx)
	}, true)
	peer.close()

	report(res, peerRes)
	fmt.Printf("\nserver RSS: %s after seeding %d jobs and warming up, %s after the load, peak %s (aim: ≤ 150 MB with 100,000 jobs)\n",
		mb(rssSeeded), c.seed, mb(rssAfter), mb(hwm))
	all := res["all"]
	fmt.Printf("server CPU during the load: %.2f cores, %v a request\n", (cpu1-cpu0).Seconds()/all.wall.Seconds(),
		((cpu1 - cpu0) / time.Duration(max(all.total, 1))).Round(time.Microsecond))
	fmt.Printf("machine load average (1 min) at the start and end of the load: %s, %s (what else ran on these %d CPUs)\n", load0, load1, runtime.NumCPU())
	fmt.Printf("jobs submitted during the load: %d\n", srv.submitted.Load())
	return srv.drain()
}

// ---- seeding ----

// seed writes n finished jobs, each with its creation event, and a metric
// on one job in ten, into the store at path.
func seed(path string, n int) error {
	if n == 0 {
		return nil
	}
	st, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := context.Background()
	spec := json.RawMessage(`{"command":"python train.py --epochs 3","compute":"local","display_name":"seeded"}`)
	base := time.Now().Add(-time.Duration(n) * time.Second)
	zero := 0
	for i := range n {
		created := base.Add(time.Duration(i) * time.Second)
		j := store.Job{
			Name: seedName(i), Compute: "local", Status: "Completed", StatusReason: "exited 0",
			Attempt: 1, ExitCode: &zero, CreatedBy: "owner", Spec: spec,
			Inputs: json.RawMessage(`{}`), Environment: json.RawMessage(`null`),
			Created: created, Started: created.Add(100 * time.Millisecond), Ended: created.Add(900 * time.Millisecond),
		}
		if _, err := st.CreateJob(ctx, j, store.Event{Job: j.Name, Time: created, To: "Completed", Reason: "exited 0"}); err != nil {
			return err
		}
		if i%10 == 0 {
			if err := st.AddMetrics(ctx, j.Name, []store.Metric{{Name: "loss", Value: 0.5, Step: 1, Time: created}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func seedName(i int) string { return fmt.Sprintf("seed-%06d", i) }

// ---- the server under test ----

type server struct {
	cmd       *exec.Cmd
	url       string
	token     string // owner token; never printed
	runToken  string // the metric job's run token; never printed
	http      *http.Client
	metricJob string
	logJob    string
	submitted atomic.Int64
	seq       atomic.Int64
	names     struct {
		sync.Mutex
		list []string // jobs submitted during the load
	}
}

func startServer(bin, tmp, dataDir string) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(tmp, "server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "server", "--data-dir", dataDir, "--addr", addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, url: "http://" + addr, http: newHTTPClient()}
	for i := 0; ; i++ {
		tok, err := os.ReadFile(filepath.Join(dataDir, "owner.token"))
		if err == nil {
			s.token = strings.TrimSpace(string(tok))
			if resp, err := http.Get(s.url + "/healthz"); err == nil {
				resp.Body.Close()
				return s, nil
			}
		}
		if i > 1200 {
			s.stop()
			return nil, fmt.Errorf("server did not start; see its log")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (s *server) stop() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		_ = s.cmd.Wait()
	}
}

func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000, IdleConnTimeout: time.Minute}}
}

// call makes one request and returns its status, reading the whole body.
func (s *server) call(ctx context.Context, method, path, token string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func (s *server) submit(ctx context.Context, name, command string) error {
	spec, _ := json.Marshal(map[string]string{"name": name, "command": command, "compute": "local"})
	body, _ := json.Marshal(map[string]json.RawMessage{"spec": spec})
	code, data, err := s.call(ctx, "POST", "/v1/jobs", s.token, body)
	if err == nil && code >= 300 {
		err = fmt.Errorf("submit %s: %d %s", name, code, data)
	}
	return err
}

func (s *server) status(ctx context.Context, name string) (string, error) {
	code, data, err := s.call(ctx, "GET", "/v1/jobs/"+name, s.token, nil)
	if err != nil {
		return "", err
	}
	if code != 200 {
		return "", fmt.Errorf("show %s: %d %s", name, code, data)
	}
	var j struct {
		Status string `json:"status"`
	}
	err = json.Unmarshal(data, &j)
	return j.Status, err
}

func (s *server) waitStatus(name string, want ...string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := s.status(context.Background(), name)
		if err != nil {
			return err
		}
		if slices.Contains(want, st) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s is %s, want %v", name, st, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// prepare starts the job whose run token the metric posts use and makes
// the finished job whose log the log reads fetch.
func (s *server) prepare(tmp string) error {
	ctx := context.Background()
	s.logJob, s.metricJob = "load-log", "load-metrics"
	if err := s.submit(ctx, s.logJob, `for i in $(seq 1 1000); do echo "step $i: loss 0.$i accuracy 0.9$i"; done`); err != nil {
		return err
	}
	if err := s.waitStatus(s.logJob, "Completed"); err != nil {
		return err
	}
	// The job may run as another user: it gets a folder it can write, and
	// the file it leaves there is readable by it and by root only.
	drop := filepath.Join(tmp, "drop")
	if err := os.Mkdir(drop, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(drop, 0o777); err != nil {
		return err
	}
	tokFile := filepath.Join(drop, "run-token")
	if err := s.submit(ctx, s.metricJob, fmt.Sprintf(`umask 077; printf %%s "$FERRY_RUN_TOKEN" > %s.part && mv %s.part %s; sleep 3600`, tokFile, tokFile, tokFile)); err != nil {
		return err
	}
	if err := s.waitStatus(s.metricJob, "Running"); err != nil {
		return err
	}
	for i := 0; ; i++ {
		b, err := os.ReadFile(tokFile)
		if err == nil && len(b) > 0 {
			s.runToken = string(b)
			_ = os.Remove(tokFile)
			return nil
		}
		if i > 400 {
			return errors.New("the metric job never wrote its run token")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// do performs one operation of the mix.
func (s *server) do(ctx context.Context, op string, seeded int) result {
	var code int
	var err error
	start := time.Now()
	switch op {
	case opSubmit:
		name := fmt.Sprintf("load-%06d", s.seq.Add(1))
		spec, _ := json.Marshal(map[string]string{"name": name, "command": "true", "compute": "local"})
		body, _ := json.Marshal(map[string]json.RawMessage{"spec": spec})
		code, _, err = s.call(ctx, "POST", "/v1/jobs", s.token, body)
		if err == nil && code < 300 {
			s.submitted.Add(1)
			s.names.Lock()
			s.names.list = append(s.names.list, name)
			s.names.Unlock()
		}
	case opList:
		code, _, err = s.call(ctx, "GET", "/v1/jobs?limit=50", s.token, nil)
	case opShow:
		code, _, err = s.call(ctx, "GET", "/v1/jobs/"+s.someJob(seeded), s.token, nil)
	case opLog:
		code, _, err = s.call(ctx, "GET", "/v1/jobs/"+s.logJob+"/logs?follow=true", s.token, nil)
	case opMetric:
		body := fmt.Appendf(nil, `{"name":"loss","value":%g,"step":%d}`, rand.Float64(), s.seq.Add(1))
		code, _, err = s.call(ctx, "POST", "/v1/jobs/"+s.metricJob+"/metrics", s.runToken, body)
	}
	return result{op: op, took: time.Since(start), status: code, err: err}
}

// someJob picks a seeded job, or one submitted during the load.
func (s *server) someJob(seeded int) string {
	s.names.Lock()
	n := len(s.names.list)
	var pick string
	if n > 0 && (seeded == 0 || rand.IntN(2) == 0) {
		pick = s.names.list[rand.IntN(n)]
	}
	s.names.Unlock()
	if pick != "" {
		return pick
	}
	if seeded == 0 {
		return s.logJob
	}
	return seedName(rand.IntN(seeded))
}

// drain cancels the metric job and waits until nothing runs, so that no
// runner outlives the server.
func (s *server) drain() error {
	ctx := context.Background()
	_, _, _ = s.call(ctx, "POST", "/v1/jobs/"+s.metricJob+"/cancel", s.token, nil)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, data, err := s.call(ctx, "GET", "/v1/jobs?limit=1&status=Queued,Preparing,Running,Finalizing,CancelRequested", s.token, nil)
		if err != nil {
			return err
		}
		if code == 200 && strings.TrimSpace(string(data)) == "[]" {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("jobs still active 3 minutes after the load; their runners may be left")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---- the peer ----

type peer struct {
	srv  *http.Server
	url  string
	http *http.Client
}

func startPeer() (*peer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	body := []byte(`{"name":"peer","status":"Completed"}` + "\n")
	p := &peer{url: "http://" + ln.Addr().String() + "/", http: newHTTPClient(), srv: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *peer) close() { _ = p.srv.Close() }

func (p *peer) get(ctx context.Context) result {
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url, nil)
	resp, err := p.http.Do(req)
	code := 0
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		code = resp.StatusCode
	}
	return result{op: opPeer, took: time.Since(start), status: code, err: err}
}

// ---- driving and reporting ----

type result struct {
	op     string
	took   time.Duration
	status int
	err    error
}

type stats struct {
	lat                []time.Duration
	n4xx, n5xx, nOther int
	firstErr           string
	wall               time.Duration
	total              int
	statusCounts       map[int]int
}

// drive runs clients that each loop until d has passed. With submitRate
// > 0 a client that picks a submission when none is left this second
// shows a job instead.
func drive(clients int, d, think time.Duration, submitRate int, do func(context.Context, string) result, peer bool) map[string]*stats {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var budget atomic.Int64
	if submitRate > 0 {
		budget.Store(int64(submitRate))
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					budget.Store(int64(submitRate))
				}
			}
		}()
	}
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	per := make([][]result, clients)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				if think > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(rand.N(think)):
					}
				}
				op := opPeer
				if !peer {
					k := rand.IntN(total)
					for _, m := range mix {
						if k < m.weight {
							op = m.op
							break
						}
						k -= m.weight
					}
					if op == opSubmit && budget.Add(-1) < 0 {
						op = opShow
					}
				}
				r := do(ctx, op)
				if ctx.Err() != nil && r.err != nil {
					return // cut off by the end of the run, not an error
				}
				per[i] = append(per[i], r)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	out := map[string]*stats{}
	all := &stats{statusCounts: map[int]int{}}
	for _, rs := range per {
		for _, r := range rs {
			st := out[r.op]
			if st == nil {
				st = &stats{statusCounts: map[int]int{}}
				out[r.op] = st
			}
			for _, x := range []*stats{st, all} {
				x.lat = append(x.lat, r.took)
				x.total++
				x.statusCounts[r.status]++
				switch {
				case r.err != nil:
					x.nOther++
					if x.firstErr == "" {
						x.firstErr = r.err.Error()
					}
				case r.status >= 500:
					x.n5xx++
				case r.status >= 400:
					x.n4xx++
				}
			}
		}
	}
	for _, st := range out {
		st.wall = wall
	}
	all.wall = wall
	out["all"] = all
	return out
}

func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(float64(len(lat)-1) * p)
	return lat[i]
}

func report(res, peerRes map[string]*stats) {
	fmt.Printf("%-12s %9s %9s %10s %10s %10s %6s %6s %6s\n", "operation", "requests", "req/s", "p50", "p99", "max", "4xx", "5xx", "other")
	row := func(name string, st *stats) {
		fmt.Printf("%-12s %9d %9.1f %10v %10v %10v %6d %6d %6d\n", name, st.total, float64(st.total)/st.wall.Seconds(),
			pct(st.lat, 0.5).Round(10*time.Microsecond), pct(st.lat, 0.99).Round(10*time.Microsecond), pct(st.lat, 1).Round(10*time.Microsecond),
			st.n4xx, st.n5xx, st.nOther)
	}
	for _, m := range mix {
		if st := res[m.op]; st != nil {
			row(m.op, st)
		}
	}
	all := res["all"]
	row("all (ferry)", all)
	p := peerRes["all"]
	row("peer", p)
	for _, st := range res {
		if st.firstErr != "" {
			fmt.Printf("first transport error: %s\n", st.firstErr)
			break
		}
	}
	for code, n := range all.statusCounts {
		if code >= 400 {
			fmt.Printf("status %d: %d responses\n", code, n)
		}
	}
	fmt.Printf("\nratio ferry/peer: p50 %.1fx, p99 %.1fx (aim: zero 5xx and ferry p99 ≤ 100ms)\n",
		ratio(pct(all.lat, 0.5), pct(p.lat, 0.5)), ratio(pct(all.lat, 0.99), pct(p.lat, 0.99)))
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// procStatus reads one "Vm..." line of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// cpuTime is the user and system CPU time a process has used, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, errors.Join(err1, err2)
}

// loadAverage is the first field of /proc/loadavg.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
