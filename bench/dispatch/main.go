// Command dispatch measures how fast the local target turns submitted jobs
// into finished ones, beside the physical limit (raw fork/exec of the same
// commands at the same concurrency) and, where sbatch works, a local Slurm.
//
//	go run ./bench/dispatch [-n 1000] [-concurrency CPUs] [-ferry BINARY] [-skip-slurm]
//
// README.md says what a profile of it showed and which levers were pulled.
// It prints figures and ratios; it asserts nothing.
package main

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
)

func main() {
	n := flag.Int("n", 1000, "jobs to submit")
	conc := flag.Int("concurrency", runtime.NumCPU(), "jobs at once (the local target's capacity)")
	ferry := flag.String("ferry", "", "a ferry binary to measure instead of building ./cmd/ferry (to compare two builds)")
	serverArgs := flag.String("server-args", "", "more arguments of the server, space-separated (such as --local-executor)")
	slurmOnly := flag.Bool("slurm-only", false, "measure only direct sbatch and the slurm compute target")
	skipSlurm := flag.Bool("skip-slurm", false, "measure only raw fork/exec and the local target")
	flag.Parse()
	extraServerArgs = strings.Fields(*serverArgs)
	if *slurmOnly {
		if err := runSlurmOnly(*n, *ferry); err != nil {
			fmt.Fprintln(os.Stderr, "dispatch:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*n, *conc, *ferry, *skipSlurm); err != nil {
		fmt.Fprintln(os.Stderr, "dispatch:", err)
		os.Exit(1)
	}
}

func run(n, conc int, prebuilt string, skipSlurm bool) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := ferryBinary(tmp, prebuilt)
	if err != nil {
		return err
	}
	fmt.Printf("dispatch benchmark: %d jobs of `true`, concurrency %d, %d CPUs\n\n", n, conc, runtime.NumCPU())

	ferryRate, p50, p99, idle50, idle99, err := benchFerry(bin, tmp, n, conc)
	if err != nil {
		return err
	}
	machine := machineCPU()
	rawRate := benchRaw(n, conc)
	rawCPU := machineCPU() - machine
	fmt.Printf("raw fork/exec: the machine's CPU %.2f ms per job\n\n", perJob(rawCPU, n))
	fmt.Printf("%-28s %10.1f jobs/s\n", "raw fork/exec", rawRate)
	fmt.Printf("%-28s %10.1f jobs/s   submit->Running under the burst: p50 %v  p99 %v (mostly queueing for %d slots)\n", "ferry local target", ferryRate, p50, p99, conc)
	fmt.Printf("%-28s submit->Running with a free slot: p50 %v  p99 %v (aim: p50 <= 10ms: %s)\n", "", idle50, idle99, met(idle50 <= 10*time.Millisecond))
	// Four decimals: at three, 0.1996 printed as 0.200.
	fmt.Printf("%-28s %10.4f (aim: >= 0.2: %s)\n", "ratio ferry/raw", ferryRate/rawRate, met(ferryRate/rawRate >= 0.2))
	if skipSlurm {
		return nil
	}
	return runSlurm(bin, n, ferryRate)
}

// met says whether an aim was met, on the unrounded figure.
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// ferryBinary is the ferry binary to measure: prebuilt when given, else
// ./cmd/ferry built into tmp.
func ferryBinary(tmp, prebuilt string) (string, error) {
	if prebuilt != "" {
		return prebuilt, nil
	}
	bin := filepath.Join(tmp, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build ferry (run from the repository root): %v\n%s", err, out)
	}
	return bin, nil
}

// runSlurmOnly is run's Slurm half alone (-slurm-only).
func runSlurmOnly(n int, prebuilt string) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := ferryBinary(tmp, prebuilt)
	if err != nil {
		return err
	}
	return runSlurm(bin, n, 0)
}

// runSlurm measures direct sbatch and the slurm compute target in the
// same run, each waiting for its jobs to complete; ferryRate, when not 0,
// is the local target's rate, to compare.
func runSlurm(bin string, n int, ferryRate float64) error {
	slurmRate, err := benchSlurm(n)
	if err != nil {
		fmt.Printf("%-28s skipped: %v\n", "slurm (sbatch)", err)
		return nil
	}
	fmt.Printf("%-28s %10.1f jobs/s\n", "slurm (sbatch)", slurmRate)
	if ferryRate > 0 {
		fmt.Printf("%-28s %10.3f\n", "ratio ferry/slurm", ferryRate/slurmRate)
	}
	rate, p50, p99, err := benchSlurmTarget(n)
	if err != nil {
		return fmt.Errorf("slurm target: %w", err)
	}
	fmt.Printf("%-28s %10.1f jobs/s\n", "slurm target (Launch)", rate)
	fmt.Printf("%-28s %10.3f (aim: >= 0.8)\n", "ratio target/sbatch", rate/slurmRate)
	fmt.Printf("%-28s submit->handle: p50 %v  p99 %v\n", "", p50, p99)
	rate, q50, q99, err := benchFerrySlurm(bin, n)
	if err != nil {
		return fmt.Errorf("ferry on slurm: %w", err)
	}
	fmt.Printf("%-28s %10.1f jobs/s\n", "ferry on slurm (server)", rate)
	fmt.Printf("%-28s %10.3f (aim: >= 0.8)\n", "ratio ferry-on-slurm/sbatch", rate/slurmRate)
	fmt.Printf("%-28s submit->Queued in Slurm's queue (handle stored): p50 %v  p99 %v (aim: < 100ms)\n", "", q50, q99)
	return nil
}

func benchFerry(bin, tmp string, n, conc int) (rate float64, p50, p99, idle50, idle99 time.Duration, err error) {
	c, stop, srv, err := startServer(bin, tmp, conc)
	if err != nil {
		return 0, 0, 0, 0, 0, err
	}
	defer stop()
	before, _ := processCPU(srv.Pid)
	machine, self := machineCPU(), selfCPU()
	if rate, p50, p99, _, err = burst(c, n, "local"); err != nil {
		return 0, 0, 0, 0, 0, err
	}
	machine, self = machineCPU()-machine, selfCPU()-self
	server, _ := processCPU(srv.Pid)
	server -= before
	if server > 0 {
		fmt.Printf("server CPU in the burst: %v, %.2f ms per job\n", server.Round(time.Millisecond), perJob(server, n))
	}
	// The executor starts with the burst's first job, so its CPU so far
	// is the burst's: its own, and its children's (the jobs' shells,
	// counted when it reaps them).
	var executor, shells time.Duration
	if pid := executorPID(filepath.Join(tmp, "data")); pid > 0 {
		if executor, shells = processCPU(pid); executor > 0 {
			fmt.Printf("executor CPU in the burst: %v, %.2f ms per job\n", executor.Round(time.Millisecond), perJob(executor, n))
		}
	}
	// The whole machine's CPU over the burst, by who used it: what the
	// ratio to raw fork/exec is made of on a machine whose cores are full.
	fmt.Printf("the machine's CPU in the burst: %.2f ms per job: server %.2f, executor %.2f, the jobs' shells %.2f, this bench (submitting, polling) %.2f, the rest (the kernel's threads, other processes) %.2f\n",
		perJob(machine, n), perJob(server, n), perJob(executor, n), perJob(shells, n), perJob(self, n), perJob(machine-server-executor-shells-self, n))
	if n >= 100 {
		if err := printBurstPhases(c, n); err != nil {
			return 0, 0, 0, 0, 0, err
		}
	}
	idle50, idle99, err = idleLatency(c, 50)
	if err == nil {
		err = printPhases(c, 50)
	}
	return rate, p50, p99, idle50, idle99, err
}

// printPhases prints where an idle job's wall time goes, from the status
// history the server recorded: the median time from each state to the next.
func printPhases(c *client.Client, samples int) error {
	ctx := context.Background()
	steps := map[string][]time.Duration{}
	var order []string
	for i := 0; i < samples; i++ {
		j, err := c.GetJob(ctx, fmt.Sprintf("idle-%03d", i))
		if err != nil {
			return err
		}
		for k := 1; k < len(j.History); k++ {
			step := j.History[k-1].To + "->" + j.History[k].To
			if _, ok := steps[step]; !ok {
				order = append(order, step)
			}
			steps[step] = append(steps[step], j.History[k].Time.Sub(j.History[k-1].Time))
		}
	}
	fmt.Printf("where an idle job's time goes (median of %d, from its status history):\n", samples)
	for _, step := range order {
		d := steps[step]
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		fmt.Printf("  %-28s %v\n", step, d[len(d)/2].Round(100*time.Microsecond))
	}
	fmt.Println()
	return nil
}

// processCPU is the CPU time (user and system) the process pid has used so
// far, its own and its reaped children's; 0 when /proc cannot tell.
func processCPU(pid int) (own, children time.Duration) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The command name, field 2, may hold spaces; the fields after its
	// closing parenthesis start with field 3.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return 0, 0
	}
	var t [4]int64 // utime, stime, cutime, cstime: fields 14 to 17
	for k := range t {
		if t[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, 0
		}
	}
	return ticks(t[0] + t[1]), ticks(t[2] + t[3])
}

// ticks is n clock ticks: 1/100 s on every Linux Go supports (USER_HZ).
func ticks(n int64) time.Duration { return time.Duration(n) * 10 * time.Millisecond }

// machineCPU is the CPU time all the machine's cores have spent busy so
// far (user, nice, system, irq and softirq of /proc/stat's cpu line: not
// idle, iowait or the time the hypervisor gave to others); 0 when
// /proc cannot tell.
func machineCPU() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for k, v := range f[1:8] { // user nice system idle iowait irq softirq
		if k == 3 || k == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		busy += n
	}
	return ticks(busy)
}

// selfCPU is the CPU time this process has used so far.
func selfCPU() time.Duration {
	own, _ := processCPU(os.Getpid())
	return own
}

func perJob(d time.Duration, n int) float64 {
	return float64(d) / float64(time.Millisecond) / float64(n)
}

// executorPID is the local executor serving the server of dataDir (its
// --id names the server's binary, which a server keeps in its data dir or,
// since issue 29, in its work dir, which server.json names), or 0.
func executorPID(dataDir string) int {
	dirs := []string{dataDir + string(filepath.Separator)}
	if b, err := os.ReadFile(filepath.Join(dataDir, "server.json")); err == nil {
		var info struct {
			WorkDir string `json:"work_dir"`
		}
		if json.Unmarshal(b, &info) == nil && info.WorkDir != "" {
			dirs = append(dirs, info.WorkDir+string(filepath.Separator))
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if slices.Contains(args, "local-executor") && slices.Contains(args, "--serve") && slices.ContainsFunc(dirs, func(d string) bool { return strings.Contains(string(cmd), d) }) {
			return pid
		}
	}
	return 0
}

// printBurstPhases prints where a job's time goes in the middle of the
// burst, when every slot is taken as soon as it is freed: the median time
// from each state to the next of a hundred jobs, and the median gap from
// a job's end to the start of the next (the dispatcher's turn-around).
func printBurstPhases(c *client.Client, n int) error {
	ctx := context.Background()
	steps := map[string][]time.Duration{}
	var order []string
	var ends, starts []time.Time
	var spans []time.Duration // Preparing to the end, each job's hold on its slot
	for i := n/2 - 50; i < n/2+50; i++ {
		j, err := c.GetJob(ctx, fmt.Sprintf("bench-%05d", i))
		if err != nil {
			return err
		}
		if len(j.History) > 1 {
			spans = append(spans, j.History[len(j.History)-1].Time.Sub(j.History[1].Time))
		}
		for k := 1; k < len(j.History); k++ {
			step := j.History[k-1].To + "->" + j.History[k].To
			if _, ok := steps[step]; !ok {
				order = append(order, step)
			}
			steps[step] = append(steps[step], j.History[k].Time.Sub(j.History[k-1].Time))
			switch j.History[k].To {
			case "Preparing":
				starts = append(starts, j.History[k].Time)
			case "Completed":
				ends = append(ends, j.History[k].Time)
			}
		}
	}
	fmt.Printf("where a job's time goes in the burst (median of 100 from its middle):\n")
	for _, step := range order[1:] { // Queued->Preparing is the wait for a slot
		fmt.Printf("  %-28s %v\n", step, median(steps[step]))
	}
	sort.Slice(ends, func(a, b int) bool { return ends[a].Before(ends[b]) })
	var gaps []time.Duration
	for _, st := range starts {
		// The end that freed the slot: the last one before the start.
		i := sort.Search(len(ends), func(i int) bool { return ends[i].After(st) })
		if i > 0 {
			gaps = append(gaps, st.Sub(ends[i-1]))
		}
	}
	if len(gaps) > 0 {
		fmt.Printf("  %-28s %v\n", "an end -> the next start", median(gaps))
	}
	if len(spans) > 0 {
		// The rate follows the mean; a median far below it means stalls.
		var sum time.Duration
		for _, d := range spans {
			sum += d
		}
		fmt.Printf("  %-28s median %v, mean %v\n", "Preparing -> the end", median(spans), (sum / time.Duration(len(spans))).Round(100*time.Microsecond))
	}
	fmt.Println()
	return nil
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
	return d[len(d)/2].Round(100 * time.Microsecond)
}

// idleLatency submits jobs one at a time, each when the target is idle,
// and measures submit -> Running.
func idleLatency(c *client.Client, samples int) (time.Duration, time.Duration, error) {
	ctx := context.Background()
	var lat []time.Duration
	for i := 0; i < samples; i++ {
		name := fmt.Sprintf("idle-%03d", i)
		spec, _ := json.Marshal(map[string]any{"name": name, "command": "true"})
		t0 := time.Now()
		if _, err := c.SubmitJob(ctx, apitypes.JobRequest{Spec: spec}); err != nil {
			return 0, 0, err
		}
		for {
			j, err := c.GetJob(ctx, name)
			if err != nil {
				return 0, 0, err
			}
			if j.Started != nil && j.Ended != nil {
				lat = append(lat, j.Started.Sub(t0))
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	return lat[len(lat)/2].Round(100 * time.Microsecond), lat[len(lat)*99/100].Round(100 * time.Microsecond), nil
}

// extraServerArgs are -server-args.
var extraServerArgs []string

func startServer(bin, tmp string, conc int) (*client.Client, func(), *os.Process, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dataDir := filepath.Join(tmp, "data")
	srv := exec.Command(bin, append([]string{"server", "--data-dir", dataDir, "--addr", addr, "--local-capacity", strconv.Itoa(conc)}, extraServerArgs...)...)
	logf, err := os.Create(filepath.Join(tmp, "server.log"))
	if err != nil {
		return nil, nil, nil, err
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return nil, nil, nil, err
	}
	stop := func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }
	var c *client.Client
	ctx := context.Background()
	for i := 0; ; i++ {
		tok, err := os.ReadFile(filepath.Join(dataDir, "owner.token"))
		if err == nil {
			c = client.New("http://"+addr, string(tok))
			if c.Health(ctx) == nil {
				break
			}
		}
		if i > 400 {
			stop()
			return nil, nil, nil, fmt.Errorf("server did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	return c, stop, srv.Process, nil
}

// burst submits n jobs at once to a compute and measures until the last
// one ends; it also returns when each job was submitted, by name.
func burst(c *client.Client, n int, compute string) (float64, time.Duration, time.Duration, map[string]time.Time, error) {
	ctx := context.Background()
	spec, _ := json.Marshal(map[string]any{"command": "true", "compute": compute})
	submitted := make([]time.Time, n)
	names := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var firstErr error
	var mu sync.Mutex
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			names[i] = fmt.Sprintf("bench-%05d", i)
			raw := json.RawMessage(strings.Replace(string(spec), "{", fmt.Sprintf(`{"name":%q,`, names[i]), 1))
			submitted[i] = time.Now()
			if _, err := c.SubmitJob(ctx, apitypes.JobRequest{Spec: raw}); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, 0, nil, firstErr
	}
	// The jobs run while they are submitted: the submissions' own load on
	// the server is part of the burst's rate.
	fmt.Printf("burst: %d jobs submitted in %v\n", n, time.Since(start).Round(time.Millisecond))
	for {
		// A cheap question while jobs run, so the bench does not load the server.
		left, err := c.ListJobs(ctx, url.Values{"status": {"Queued,Preparing,Running,Finalizing,CancelRequested"}, "limit": {"1"}})
		if err != nil {
			return 0, 0, 0, nil, err
		}
		if len(left) > 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		jobs, err := c.ListJobs(ctx, url.Values{"status": {"Completed,Failed,Canceled"}, "limit": {"0"}})
		if err != nil {
			return 0, 0, 0, nil, err
		}
		if len(jobs) == n {
			var lastEnd time.Time
			lat := make([]time.Duration, 0, n)
			idx := map[string]int{}
			for i, nm := range names {
				idx[nm] = i
			}
			failed := 0
			for _, j := range jobs {
				if j.Status != "Completed" {
					failed++
				}
				if j.Ended != nil && j.Ended.After(lastEnd) {
					lastEnd = *j.Ended
				}
				if j.Started != nil {
					lat = append(lat, j.Started.Sub(submitted[idx[j.Name]]))
				}
			}
			if failed > 0 {
				return 0, 0, 0, nil, fmt.Errorf("%d of %d jobs did not complete", failed, n)
			}
			sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
			rate := float64(n) / lastEnd.Sub(start).Seconds()
			sub := make(map[string]time.Time, n)
			for i, nm := range names {
				sub[nm] = submitted[i]
			}
			return rate, lat[len(lat)/2].Round(time.Microsecond * 100), lat[len(lat)*99/100].Round(time.Microsecond * 100), sub, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func benchRaw(n, conc int) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_ = exec.Command("/bin/sh", "-c", "true").Run()
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}
