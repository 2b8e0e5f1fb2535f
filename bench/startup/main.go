// Command startup measures what one start of the ferry binary costs
// (`ferry version`: every package's init and the command line's parse,
// what each job's runner-shim and runner pay too) for two binaries,
// alternated exec by exec so that both see the same load:
//
//	go run ./bench/startup -base /tmp/ferry-main -new /tmp/ferry [-n 200]
//
// It prints, for each, the binary's size, the total of its package
// inits (GODEBUG=inittrace=1, median of the runs), and the mean and
// median wall, user and system time per exec, with the ratios new/base
// and the load average before and after.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

type sample struct{ wall, user, sys, init time.Duration }

func main() {
	base := flag.String("base", "", "the binary to compare against (required)")
	next := flag.String("new", "", "the binary measured (required)")
	n := flag.Int("n", 200, "execs of each binary")
	flag.Parse()
	if *base == "" || *next == "" {
		fmt.Fprintln(os.Stderr, "startup: -base and -new (two ferry binaries) are required")
		os.Exit(2)
	}
	fmt.Println("load before:", load())
	bins := []string{*base, *next}
	runs := [2][]sample{}
	for i := 0; i < *n; i++ {
		for j, b := range bins {
			s, err := once(b)
			if err != nil {
				fmt.Fprintf(os.Stderr, "startup: %s version: %v\n", b, err)
				os.Exit(1)
			}
			runs[j] = append(runs[j], s)
		}
	}
	fmt.Println("load after: ", load())
	fmt.Printf("%-6s %10s %10s %22s %22s %22s\n", "", "size MB", "init ms", "wall ms mean/p50", "user ms mean/p50", "sys ms mean/p50")
	var sum [2]summary
	for j, b := range bins {
		sum[j] = summarize(runs[j])
		st, err := os.Stat(b)
		if err != nil {
			fmt.Fprintln(os.Stderr, "startup:", err)
			os.Exit(1)
		}
		sum[j].size = float64(st.Size()) / 1e6
		fmt.Printf("%-6s %10.1f %10.2f %22s %22s %22s\n", []string{"base", "new"}[j], sum[j].size, ms(sum[j].init),
			pair(sum[j].wall), pair(sum[j].user), pair(sum[j].sys))
	}
	r := func(a, b time.Duration) string { return fmt.Sprintf("%.2f", float64(b)/float64(a)) }
	fmt.Printf("ratio new/base: size %.2f, init %s, wall %s, user %s, sys %s, user+sys %s (means)\n",
		sum[1].size/sum[0].size, r(sum[0].init, sum[1].init), r(sum[0].wall[0], sum[1].wall[0]),
		r(sum[0].user[0], sum[1].user[0]), r(sum[0].sys[0], sum[1].sys[0]),
		r(sum[0].user[0]+sum[0].sys[0], sum[1].user[0]+sum[1].sys[0]))
}

// once runs `b version` with the init trace on.
func once(b string) (sample, error) {
	cmd := exec.Command(b, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("%w: %s", err, stderr.String())
	}
	s := sample{wall: time.Since(start), user: cmd.ProcessState.UserTime(), sys: cmd.ProcessState.SystemTime()}
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init PKG @T ms, D ms clock, ...
		f := strings.Fields(sc.Text())
		if len(f) >= 7 && f[0] == "init" && f[6] == "clock," {
			if d, err := strconv.ParseFloat(f[4], 64); err == nil {
				s.init += time.Duration(d * float64(time.Millisecond))
			}
		}
	}
	return s, nil
}

type summary struct {
	size            float64
	init            time.Duration    // median
	wall, user, sys [2]time.Duration // mean, median
}

func summarize(ss []sample) summary {
	pick := func(f func(sample) time.Duration) [2]time.Duration {
		v := make([]time.Duration, len(ss))
		var total time.Duration
		for i, s := range ss {
			v[i] = f(s)
			total += v[i]
		}
		slices.Sort(v)
		return [2]time.Duration{total / time.Duration(len(v)), v[len(v)/2]}
	}
	return summary{
		init: pick(func(s sample) time.Duration { return s.init })[1],
		wall: pick(func(s sample) time.Duration { return s.wall }),
		user: pick(func(s sample) time.Duration { return s.user }),
		sys:  pick(func(s sample) time.Duration { return s.sys }),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pair(d [2]time.Duration) string { return fmt.Sprintf("%.2f / %.2f", ms(d[0]), ms(d[1])) }

func load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
