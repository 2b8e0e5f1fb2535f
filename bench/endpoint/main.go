// Command endpoint measures online endpoints in two parts, in one run.
//
// The first measures the gateway against calling a replica directly: the
// same trivial scoring script on the same real replica (Ferry's inference
// server under python3), the same concurrency, the two alternated. It
// prints the latency the gateway adds at p50 and p99, the throughput
// ratio, and a cold start from zero (the gateway holding the first
// request while a replica starts, with the server and script already on
// disk: a warm environment).
//
// The second (-deployments) starts a real `ferry server` and measures
// deployments through its API and gateway: the requests that fail while a
// deployment of 2 replicas on pool nodes is updated under constant load,
// and a cold start from zero replicas with the pool node up, against the
// same inference server started directly (deployments.go).
//
//	go run ./bench/endpoint [-n 3000] [-concurrency 4] [-workers 2] [-rounds 2] [-gateway]
//	                        [-deployments] [-clients 4] [-updates 3] [-colds 3]
//
// Not a test: it asserts nothing and prints figures (bench/endpoint/README.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/serving/gateway"
	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
)

// score answers with its input, the deployment's VERSION variable,
// which says which generation of a deployment answered, and the pid of
// the worker process that ran it.
const score = `import json, os

def init():
    pass

def run(raw_data):
    return {"echo": json.loads(raw_data)["x"], "version": os.environ.get("VERSION", ""), "worker": os.getpid()}
`

const key = "bench-key-0123456789"

func main() {
	n := flag.Int("n", 3000, "requests per measurement")
	conc := flag.Int("concurrency", 4, "requests in flight at once")
	workers := flag.Int("workers", 2, "worker processes of the replica (WORKER_COUNT)")
	rounds := flag.Int("rounds", 2, "direct/gateway pairs, alternated")
	gw := flag.Bool("gateway", true, "measure the gateway against a direct replica (the first part)")
	deployments := flag.Bool("deployments", true, "measure real deployments on a ferry server (the second part)")
	clients := flag.Int("clients", 4, "clients scoring without a pause during the rolling updates")
	updates := flag.Int("updates", 3, "rolling updates under load")
	colds := flag.Int("colds", 3, "cold starts from zero, through a deployment and directly")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (clients and the in-process gateway) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "endpoint:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "endpoint:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	// An interrupted run still stops the server and replicas it started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := func() error {
		if *gw {
			if err := run(ctx, *n, *conc, *workers, *rounds); err != nil {
				return err
			}
		}
		if *deployments {
			return runDeployments(ctx, *n, *conc, *workers, *rounds, *clients, *updates, *colds)
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "endpoint:", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// replica is a running inference server.
type replica struct {
	cmd     *exec.Cmd
	url     string
	unixURL string // the same replica on its Unix socket
	// routed is where `ferry server`'s gateway reaches it: its Unix
	// socket when its status line shows it on this host (the
	// controller's test, inferenceserver.Status.OnThisHost), else url.
	routed string
	// workers are its workers' own sockets (unix:/PATH) when they too
	// pass that test (Status.WorkersOnThisHost): where `ferry server`'s
	// gateway sends its requests, balancing across the workers itself.
	workers []string
	done    chan struct{}
}

// deployment is the gateway's deployment of r as `ferry server` routes
// it: at its workers' sockets when it has them, else at r.routed.
func (r *replica) deployment(conc int) gateway.Deployment {
	d := gateway.Deployment{Replicas: []string{r.routed}, RequestTimeout: 30 * time.Second, MaxConcurrent: conc, MaxQueueWait: 30 * time.Second}
	if len(r.workers) > 0 {
		d.Workers = map[string][]string{r.routed: r.workers}
	}
	return d
}

func (r *replica) stop() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// startReplica starts the inference server on a free loopback port and
// a Unix socket, and returns once its status line says it is ready.
func startReplica(ctx context.Context, serverDir, codeDir string, workers int) (*replica, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// The replica makes the socket's folder, private to it, as a
	// replica of ferry server's does (.ferry-replica/ in its job's
	// folder); a fresh one per replica started.
	sockDir, err := os.MkdirTemp(codeDir, "replica-sockets-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(sockDir, "replica.sock")
	c, err := inferenceserver.Replica{ServerDir: serverDir, CodeDir: codeDir, Script: "score.py", ModelDir: codeDir, Port: port,
		UnixSocket: sock, Workers: workers}.Command()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.Args[0], c.Args[1:]...)
	cmd.Env, cmd.Dir = append(os.Environ(), c.Env...), c.Dir
	// The replica logs every request; its log goes to a file beside the
	// code, named in an error.
	logf, err := os.CreateTemp(codeDir, "replica-*.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &replica{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), unixURL: inferenceserver.UnixURL(sock), done: make(chan struct{})}
	statuses := inferenceserver.Watch(stdout, nil)
	go func() { _ = cmd.Wait(); close(r.done) }()
	st, err := inferenceserver.WaitReady(ctx, statuses)
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("%w (the replica's log: %s)", err, logf.Name())
	}
	r.routed = r.url
	if st.OnThisHost() {
		r.routed = inferenceserver.UnixURL(st.Unix)
		for _, w := range st.WorkersOnThisHost() {
			r.workers = append(r.workers, inferenceserver.UnixURL(w))
		}
	}
	go func() {
		for range statuses { // the pipe must not fill
		}
	}()
	return r, nil
}

func run(ctx context.Context, n, conc, workers, rounds int) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-endpoint-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	serverDir, err := inferenceserver.Install(filepath.Join(tmp, "server"))
	if err != nil {
		return err
	}
	code := filepath.Join(tmp, "code")
	if err := os.MkdirAll(code, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(code, "score.py"), []byte(score), 0o644); err != nil {
		return err
	}
	r, err := startReplica(ctx, serverDir, code, workers)
	if err != nil {
		return fmt.Errorf("start the replica: %w", err)
	}
	defer r.stop()

	// The gateway reaches the replica as `ferry server`'s does: at its
	// workers' own sockets, the replica being on this host. Measured
	// beside it: the gateway at the replica's front (its Unix socket, the
	// front handing each request to a worker: what `ferry server` did
	// before it used the workers' sockets), and over loopback TCP, the
	// path of a replica on another host (here on this one, so that all
	// share the same CPUs).
	how := fmt.Sprintf("its %d workers' own sockets", len(r.workers))
	switch {
	case r.routed == r.url:
		how = "TCP (its status line did not show it on this host)"
	case len(r.workers) == 0:
		how = "its Unix socket (its status line showed no worker sockets)"
	}
	gw := gateway.New(gateway.Options{})
	dep := r.deployment(conc)
	gw.Set(gateway.Endpoint{Name: "bench", AuthMode: "key", Keys: []string{key}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]gateway.Deployment{"blue": dep}})
	depFront := dep
	depFront.Workers = nil
	gw.Set(gateway.Endpoint{Name: "benchfront", AuthMode: "key", Keys: []string{key}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]gateway.Deployment{"blue": depFront}})
	depTCP := depFront
	depTCP.Replicas = []string{r.url}
	gw.Set(gateway.Endpoint{Name: "benchtcp", AuthMode: "key", Keys: []string{key}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]gateway.Deployment{"blue": depTCP}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	gwURL := "http://" + ln.Addr().String() + "/endpoints/bench/score"
	gwFrontURL := "http://" + ln.Addr().String() + "/endpoints/benchfront/score"
	gwTCPURL := "http://" + ln.Addr().String() + "/endpoints/benchtcp/score"

	fmt.Printf("endpoint benchmark: %d requests of a trivial score.py, concurrency %d, replica with %d workers\n", n, conc, workers)
	fmt.Printf("the gateway reaches the replica as ferry server's does: at %s (%s)\n\n", how, r.routed)
	load(r.url+"/score", "", min(n, 300), conc) // warm the paths' connections
	load(gwURL, key, min(n, 300), conc)
	load(gwFrontURL, key, min(n, 300), conc)
	load(gwTCPURL, key, min(n, 300), conc)
	var direct, via, viaFront, viaTCP []result
	var cpuRatios, cpuRatiosFront, cpuRatiosTCP []float64
	for i := range rounds {
		c0 := cpuNow(r.cmd.Process.Pid)
		d, err := load(r.url+"/score", "", n, conc)
		if err != nil {
			return fmt.Errorf("direct: %w", err)
		}
		c1 := cpuNow(r.cmd.Process.Pid)
		g, err := load(gwURL, key, n, conc)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		c2 := cpuNow(r.cmd.Process.Pid)
		f, err := load(gwFrontURL, key, n, conc)
		if err != nil {
			return fmt.Errorf("gateway at the replica's front: %w", err)
		}
		c3 := cpuNow(r.cmd.Process.Pid)
		u, err := load(gwTCPURL, key, n, conc)
		if err != nil {
			return fmt.Errorf("gateway over TCP: %w", err)
		}
		c4 := cpuNow(r.cmd.Process.Pid)
		fmt.Printf("round %d  direct %7.0f req/s  p50 %-9v p99 %-9v | gateway %7.0f req/s  p50 %-9v p99 %-9v | at the front %7.0f req/s  p50 %-9v p99 %-9v | over TCP %7.0f req/s  p50 %-9v p99 %v\n",
			i+1, d.rate, d.p50, d.p99, g.rate, g.p50, g.p99, f.rate, f.p50, f.p99, u.rate, u.p50, u.p99)
		dc, gc, fc, uc := c1.sub(c0, n), c2.sub(c1, n), c3.sub(c2, n), c4.sub(c3, n)
		cpuRatios = append(cpuRatios, (dc.self+dc.replica)/(gc.self+gc.replica))
		cpuRatiosFront = append(cpuRatiosFront, (dc.self+dc.replica)/(fc.self+fc.replica))
		cpuRatiosTCP = append(cpuRatiosTCP, (dc.self+dc.replica)/(uc.self+uc.replica))
		fmt.Printf("         CPU µs/request, client (+gateway) / replica, and how the workers split the requests: direct %.0f / %.0f %s | gateway %.0f / %.0f %s | at the front %.0f / %.0f %s | over TCP %.0f / %.0f %s\n",
			dc.self, dc.replica, d.workers, gc.self, gc.replica, g.workers, fc.self, fc.replica, f.workers, uc.self, uc.replica, u.workers)
		fmt.Printf("         load average %s\n", loadAverage())
		direct, via, viaFront, viaTCP = append(direct, d), append(via, g), append(viaFront, f), append(viaTCP, u)
	}
	d, g, f, u := median(direct), median(via), median(viaFront), median(viaTCP)
	for _, rs := range [][]float64{cpuRatios, cpuRatiosFront, cpuRatiosTCP} {
		slices.Sort(rs)
	}
	fmt.Printf("\ngateway adds (median of rounds): p50 %v  p99 %v  (aim: <= 1ms at p50); at the front: p50 %v  p99 %v; over TCP (a replica on another host): p50 %v  p99 %v\n",
		g.p50-d.p50, g.p99-d.p99, f.p50-d.p50, f.p99-d.p99, u.p50-d.p50, u.p99-d.p99)
	fmt.Printf("throughput gateway/direct: %.3f (aim: >= 0.8); at the front: %.3f; over TCP: %.3f\n", g.rate/d.rate, f.rate/d.rate, u.rate/d.rate)
	fmt.Printf("CPU per request, direct/gateway (median of rounds): %.3f; at the front %.3f; over TCP %.3f (the throughput ratio where the CPUs, not the replica's workers, are what runs out)\n",
		cpuRatios[len(cpuRatios)/2], cpuRatiosFront[len(cpuRatiosFront)/2], cpuRatiosTCP[len(cpuRatiosTCP)/2])

	// Cold start: the deployment has no replica; the gateway holds the
	// first request while one starts.
	var colds []time.Duration
	for range 3 {
		var started *replica
		var cold *gateway.Gateway
		cold = gateway.New(gateway.Options{ColdStart: func(ctx context.Context, endpoint, deployment string) error {
			rep, err := startReplica(ctx, serverDir, code, workers)
			if err != nil {
				return err
			}
			started = rep
			d := rep.deployment(conc)
			cold.Set(gateway.Endpoint{Name: endpoint, AuthMode: "key", Keys: []string{key}, Traffic: map[string]int{deployment: 100}, Deployments: map[string]gateway.Deployment{deployment: d}})
			return nil
		}})
		d0 := dep
		d0.Replicas = nil
		cold.Set(gateway.Endpoint{Name: "bench", AuthMode: "key", Keys: []string{key}, Traffic: map[string]int{"blue": 100}, Deployments: map[string]gateway.Deployment{"blue": d0}})
		cl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		cs := &http.Server{Handler: cold}
		go func() { _ = cs.Serve(cl) }()
		t0 := time.Now()
		_, err = request(http.DefaultClient, "http://"+cl.Addr().String()+"/endpoints/bench/score", key)
		colds = append(colds, time.Since(t0))
		cs.Close()
		if started != nil {
			started.stop()
		}
		if err != nil {
			return fmt.Errorf("cold start: %w", err)
		}
	}
	slices.Sort(colds)
	fmt.Printf("cold start from zero to the first answer: median %v of %v (aim: <= 2s with a warm environment)\n", colds[1].Round(time.Millisecond), colds)
	return nil
}

type result struct {
	rate     float64
	p50, p99 time.Duration
	workers  string // how many requests each worker answered, most first
}

// cpu is CPU time used so far by this process (the load's clients and,
// in process, the gateway) and by a replica (its front and its workers).
type cpu struct{ self, replica time.Duration }

// perRequest is CPU time in µs per request of a load of n.
type perRequest struct{ self, replica float64 }

func (c cpu) sub(before cpu, n int) perRequest {
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	return perRequest{self: us(c.self - before.self), replica: us(c.replica - before.replica)}
}

// cpuNow reads this process's CPU time and that of the replica pid and
// its children, from /proc (0 where it cannot).
func cpuNow(pid int) cpu {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c := cpu{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	pids := []string{strconv.Itoa(pid)}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		pids = append(pids, strings.Fields(string(b))...)
	}
	for _, p := range pids {
		c.replica += procCPU(p)
	}
	return c
}

// procCPU is the CPU time process pid has used so far (0 when it cannot
// be read).
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, in clock ticks (100 a second).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) <= 12 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return result{
		rate: pick(func(r result) float64 { return r.rate }),
		p50:  time.Duration(pick(func(r result) float64 { return float64(r.p50) })),
		p99:  time.Duration(pick(func(r result) float64 { return float64(r.p99) })),
	}
}

// load sends n requests, conc at a time, and times each.
func load(url, key string, n, conc int) (result, error) {
	return loadSpread([]string{url}, key, n, conc)
}

// loadSpread is load with the clients spread over urls: client i sends
// to urls[i%len(urls)].
func loadSpread(urls []string, key string, n, conc int) (result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc * 2}}
	lat := make([]time.Duration, n)
	var next int
	var mu sync.Mutex
	byWorker := map[string]int{}
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for c := range conc {
		url := urls[c%len(urls)]
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				t0 := time.Now()
				answer, err := request(client, url, key)
				lat[i] = time.Since(t0)
				var a struct{ Worker int }
				_ = json.Unmarshal([]byte(answer), &a)
				mu.Lock()
				byWorker[strconv.Itoa(a.Worker)]++
				if err != nil {
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return result{}, firstErr
	}
	slices.Sort(lat)
	counts := slices.Collect(maps.Values(byWorker))
	slices.Sort(counts)
	slices.Reverse(counts)
	split := make([]string, len(counts))
	for i, c := range counts {
		split[i] = strconv.Itoa(c)
	}
	return result{rate: float64(n) / elapsed.Seconds(), p50: lat[n/2], p99: lat[n*99/100], workers: strings.Join(split, "/")}, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// request scores once and checks the answer.
func request(c *http.Client, url, key string) (string, error) {
	status, b, err := post(context.Background(), c, url, key, "")
	if err != nil {
		return "", err
	}
	if status != http.StatusOK || !strings.Contains(string(b), `"echo": 7`) && !strings.Contains(string(b), `"echo":7`) {
		return "", fmt.Errorf("status %d: %s", status, b)
	}
	return string(b), nil
}

// replicaSecrets are the secrets of the replicas the bench calls
// directly, by their scoring URL, which post sends as the gateway does
// (ferry server's replicas answer no request without). Set before the
// requests start, read only after.
var replicaSecrets = map[string]string{}

// post sends one scoring request with key ("" for none) and deployment
// in the azureml-model-deployment header ("" for none), and returns the
// answer's status and body.
func post(ctx context.Context, c *http.Client, url, key, deployment string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"x": 7}`))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if deployment != "" {
		req.Header.Set("azureml-model-deployment", deployment)
	}
	if secret := replicaSecrets[url]; secret != "" {
		req.Header.Set(inferenceserver.SecretHeader, secret)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// loadAverage is /proc/loadavg's first three figures ("?" where it
// cannot be read).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
