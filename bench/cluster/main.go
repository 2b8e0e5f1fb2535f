// Command cluster measures how fast a cluster that autoscales from zero
// reacts, on the process provider (agents as processes on this machine):
//
//   - submit → scale-up decision: the job's creation to the cluster's
//     scale_up event (the aim: within a second);
//
//   - cold start: submit → Running when the cluster has no node (launch,
//     agent join, runner start);
//
//   - warm start: submit → Running with an idle node;
//
//   - the peer, measured in the same run: submit → Running on the local
//     target, which starts a runner directly with no agent in between.
//
//     go run ./bench/cluster [-n 5]
//
// It prints figures and ratios; it asserts nothing.
package main

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

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
	"github.com/ferry-ml/ferry/internal/spec"
)

func main() {
	n := flag.Int("n", 5, "repetitions (medians are printed)")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
		return fmt.Errorf("build ferry (run from the repository root): %v\n%s", err, out)
	}
	c, stop, err := startServer(bin, tmp)
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()

	var decide, cold, warm, local []time.Duration
	for i := range n {
		// A fresh cluster each round, so each cold start starts from zero.
		name := fmt.Sprintf("bench-%d", i)
		maxN, minN, idle := 1, 0, 600
		if _, err := c.CreateCompute(ctx, &spec.Compute{Name: name, Type: "amlcompute", Size: "Standard_DS1_v2",
			MinInstances: &minN, MaxInstances: &maxN, IdleTimeBeforeScaleDown: &idle}); err != nil {
			return err
		}
		j, err := submit(ctx, c, name)
		if err != nil {
			return err
		}
		running, err := waitRunning(ctx, c, j)
		if err != nil {
			return err
		}
		cold = append(cold, running)
		cv, err := c.GetCompute(ctx, name)
		if err != nil {
			return err
		}
		for _, e := range cv.Events {
			if e.Kind == "scale_up" {
				decide = append(decide, e.Time.Sub(*j.Created))
				break
			}
		}
		if err := waitEnd(ctx, c, j.Name); err != nil {
			return err
		}
		// The node is idle now: a warm start.
		j, err = submit(ctx, c, name)
		if err != nil {
			return err
		}
		if d, err := waitRunning(ctx, c, j); err != nil {
			return err
		} else {
			warm = append(warm, d)
		}
		if err := waitEnd(ctx, c, j.Name); err != nil {
			return err
		}
		j, err = submit(ctx, c, "local")
		if err != nil {
			return err
		}
		if d, err := waitRunning(ctx, c, j); err != nil {
			return err
		} else {
			local = append(local, d)
		}
		if err := waitEnd(ctx, c, j.Name); err != nil {
			return err
		}
	}
	fmt.Printf("cluster benchmark: process provider, Standard_DS1_v2, %d rounds (medians)\n\n", n)
	fmt.Printf("%-40s %10s   (aim: < 1 s)\n", "submit -> scale-up decision", ms(median(decide)))
	fmt.Printf("%-40s %10s\n", "submit -> Running, cluster at 0 (cold)", ms(median(cold)))
	fmt.Printf("%-40s %10s\n", "submit -> Running, idle node (warm)", ms(median(warm)))
	fmt.Printf("%-40s %10s\n", "peer: submit -> Running, local target", ms(median(local)))
	fmt.Printf("%-40s %10.2f\n", "ratio warm cluster / local", float64(median(warm))/float64(median(local)))
	return nil
}

func submit(ctx context.Context, c *client.Client, compute string) (*apitypes.Job, error) {
	raw := fmt.Sprintf(`{"command": "true", "compute": %q}`, compute)
	return c.SubmitJob(ctx, apitypes.JobRequest{Spec: []byte(raw)})
}

// waitRunning returns the time from the job's creation to its Running event.
func waitRunning(ctx context.Context, c *client.Client, j *apitypes.Job) (time.Duration, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		v, err := c.GetJob(ctx, j.Name)
		if err != nil {
			return 0, err
		}
		for _, e := range v.History {
			if e.To == apitypes.StatusRunning {
				return e.Time.Sub(*v.Created), nil
			}
		}
		if apitypes.IsTerminal(v.Status) {
			return 0, fmt.Errorf("job %s ended %s (%s) without running", j.Name, v.Status, v.StatusReason)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("job %s did not run within 2 minutes", j.Name)
}

func waitEnd(ctx context.Context, c *client.Client, name string) error {
	for {
		v, err := c.GetJob(ctx, name)
		if err != nil {
			return err
		}
		if apitypes.IsTerminal(v.Status) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startServer(bin, tmp string) (*client.Client, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dataDir := filepath.Join(tmp, "data")
	srv := exec.Command(bin, "server", "--data-dir", dataDir, "--addr", addr)
	logf, err := os.Create(filepath.Join(tmp, "server.log"))
	if err != nil {
		return nil, nil, err
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
		// The agents are the cluster's machines: give them back.
		_ = exec.Command("pkill", "-f", "agent --server http://"+addr).Run()
	}
	for i := 0; ; i++ {
		tok, err := os.ReadFile(filepath.Join(dataDir, "owner.token"))
		if err == nil {
			c := client.New("http://"+addr, strings.TrimSpace(string(tok)))
			if c.Health(context.Background()) == nil {
				return c, stop, nil
			}
		}
		if i > 400 {
			stop()
			return nil, nil, fmt.Errorf("server did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
