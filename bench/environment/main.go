// Command environment measures the Preparing time of jobs: the first job
// of an environment, which builds it, and a second job with the same
// environment, which reuses the node's build. Beside them it measures the
// peers in the same run: a job with no environment at all (what Ferry's
// Preparing costs when there is nothing to make), `python3 -m venv` plus pip
// by hand for a virtualenv, and `docker run --rm IMAGE true` for an image.
//
//	go run ./bench/environment [-n 5]
//
// Image figures need scripts/make-base-image.sh to have run. It prints
// figures and ratios; it asserts nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/testutil"
)

func main() {
	n := flag.Int("n", 5, "repetitions of the reused case (the median is printed)")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "environment:", err)
		os.Exit(1)
	}
}

type bench struct {
	bin, tmp string
	env      []string // for CLI calls
	c        *client.Client
	seq      int
}

func run(n int) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-env-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
		return fmt.Errorf("build ferry (run from the repository root): %v\n%s", err, out)
	}
	wheels := filepath.Join(tmp, "wheels")
	if err := os.MkdirAll(wheels, 0o755); err != nil {
		return err
	}
	if _, err := testutil.WriteWheel(wheels, "ferrybenchpkg", "1.0", map[string]string{"ferrybenchpkg/__init__.py": "VALUE = 1\n"}); err != nil {
		return err
	}
	os.Setenv("PIP_NO_INDEX", "1")
	os.Setenv("PIP_FIND_LINKS", wheels)

	b := &bench{bin: bin, tmp: tmp}
	stop, err := b.startServer()
	if err != nil {
		return err
	}
	defer stop()

	fmt.Printf("environment benchmark: Preparing = from the Preparing status to Running (median of %d for reuse)\n\n", n)
	none, err := b.median(n, "command: \"true\"\n", nil)
	if err != nil {
		return err
	}
	fmt.Printf("%-44s %10s\n", "no environment (Ferry's own Preparing)", ms(none))

	venv := "command: python -c \"import ferrybenchpkg\"\nenvironment:\n  python:\n    requirements: requirements.txt\n"
	files := map[string]string{"requirements.txt": "ferrybenchpkg==1.0\n"}
	first, err := b.prepare(venv, files)
	if err != nil {
		return err
	}
	again, err := b.median(n, venv, files)
	if err != nil {
		return err
	}
	byHand, err := timeIt(func() error {
		d := filepath.Join(tmp, "by-hand-venv")
		if out, err := exec.Command("python3", "-m", "venv", d).CombinedOutput(); err != nil {
			return fmt.Errorf("venv: %v %s", err, out)
		}
		out, err := exec.Command(filepath.Join(d, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check", "ferrybenchpkg==1.0").CombinedOutput()
		if err != nil {
			return fmt.Errorf("pip: %v %s", err, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("%-44s %10s\n", "virtualenv, first job (builds)", ms(first))
	fmt.Printf("%-44s %10s   (aim: < 50 ms)\n", "virtualenv, second job (reuses)", ms(again))
	fmt.Printf("%-44s %10s\n", "peer: python3 -m venv + pip install by hand", ms(byHand))
	fmt.Printf("%-44s %10.1fx\n", "speed-up of reuse over building by hand", float64(byHand)/float64(again))

	if exec.Command("docker", "image", "inspect", testutil.BaseImage).Run() != nil {
		fmt.Printf("\n%-44s skipped: run scripts/make-base-image.sh for %s\n", "image environments", testutil.BaseImage)
		return nil
	}
	image := "command: \"true\"\nenvironment:\n  build:\n    path: docker\n"
	dfiles := map[string]string{"docker/Dockerfile": fmt.Sprintf("FROM %s\nRUN echo %d > /bench-stamp\n", testutil.BaseImage, time.Now().UnixNano())}
	ifirst, err := b.prepare(image, dfiles)
	if err != nil {
		return err
	}
	iagain, err := b.median(n, image, dfiles)
	if err != nil {
		return err
	}
	var runs []time.Duration
	for range n {
		d, err := timeIt(func() error { return exec.Command("docker", "run", "--rm", testutil.BaseImage, "true").Run() })
		if err != nil {
			return fmt.Errorf("docker run: %w", err)
		}
		runs = append(runs, d)
	}
	fmt.Printf("\n%-44s %10s\n", "image (build:), first job (docker build)", ms(ifirst))
	fmt.Printf("%-44s %10s   (aim: < 500 ms)\n", "image (build:), second job (reuses)", ms(iagain))
	fmt.Printf("%-44s %10s   (whole run, start to exit)\n", "peer: docker run --rm IMAGE true", ms(medianOf(runs)))
	return nil
}

func (b *bench) startServer() (func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dataDir := filepath.Join(b.tmp, "data")
	srv := exec.Command(b.bin, "server", "--data-dir", dataDir, "--addr", addr)
	logf, err := os.Create(filepath.Join(b.tmp, "server.log"))
	if err != nil {
		return nil, err
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return nil, err
	}
	stop := func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }
	for i := 0; ; i++ {
		tok, err := os.ReadFile(filepath.Join(dataDir, "owner.token"))
		if err == nil {
			b.c = client.New("http://"+addr, strings.TrimSpace(string(tok)))
			if b.c.Health(context.Background()) == nil {
				b.env = append(os.Environ(), "FERRY_URL=http://"+addr, "FERRY_TOKEN="+strings.TrimSpace(string(tok)), "FERRY_HOME="+b.tmp)
				return stop, nil
			}
		}
		if i > 400 {
			stop()
			return nil, fmt.Errorf("server did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// prepare submits one job with the CLI, waits for it and returns how long
// it was Preparing.
func (b *bench) prepare(yaml string, files map[string]string) (time.Duration, error) {
	b.seq++
	dir := filepath.Join(b.tmp, fmt.Sprintf("job-%d", b.seq))
	files = mapWith(files, "job.yml", yaml)
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return 0, err
		}
	}
	name := fmt.Sprintf("bench-%d", b.seq)
	cmd := exec.Command(b.bin, "job", "create", "-f", filepath.Join(dir, "job.yml"), "--name", name, "--stream")
	cmd.Env = b.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("job %s: %v\n%s", name, err, out)
	}
	j, err := b.c.GetJob(context.Background(), name)
	if err != nil {
		return 0, err
	}
	var prep, running time.Time
	for _, e := range j.History {
		switch e.To {
		case "Preparing":
			prep = e.Time
		case "Running":
			running = e.Time
		}
	}
	if prep.IsZero() || running.IsZero() {
		return 0, fmt.Errorf("job %s has no Preparing→Running in its history", name)
	}
	return running.Sub(prep), nil
}

func (b *bench) median(n int, yaml string, files map[string]string) (time.Duration, error) {
	var ds []time.Duration
	for range n {
		d, err := b.prepare(yaml, files)
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	return medianOf(ds), nil
}

func mapWith(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

func medianOf(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func timeIt(f func() error) (time.Duration, error) {
	t := time.Now()
	err := f()
	return time.Since(t), err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
