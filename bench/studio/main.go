// Command studio measures the web studio of a real `ferry server` (the
// built binary, on loopback, with a fresh data directory):
//
//	go run ./bench/studio [-seed 100000] [-n 200] [-lines 100] [-browser=true] [-ferry BINARY]
//
// Before the server starts, -seed finished jobs (four experiments, one in
// ten Failed, one in ten with a metric) are written into its store through
// internal/store/sqlite, as bench/load does. Then, signed in with the
// owner's token as a browser would be (the session cookie):
//
//   - the job list page, -n times each: the newest page, a page filtered by
//     status, one by experiment, and a page deep in the list (keyset
//     ?before=, half-way down). The time is request to last byte on
//     loopback, so it is the server's time plus a loopback round trip;
//     a trivial net/http handler that sends a page of the same size is the
//     peer, measured in the same run;
//   - a job page's first byte (an old job with a metric), -n times;
//   - a log line's way into the page: a job prints a line with its clock
//     every 50 ms, -lines times; a client of the page's event stream
//     (/studio/jobs/NAME/events, what the page's script reads) and the
//     job page itself in Debian's chromium (a MutationObserver on the log)
//     take each line's arrival minus the time printed in it (live.go).
//
// It prints percentiles and the machine's load average; it asserts nothing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
)

func main() {
	seedN := flag.Int("seed", 100000, "finished jobs written into the store before the server starts")
	n := flag.Int("n", 200, "requests of each page measured")
	ferry := flag.String("ferry", "", "the ferry binary (default: build ./cmd/ferry)")
	lines := flag.Int("lines", 100, "log lines the live job prints (one every 50 ms) and that are measured")
	browser := flag.Bool("browser", true, "also measure the log lines in the job page in Debian's chromium (headless)")
	flag.Parse()
	if *seedN < 10 {
		fmt.Fprintln(os.Stderr, "bench/studio: -seed must be at least 10 (the job page measured is one of the seeded jobs)")
		os.Exit(2)
	}
	if err := run(*seedN, *n, *ferry, *lines, *browser); err != nil {
		fmt.Fprintln(os.Stderr, "bench/studio:", err)
		os.Exit(1)
	}
}

func run(seedN, n int, bin string, lines int, browser bool) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-studio-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o711); err != nil { // a root server's jobs run as ferry-job
		return err
	}
	if bin == "" {
		bin = filepath.Join(tmp, "ferry")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
			return fmt.Errorf("build: %v\n%s", err, out)
		}
	}
	data := filepath.Join(tmp, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	t0 := time.Now()
	if err := seed(filepath.Join(data, "ferry.db"), seedN); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	fmt.Printf("seeded %d jobs in %s\n", seedN, time.Since(t0).Round(time.Millisecond))

	srv, err := startServer(bin, tmp, data)
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.signIn(); err != nil {
		return err
	}
	load0 := loadAvg()

	// The peer: a page of the same size from a trivial handler.
	first, err := srv.get("/studio/jobs")
	if err != nil {
		return err
	}
	peer, stopPeer, err := startPeer(len(first))
	if err != nil {
		return err
	}
	defer stopPeer()

	mid := seedName(seedN / 2)
	pages := []struct{ name, path string }{
		{"job list, newest 50", "/studio/jobs"},
		{"job list, status=Failed", "/studio/jobs?status=Failed"},
		{"job list, experiment=exp-2", "/studio/jobs?experiment=exp-2"},
		{"job list, page half-way down (keyset)", "/studio/jobs?before=" + mid},
	}
	fmt.Printf("\n%-40s %10s %10s %8s\n", "page (request to last byte)", "p50", "p99", "KiB")
	for _, p := range pages {
		ds, size, err := srv.measure(p.path, n, false)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Printf("%-40s %10s %10s %8d\n", p.name, pct(ds, 50), pct(ds, 99), size>>10)
	}
	ds, size, err := measureURL(http.DefaultClient, peer, n, false)
	if err != nil {
		return err
	}
	fmt.Printf("%-40s %10s %10s %8d\n", "peer: static page of the same size", pct(ds, 50), pct(ds, 99), size>>10)

	job := seedName(seedN - 10) // i%10 == 0: it has a metric
	ds, _, err = srv.measure("/studio/jobs/"+job, n, true)
	if err != nil {
		return err
	}
	fmt.Printf("\n%-40s %10s %10s\n", "job page, first byte", pct(ds, 50), pct(ds, 99))

	live, err := srv.logLatency(tmp, lines, browser)
	if err != nil {
		return err
	}
	fmt.Printf("\n%-44s %10s %10s %10s\n", "a log line, from the time the job printed it", "p50", "p99", "max")
	for _, r := range live {
		fmt.Printf("%-44s %10s %10s %10s (%d lines)\n", r.name, pct(r.ds, 50), pct(r.ds, 99), pct(r.ds, 100), len(r.ds))
	}
	fmt.Printf("\nmachine load average (1 min) at the start and end: %s, %s (%d CPUs, shared with whatever else runs)\n", load0, loadAvg(), runtime.NumCPU())
	return nil
}

// ---- seeding ----

func seedName(i int) string { return fmt.Sprintf("seed-%06d", i) }

// seed writes n finished jobs, as bench/load does, over four experiments;
// one in ten Failed, one in ten with a loss metric and a short log-less
// history.
func seed(path string, n int) error {
	st, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := context.Background()
	spec := json.RawMessage(`{"command":"python train.py --epochs 3","compute":"local","display_name":"seeded"}`)
	base := time.Now().Add(-time.Duration(n) * time.Second)
	zero, one := 0, 1
	for i := range n {
		created := base.Add(time.Duration(i) * time.Second)
		j := store.Job{
			Name: seedName(i), Compute: "local", Status: "Completed", StatusReason: "exited 0",
			ExperimentName: fmt.Sprintf("exp-%d", i%4),
			Attempt:        1, ExitCode: &zero, CreatedBy: "owner", Spec: spec,
			Inputs: json.RawMessage(`{}`), Environment: json.RawMessage(`null`),
			Created: created, Started: created.Add(100 * time.Millisecond), Ended: created.Add(900 * time.Millisecond),
		}
		if i%10 == 5 {
			j.Status, j.StatusReason, j.ExitCode = "Failed", "exited 1", &one
		}
		if _, err := st.CreateJob(ctx, j, store.Event{Job: j.Name, Time: created, To: j.Status, Reason: j.StatusReason}); err != nil {
			return err
		}
		if i%10 == 0 {
			ms := make([]store.Metric, 50)
			for k := range ms {
				ms[k] = store.Metric{Name: "loss", Value: 1 / float64(k+1), Step: int64(k), Time: created}
			}
			if err := st.AddMetrics(ctx, j.Name, ms); err != nil {
				return err
			}
		}
	}
	return nil
}

// ---- the server ----

type server struct {
	cmd   *exec.Cmd
	url   string
	token string // never printed
	hc    *http.Client
}

func startServer(bin, tmp, data string) (*server, error) {
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
	cmd := exec.Command(bin, "server", "--data-dir", data, "--work-dir", filepath.Join(tmp, "work"), "--addr", addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	jar, _ := cookiejar.New(nil)
	s := &server{cmd: cmd, url: "http://" + addr, hc: &http.Client{Jar: jar}}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(25 * time.Millisecond) {
		if tok, err := os.ReadFile(filepath.Join(data, "owner.token")); err == nil {
			if resp, err := http.Get(s.url + "/healthz"); err == nil {
				resp.Body.Close()
				s.token = strings.TrimSpace(string(tok))
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			log, _ := os.ReadFile(filepath.Join(tmp, "server.log"))
			return nil, fmt.Errorf("the server did not start:\n%s", log)
		}
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	_ = s.cmd.Wait()
}

func (s *server) signIn() error {
	resp, err := s.hc.PostForm(s.url+"/studio/signin", url.Values{"token": {s.token}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK { // the redirect was followed to the compute page
		return fmt.Errorf("sign-in: %s", resp.Status)
	}
	return nil
}

func (s *server) get(path string) ([]byte, error) {
	resp, err := s.hc.Get(s.url + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return b, err
}

func (s *server) measure(path string, n int, firstByte bool) ([]time.Duration, int, error) {
	return measureURL(s.hc, s.url+path, n, firstByte)
}

// measureURL requests u n times, one after another, and returns each
// request's time to its last byte (or its first, with firstByte).
func measureURL(hc *http.Client, u string, n int, firstByte bool) ([]time.Duration, int, error) {
	var ds []time.Duration
	size := 0
	for range n + 5 { // the first 5 warm up connections and caches
		var got time.Time
		trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { got = time.Now() }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", u, nil)
		if err != nil {
			return nil, 0, err
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return nil, 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		end := time.Now()
		if err != nil {
			return nil, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, 0, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		size = len(b)
		if firstByte {
			end = got
		}
		ds = append(ds, end.Sub(start))
	}
	return ds[5:], size, nil
}

// ---- the peer and figures ----

func startPeer(size int) (string, func(), error) {
	page := []byte(strings.Repeat("x", size))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/", func() { hs.Close() }, nil
}

func pct(ds []time.Duration, p int) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, len(s)*p/100)
	return s[i].Round(10 * time.Microsecond).String()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
