// Command pipeline measures what a pipeline job costs beyond its steps: a
// linear pipeline of trivial steps (each writes a file its successor
// reads), its wall time from submit to end against the sum of its steps'
// own run times (Started to Ended, as the server recorded them), beside a
// peer in the same run: the same steps submitted as plain command jobs by
// a client that waits for each before the next, as a script would.
//
//	go run ./bench/pipeline [-steps 20] [-runs 3] [-ferry BINARY]
//
// It prints figures and ratios; it asserts nothing. README.md records a
// run.
package main

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
)

func main() {
	steps := flag.Int("steps", 20, "steps of the linear pipeline")
	runs := flag.Int("runs", 3, "pipelines to run (one after another); the median is reported")
	ferry := flag.String("ferry", "", "a ferry binary to measure instead of building ./cmd/ferry")
	flag.Parse()
	if err := run(*steps, *runs, *ferry); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

func run(steps, runs int, prebuilt string) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-pipeline-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := prebuilt
	if bin == "" {
		bin = filepath.Join(tmp, "ferry")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
			return fmt.Errorf("build ferry (run from the repository root): %v\n%s", err, out)
		}
	}
	c, stop, err := startServer(bin, tmp)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("pipeline benchmark: %d-step linear pipeline of trivial steps, %d runs, %d CPUs\n\n", steps, runs, runtime.NumCPU())
	var pipe, peer []result
	for r := 0; r < runs; r++ {
		res, err := runPipeline(c, fmt.Sprintf("bench-pipe-%d", r), steps)
		if err != nil {
			return err
		}
		pipe = append(pipe, res)
		res, err = runScript(c, fmt.Sprintf("bench-script-%d", r), steps)
		if err != nil {
			return err
		}
		peer = append(peer, res)
	}
	p, s := median(pipe), median(peer)
	fmt.Printf("%-34s %10s %14s %14s %16s\n", "", "wall", "sum of steps", "overhead", "overhead/step")
	p.print("pipeline job (server runs it)", steps)
	s.print("client script (job after job)", steps)
	fmt.Printf("\nmedian per step: previous step's end -> its job made: pipeline %v, script %v; made -> started: pipeline %v, script %v\n",
		med(p.made), med(s.made), med(p.started), med(s.started))
	fmt.Printf("pipeline overhead per step: %.1f ms (aim <= 50 ms); ratio to the client script's: %.2f\n",
		ms(p.overhead())/float64(steps), float64(p.overhead())/float64(s.overhead()))
	return nil
}

type result struct {
	wall, steps time.Duration
	// made is, per step after the first, the time from its predecessor's
	// end to its own job being made; started from then to its start.
	made, started []time.Duration
}

func (r result) overhead() time.Duration { return r.wall - r.steps }

func (r result) print(what string, steps int) {
	fmt.Printf("%-34s %10v %14v %14v %13.1f ms\n", what, r.wall.Round(time.Millisecond), r.steps.Round(time.Millisecond),
		r.overhead().Round(time.Millisecond), ms(r.overhead())/float64(steps))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(rs []result) result {
	sort.Slice(rs, func(a, b int) bool { return rs[a].overhead() < rs[b].overhead() })
	return rs[len(rs)/2]
}

// stepCommand is step i's command: it reads its predecessor's file, as a
// real step reads its input, and writes its own.
func stepCommand(i int) string {
	if i == 0 {
		return "echo 0 > ${{outputs.o}}/n"
	}
	return "echo $(( $(cat ${{inputs.x}}/n) + 1 )) > ${{outputs.o}}/n"
}

func runPipeline(c *client.Client, name string, steps int) (result, error) {
	ctx := context.Background()
	p := &spec.PipelineJob{Type: "pipeline", Name: name, Settings: &spec.PipelineSettings{ForceRerun: true}, Jobs: map[string]*spec.PipelineStep{}}
	for i := 0; i < steps; i++ {
		st := &spec.PipelineStep{Type: "command", Command: stepCommand(i), Outputs: map[string]spec.StepOutput{"o": {Type: "uri_folder"}}}
		if i > 0 {
			st.Inputs = map[string]spec.StepInput{"x": {Binding: &spec.Binding{Kind: spec.BindStepOutput, Step: stepName(i - 1), Name: "o"}}}
		}
		p.Jobs[stepName(i)] = st
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	if _, err := c.SubmitPipeline(ctx, apitypes.PipelineJobRequest{Spec: raw}); err != nil {
		return result{}, err
	}
	j, err := waitEnd(c, name)
	if err != nil {
		return result{}, err
	}
	wall := time.Since(start)
	if j.Status != apitypes.StatusCompleted {
		return result{}, fmt.Errorf("pipeline %s: %s (%s)", name, j.Status, j.StatusReason)
	}
	res := result{wall: wall}
	var prevEnd *time.Time
	for _, st := range j.Steps { // in the order they ran
		sj, err := c.GetJob(ctx, st.Job)
		if err != nil {
			return result{}, err
		}
		res.steps += sj.Ended.Sub(*sj.Started)
		if prevEnd != nil {
			res.made = append(res.made, sj.Created.Sub(*prevEnd))
		}
		res.started = append(res.started, sj.Started.Sub(*sj.Created))
		prevEnd = sj.Ended
	}
	return res, nil
}

// runScript is the peer: the same steps as plain command jobs, each
// submitted once the one before has ended, its input the one before's
// output downloaded and uploaded again, as a client script would.
func runScript(c *client.Client, prefix string, steps int) (result, error) {
	ctx := context.Background()
	start := time.Now()
	var sum time.Duration
	var res result
	var prevEnd *time.Time
	prevOut := ""
	for i := 0; i < steps; i++ {
		name := prefix + "-" + strconv.Itoa(i)
		j := &spec.Job{Type: "command", Name: name, Command: stepCommand(i), Outputs: map[string]spec.Output{"o": {Type: "uri_folder"}}}
		req := apitypes.JobRequest{}
		if i > 0 {
			j.Inputs = map[string]spec.Input{"x": {Type: "uri_folder", Path: "prev"}}
			req.InputSnapshots = map[string]string{"x": prevOut}
		}
		raw, err := json.Marshal(j)
		if err != nil {
			return result{}, err
		}
		req.Spec = raw
		if _, err := c.SubmitJob(ctx, req); err != nil {
			return result{}, err
		}
		done, err := waitEnd(c, name)
		if err != nil {
			return result{}, err
		}
		if done.Status != apitypes.StatusCompleted {
			return result{}, fmt.Errorf("job %s: %s (%s)", name, done.Status, done.StatusReason)
		}
		out, err := c.Outputs(ctx, name)
		if err != nil {
			return result{}, err
		}
		prevOut = out.Named["o"]
		sum += done.Ended.Sub(*done.Started)
		res.started = append(res.started, done.Started.Sub(*done.Created))
		if prevEnd != nil {
			res.made = append(res.made, done.Created.Sub(*prevEnd))
		}
		prevEnd = done.Ended
	}
	res.wall, res.steps = time.Since(start), sum
	return res, nil
}

func med(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = append([]time.Duration(nil), ds...)
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds[len(ds)/2].Round(100 * time.Microsecond)
}

func stepName(i int) string { return fmt.Sprintf("s%02d", i) }

// waitEnd polls a job until it has ended, every 5 ms: the poll adds at
// most that to a wall time of seconds.
func waitEnd(c *client.Client, name string) (*apitypes.Job, error) {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		j, err := c.GetJob(ctx, name)
		if err != nil {
			return nil, err
		}
		if apitypes.IsTerminal(j.Status) {
			return j, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil, fmt.Errorf("job %s did not end in 10 minutes", name)
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
	stop := func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }
	ctx := context.Background()
	for i := 0; ; i++ {
		tok, err := os.ReadFile(filepath.Join(dataDir, "owner.token"))
		if err == nil {
			c := client.New("http://"+addr, string(tok))
			if c.Health(ctx) == nil {
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
