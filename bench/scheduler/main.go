// Command scheduler measures one placement pass of the pure scheduler at
// cluster scale, and the autoscaler's decision time, beside the published
// throughput of Slurm and the Kubernetes scheduler.
//
//	go run ./bench/scheduler [-nodes 10000] [-jobs 100000] [-reps 7]
//
// It prints figures and ratios; it asserts nothing.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/ferry-ml/ferry/internal/autoscale"
	"github.com/ferry-ml/ferry/internal/scheduler"
	"github.com/ferry-ml/ferry/internal/sizes"
)

// Published figures, not measured here. Both are end to end (submission,
// RPCs, binding), where a Place pass is the decision alone, so the ratios
// say the decision is not what would hold Ferry back, not that Ferry runs
// that many jobs a second.
const (
	// Slurm's High Throughput Computing Administration Guide: "validated to
	// execute 500 simple batch jobs per second on a sustained basis".
	slurmJobsPerSec = 500
	// kube-scheduler: about 300 pods/s end to end at 30,000 nodes in the
	// Gödel scheduler's published comparison (kubewharf/godel-scheduler,
	// docs/performance); the 5,000-node scalability tests reached their
	// 100 pods/s rate limit in 2019 (kubernetes/kubernetes#74041).
	kubePodsPerSec = 300
)

func main() {
	nodes := flag.Int("nodes", 10_000, "nodes across the clusters")
	jobs := flag.Int("jobs", 100_000, "queued jobs")
	reps := flag.Int("reps", 7, "repetitions of each measurement (the median is reported)")
	flag.Parse()
	if *nodes < 10 || *jobs < 1 || *reps < 1 {
		fmt.Fprintln(os.Stderr, "scheduler: need -nodes ≥ 10, -jobs ≥ 1, -reps ≥ 1")
		os.Exit(2)
	}
	fmt.Printf("scheduler benchmark: %d nodes, %d queued jobs, %d repetitions, %d CPUs, %s\n\n", *nodes, *jobs, *reps, runtime.NumCPU(), runtime.Version())

	for _, sc := range []struct {
		name string
		busy float64
	}{{"half-busy pool", 0.5}, {"idle pool", 0}} {
		st := world(rand.New(rand.NewPCG(1, 2)), *nodes, *jobs, sc.busy)
		var plan scheduler.Plan
		d := median(*reps, func() { plan = scheduler.Place(st) })
		placed, instances := len(plan.Placements), 0
		for _, p := range plan.Placements {
			instances += len(p.Instances)
		}
		rate := float64(placed) / d.Seconds()
		fmt.Printf("Place, %s:\n", sc.name)
		fmt.Printf("  %-34s %12v  (%d placed, %d instances, %d waiting with a reason, %d reservations)\n", "one pass (median)", d.Round(time.Microsecond), placed, instances, len(plan.Waiting), len(plan.Reservations))
		fmt.Printf("  %-34s %12.0f jobs/s\n", "placements", rate)
		fmt.Printf("  %-34s %12.0f jobs/s\n", "queue decisions (placed or reason)", float64(*jobs)/d.Seconds())
		fmt.Printf("  %-34s %12d jobs/s   ratio ferry/slurm %8.1f\n", "slurm, published (sustained)", slurmJobsPerSec, rate/slurmJobsPerSec)
		fmt.Printf("  %-34s %12d pods/s   ratio ferry/kube  %8.1f\n\n", "kube-scheduler, published", kubePodsPerSec, rate/kubePodsPerSec)
	}

	fmt.Println("autoscale.Decide, from the queue to a scale-up decision (aim: well under 1s):")
	ds3, _ := sizes.Builtin().Lookup("Standard_DS3_v2")
	q := sizes.DefaultQuotas()
	q.FamilyCores = map[string]int{"standardDSv2Family": 1 << 30}

	zero := autoscale.State{Quotas: q, Clusters: []autoscale.Cluster{{
		Name: "cpu-cluster", Size: ds3, MaxInstances: 4, IdleTimeBeforeScaleDown: 2 * time.Minute,
		Queued: []scheduler.Job{{Name: "just-queued", Seq: 1, Demand: scheduler.Resources{MilliCPU: 1000, Memory: 2 << 30}, Instances: 1}},
	}}}
	var p autoscale.Plan
	d := median(*reps, func() { p = autoscale.Decide(zero, time.Now()) })
	fmt.Printf("  %-58s %12v  (launch %d)\n", "one job queued on an empty cluster", d.Round(time.Microsecond), p.Clusters[0].Launch)

	big := bigCluster(rand.New(rand.NewPCG(3, 4)), ds3, q, *nodes, *jobs)
	d = median(*reps, func() { p = autoscale.Decide(big, time.Now()) })
	fmt.Printf("  %-58s %12v  (launch %d, %d waiting)\n", fmt.Sprintf("%d-node cluster, %d queued, one just queued", *nodes, *jobs), d.Round(time.Microsecond), p.Clusters[0].Launch, len(p.Clusters[0].Waiting))

	many := manyClusters(rand.New(rand.NewPCG(5, 6)), ds3, q, *nodes, *jobs)
	d = median(*reps, func() { p = autoscale.Decide(many, time.Now()) })
	launched := 0
	for _, c := range p.Clusters {
		launched += c.Launch
	}
	fmt.Printf("  %-58s %12v  (launch %d in all)\n", fmt.Sprintf("%d clusters, %d nodes and %d queued jobs in all", len(many.Clusters), *nodes, *jobs), d.Round(time.Microsecond), launched)
}

// median runs f reps times (after one warm-up run) and returns the median
// duration.
func median(reps int, f func()) time.Duration {
	f()
	ds := make([]time.Duration, reps)
	for i := range ds {
		runtime.GC()
		start := time.Now()
		f()
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

type pool struct {
	name  string
	share float64
	shape scheduler.Resources
}

func res(cpus, gib float64, gpus int) scheduler.Resources {
	return scheduler.Resources{MilliCPU: int64(cpus * 1000), Memory: int64(gib * (1 << 30)), GPUs: gpus}
}

// world is a pool of three clusters (70% DS3_v2, 20% NC24s_v3, 10%
// NC4as_T4_v3), busy of their nodes partly used, and a queue of mixed jobs:
// small and whole-node CPU jobs, 1-, 2- and 4-GPU jobs, 5% gangs of 2 to 8
// instances, a few of higher priority.
func world(r *rand.Rand, nodes, jobs int, busy float64) scheduler.State {
	pools := []pool{
		{"cpu-cluster", 0.7, res(4, 14, 0)},
		{"gpu-cluster", 0.2, res(24, 448, 4)},
		{"t4-cluster", 0.1, res(4, 28, 1)},
	}
	demands := map[string][]scheduler.Resources{
		"cpu-cluster": {res(0.5, 1, 0), res(1, 2, 0), res(2, 4, 0), res(1, 7, 0), res(4, 14, 0)},
		"gpu-cluster": {res(6, 100, 1), res(12, 200, 2), res(24, 448, 4), res(2, 16, 0)},
		"t4-cluster":  {res(4, 28, 1), res(2, 8, 1)},
	}
	var s scheduler.State
	for _, p := range pools {
		for i := range int(float64(nodes) * p.share) {
			n := scheduler.Node{ID: fmt.Sprintf("%s-%05d", p.name, i), Compute: p.name, State: scheduler.NodeIdle, Total: p.shape,
				FreeMilliCPU: p.shape.MilliCPU, FreeMemory: p.shape.Memory}
			for g := range p.shape.GPUs {
				n.FreeGPUs = append(n.FreeGPUs, g)
			}
			if r.Float64() < busy {
				n.State = scheduler.NodeBusy
				n.FreeMilliCPU = r.Int64N(p.shape.MilliCPU)
				n.FreeMemory = r.Int64N(p.shape.Memory)
				n.FreeGPUs = n.FreeGPUs[:r.IntN(len(n.FreeGPUs)+1)]
			}
			s.Nodes = append(s.Nodes, n)
		}
	}
	for i := range jobs {
		p := pools[0]
		switch x := r.Float64(); {
		case x > 0.9:
			p = pools[2]
		case x > 0.7:
			p = pools[1]
		}
		d := demands[p.name]
		j := scheduler.Job{Name: fmt.Sprintf("job-%06d", i), Compute: p.name, Seq: int64(i), Demand: d[r.IntN(len(d))], Instances: 1}
		if r.IntN(20) == 0 {
			j.Instances = 2 + r.IntN(7)
		}
		if r.IntN(50) == 0 {
			j.Priority = 1
		}
		s.Jobs = append(s.Jobs, j)
	}
	return s
}

// bigCluster is one DS3_v2 cluster of the given size, every node busy, with
// the queue behind it and room for as many nodes again.
func bigCluster(r *rand.Rand, size sizes.Size, q sizes.Quotas, nodes, jobs int) autoscale.State {
	c := autoscale.Cluster{Name: "cpu-cluster", Size: size, MaxInstances: 2 * nodes, IdleTimeBeforeScaleDown: 2 * time.Minute}
	full := res(float64(size.VCPUs), size.MemoryGiB, 0)
	for i := range nodes {
		c.Nodes = append(c.Nodes, autoscale.Node{Node: scheduler.Node{ID: fmt.Sprintf("n%05d", i), State: scheduler.NodeBusy, Total: full,
			FreeMilliCPU: r.Int64N(1000), FreeMemory: r.Int64N(1 << 30)}, LaunchedAt: time.Now().Add(-time.Hour)})
	}
	shapes := []scheduler.Resources{res(0.5, 1, 0), res(1, 2, 0), res(2, 4, 0), res(4, 14, 0)}
	for i := range jobs {
		c.Queued = append(c.Queued, scheduler.Job{Name: fmt.Sprintf("job-%06d", i), Seq: int64(i), Demand: shapes[r.IntN(len(shapes))], Instances: 1})
	}
	return autoscale.State{Clusters: []autoscale.Cluster{c}, Quotas: q}
}

// manyClusters spreads the nodes and the queue over 100 clusters, some
// growing, some idle and shrinking.
func manyClusters(r *rand.Rand, size sizes.Size, q sizes.Quotas, nodes, jobs int) autoscale.State {
	var s autoscale.State
	s.Quotas = q
	const k = 100
	for ci := range k {
		c := autoscale.Cluster{Name: fmt.Sprintf("cluster-%03d", ci), Size: size, MaxInstances: 2 * nodes / k, IdleTimeBeforeScaleDown: 2 * time.Minute}
		full := res(float64(size.VCPUs), size.MemoryGiB, 0)
		for i := range nodes / k {
			n := autoscale.Node{Node: scheduler.Node{ID: fmt.Sprintf("c%03d-n%04d", ci, i), State: scheduler.NodeBusy, Total: full,
				FreeMilliCPU: r.Int64N(2000), FreeMemory: r.Int64N(4 << 30)}, LaunchedAt: time.Now().Add(-time.Hour)}
			if ci%4 == 0 {
				n.State, n.FreeMilliCPU, n.FreeMemory = scheduler.NodeIdle, full.MilliCPU, full.Memory
				n.IdleSince = time.Now().Add(-time.Duration(r.IntN(300)) * time.Second)
			}
			c.Nodes = append(c.Nodes, n)
		}
		if ci%4 != 0 {
			for i := range jobs / k {
				c.Queued = append(c.Queued, scheduler.Job{Name: fmt.Sprintf("c%03d-job-%05d", ci, i), Seq: int64(i), Demand: res(float64(1+r.IntN(4)), float64(1+r.IntN(12)), 0), Instances: 1 + r.IntN(2)})
			}
		}
		s.Clusters = append(s.Clusters, c)
	}
	return s
}
