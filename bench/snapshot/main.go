// Command snapshot measures how fast `ferry job create` sends a job's code
// folder beside rsync, the peer that copies the same folder, measured in
// the same run on the same disk:
//
//	rsync -a CODE/ COPY/    to a fresh folder (cold), then again with
//	                        nothing changed (its quick check: size and
//	                        mtime of every file), then with one file changed
//
// Ferry's figures are the whole `ferry job create -f job.yml` of a job
// whose code is that folder (`command: "true"`), from the process start to
// its exit, against a real server (`ferry server`) that stores every blob
// durably:
//
//	cold        a fresh server and a fresh FERRY_HOME (no stat cache)
//	unchanged   the same folder again
//	one changed one small file rewritten
//	no cache    the same folder again with a fresh FERRY_HOME: every file
//	            hashed, nothing uploaded
//
// Each job is waited for, untimed, before the next step, so its runner
// does not share the machine with a timing.
//
//	go run ./bench/snapshot [-files 5000] [-mb 450] [-runs 3]
//
// It needs rsync (Debian: apt-get install rsync). It prints the median of
// each figure over the runs and the ratios; it asserts nothing.
package main

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
)

func main() {
	files := flag.Int("files", 5000, "files in the code folder")
	mb := flag.Int("mb", 450, "megabytes in the code folder, about")
	runs := flag.Int("runs", 3, "times to measure each figure (the median is printed)")
	keep := flag.Bool("keep", false, "keep the temporary folder (servers' logs) and say where it is")
	flag.Parse()
	if err := run(*files, *mb, *runs, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "snapshot:", err)
		os.Exit(1)
	}
}

// figures are one run's timings.
type figures struct {
	rsyncCold, rsyncSame, rsyncOne  time.Duration
	ferryCold, ferrySame, ferryOne  time.Duration
	ferryNoCache                    time.Duration
	coldLine, sameLine, noCacheLine string // what the CLI said it uploaded
}

func run(nFiles, mb, runs int, keep bool) error {
	rsync, err := exec.LookPath("rsync")
	if err != nil {
		return fmt.Errorf("rsync is not installed; it is the peer this benchmark compares with (Debian: apt-get install rsync): %w", err)
	}
	tmp, err := os.MkdirTemp("", "ferry-bench-snapshot-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	bin := filepath.Join(tmp, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
		return fmt.Errorf("build ferry (run from the repository root): %v\n%s", err, out)
	}
	code := filepath.Join(tmp, "code")
	total, small, err := makeTree(code, nFiles, int64(mb)<<20)
	if err != nil {
		return err
	}
	// As a folder last edited more than a moment before it is sent: a
	// file written within 2 s of a submit is hashed again by the next one
	// (the stat cache's guard against changes in the same clock tick).
	time.Sleep(2 * time.Second)
	job := filepath.Join(tmp, "job.yml")
	if err := os.WriteFile(job, []byte("command: \"true\"\ncode: ./code\ncompute: local\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("code snapshot benchmark: %d files, %.0f MB (%d of them under 64 KiB), %d runs, %d CPUs, %s\n\n",
		nFiles, float64(total)/1e6, small, runs, runtime.NumCPU(), tmp)

	var all []figures
	for i := range runs {
		f, err := oneRun(rsync, bin, tmp, code, job, i)
		if err != nil {
			return err
		}
		all = append(all, f)
	}
	med := func(get func(figures) time.Duration) time.Duration {
		var ds []time.Duration
		for _, f := range all {
			ds = append(ds, get(f))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	rc, rs, ro := med(func(f figures) time.Duration { return f.rsyncCold }), med(func(f figures) time.Duration { return f.rsyncSame }), med(func(f figures) time.Duration { return f.rsyncOne })
	fc, fs, fo, fn := med(func(f figures) time.Duration { return f.ferryCold }), med(func(f figures) time.Duration { return f.ferrySame }), med(func(f figures) time.Duration { return f.ferryOne }), med(func(f figures) time.Duration { return f.ferryNoCache })
	last := all[len(all)-1]
	fmt.Printf("\nmedians of %d runs\n", runs)
	fmt.Printf("%-36s %8.3fs\n", "rsync -a, to a fresh folder", rc.Seconds())
	fmt.Printf("%-36s %8.3fs\n", "rsync -a, unchanged", rs.Seconds())
	fmt.Printf("%-36s %8.3fs\n", "rsync -a, one file changed", ro.Seconds())
	fmt.Printf("%-36s %8.3fs  (%s)\n", "ferry job create, cold", fc.Seconds(), last.coldLine)
	fmt.Printf("%-36s %8.3fs  (%s)\n", "ferry job create, unchanged", fs.Seconds(), last.sameLine)
	fmt.Printf("%-36s %8.3fs\n", "ferry job create, one file changed", fo.Seconds())
	fmt.Printf("%-36s %8.3fs  (%s)\n", "ferry job create, no stat cache", fn.Seconds(), last.noCacheLine)
	fmt.Printf("%-36s %8.2f  (aim: <= 1.5)\n", "ratio cold ferry / rsync", fc.Seconds()/rc.Seconds())
	fmt.Printf("%-36s %8.2f  (aim: <= 1)\n", "ratio unchanged ferry / rsync", fs.Seconds()/rs.Seconds())
	fmt.Printf("%-36s %8.2f\n", "ratio one changed ferry / rsync", fo.Seconds()/ro.Seconds())
	fmt.Printf("%-36s %8.2f\n", "ratio no cache ferry / rsync unch.", fn.Seconds()/rs.Seconds())
	return nil
}

// oneRun measures every figure once: rsync to a fresh copy, and ferry to
// a fresh server with a fresh FERRY_HOME.
func oneRun(rsync, bin, tmp, code, job string, i int) (figures, error) {
	var f figures
	copyDir := filepath.Join(tmp, fmt.Sprintf("copy%d", i))
	rs := func() (time.Duration, error) {
		return timeCmd(exec.Command(rsync, "-a", code+"/", copyDir+"/"))
	}
	var err error
	if f.rsyncCold, err = rs(); err != nil {
		return f, err
	}
	if f.rsyncSame, err = rs(); err != nil {
		return f, err
	}

	c, url, tok, stop, err := startServer(bin, tmp, fmt.Sprintf("data%d", i))
	if err != nil {
		return f, err
	}
	defer stop()
	home := func(name string) []string {
		return []string{"FERRY_URL=" + url, "FERRY_TOKEN=" + tok, "FERRY_HOME=" + filepath.Join(tmp, fmt.Sprintf("%s%d", name, i))}
	}
	create := func(env []string) (time.Duration, string, error) {
		cmd := exec.Command(bin, "job", "create", "-f", job)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		d, err := timeCmd(cmd)
		if err != nil {
			return 0, "", fmt.Errorf("ferry job create: %w\n%s", err, stderr.String())
		}
		// Untimed: let the job end, so its runner does not share the
		// machine with the next timing.
		if err := waitJob(c, strings.TrimSpace(stdout.String())); err != nil {
			return 0, "", err
		}
		return d, lastLine(stderr.String()), nil
	}
	if f.ferryCold, f.coldLine, err = create(home("home")); err != nil {
		return f, err
	}
	if f.ferrySame, f.sameLine, err = create(home("home")); err != nil {
		return f, err
	}
	if f.ferryNoCache, f.noCacheLine, err = create(home("home-nocache")); err != nil {
		return f, err
	}

	// One small file changed: rsync and ferry each see it once.
	if err := os.WriteFile(filepath.Join(code, "d0000", "f00000.py"), fmt.Appendf(nil, "# changed in run %d at %s\n", i, time.Now()), 0o644); err != nil {
		return f, err
	}
	if f.rsyncOne, err = rs(); err != nil {
		return f, err
	}
	if f.ferryOne, _, err = create(home("home")); err != nil {
		return f, err
	}
	fmt.Printf("run %d: rsync cold %.3fs unchanged %.3fs one %.3fs; ferry cold %.3fs unchanged %.3fs one %.3fs no-cache %.3fs\n", i+1,
		f.rsyncCold.Seconds(), f.rsyncSame.Seconds(), f.rsyncOne.Seconds(), f.ferryCold.Seconds(), f.ferrySame.Seconds(), f.ferryOne.Seconds(), f.ferryNoCache.Seconds())
	return f, os.RemoveAll(copyDir)
}

// makeTree writes n files of random content, about total bytes in all, 50
// to a folder, shaped like a code folder with some data in it: most files
// small (source), a few of a few MiB, fewer still of tens of MiB. It
// returns the bytes written and how many files are under 64 KiB.
func makeTree(dir string, n int, total int64) (int64, int, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int64, n)
	var sum int64
	for i := range sizes {
		switch r := rng.IntN(1000); {
		case r < 960:
			sizes[i] = 200 + rng.Int64N(48<<10)
		case r < 995:
			sizes[i] = 1<<20 + rng.Int64N(3<<20)
		default:
			sizes[i] = 8<<20 + rng.Int64N(24<<20)
		}
		sum += sizes[i]
	}
	// Scale the large ones so the whole is about total.
	var smallSum int64
	for _, s := range sizes {
		if s < 1<<20 {
			smallSum += s
		}
	}
	largeWant := max(total-smallSum, 0)
	var written int64
	small := 0
	buf := make([]byte, 0, 32<<20)
	for i, s := range sizes {
		if s >= 1<<20 {
			s = s * largeWant / (sum - smallSum)
			s = max(s, 64<<10)
		}
		if s < 64<<10 {
			small++
		}
		sub := filepath.Join(dir, fmt.Sprintf("d%04d", i/50))
		if i%50 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return 0, 0, err
			}
		}
		buf = buf[:s]
		for j := 0; j+8 <= len(buf); j += 8 {
			v := rng.Uint64()
			for k := range 8 {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		name := fmt.Sprintf("f%05d.py", i)
		if s >= 64<<10 {
			name = fmt.Sprintf("f%05d.bin", i)
		}
		if err := os.WriteFile(filepath.Join(sub, name), buf, 0o644); err != nil {
			return 0, 0, err
		}
		written += s
	}
	return written, small, nil
}

// timeCmd runs cmd and times it; its output goes into the error, unless
// the caller collects it.
func timeCmd(cmd *exec.Cmd) (time.Duration, error) {
	var out bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout, cmd.Stderr = &out, &out
	}
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return time.Since(start), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// waitJob waits for a job to end.
func waitJob(c *client.Client, name string) error {
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		j, err := c.GetJob(ctx, name)
		if err != nil {
			return fmt.Errorf("job %s: %w", name, err)
		}
		if apitypes.IsTerminal(j.Status) {
			if j.Status != apitypes.StatusCompleted {
				return fmt.Errorf("job %s ended %s: %s %s", name, j.Status, j.StatusReason, j.Error)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("job %s did not end within 5 minutes", name)
}

func startServer(bin, tmp, data string) (c *client.Client, url, token string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dataDir := filepath.Join(tmp, data)
	srv := exec.Command(bin, "server", "--data-dir", dataDir, "--addr", addr)
	logf, err := os.Create(filepath.Join(tmp, data+".log"))
	if err != nil {
		return nil, "", "", nil, err
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return nil, "", "", nil, err
	}
	// The server's data and work dirs go when it stops: each run stores
	// the folder again, and a root server's jobs work outside tmp
	// (/var/lib/ferry-work/HASH), where each job holds a copy of it.
	stop = func() {
		var info struct {
			WorkDir string `json:"work_dir"`
		}
		if data, err := os.ReadFile(filepath.Join(dataDir, "server.json")); err == nil {
			_ = json.Unmarshal(data, &info)
		}
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
		logf.Close()
		if info.WorkDir != "" {
			os.RemoveAll(info.WorkDir)
		}
		os.RemoveAll(dataDir)
	}
	url = "http://" + addr
	ctx := context.Background()
	for i := 0; ; i++ {
		tok, err := os.ReadFile(filepath.Join(dataDir, "owner.token"))
		if err == nil {
			c := client.New(url, string(tok))
			if c.Health(ctx) == nil {
				return c, url, string(tok), stop, nil
			}
		}
		if i > 400 {
			stop()
			return nil, "", "", nil, fmt.Errorf("server did not start; see %s", logf.Name())
		}
		time.Sleep(25 * time.Millisecond)
	}
}
