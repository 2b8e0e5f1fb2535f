// Command kubernetes measures Ferry's kubernetes compute target on a real
// cluster against the same Jobs created directly, in one run: submit →
// pod Running and submit → the job's first log line for a trivial job
// (`echo hi`), and the throughput of a burst of trivial jobs, from the
// first submit to the last job done.
//
//	go run ./bench/kubernetes [-kubeconfig PATH] [-image NAME:TAG] [-samples 5] [-n 100] [-rounds 3] [-timeout 10m]
//
// The peer is the same Job object (completionMode Indexed, one pod,
// backoffLimit 0, the same image and pod template, command `echo hi`)
// created with client-go, the way Ferry's target creates its own, and
// followed with a watch of the namespace's pods and Jobs. The bench starts
// a real `ferry server` listening on the node's address (the pods' runners
// reach it there) and attaches a kubernetes compute on a namespace of its
// own; at its end it stops the server and deletes the namespace, also when
// it fails or its -timeout ends it. It prints figures and ratios with the
// load average next to each; it asserts nothing. README.md has results.
package main

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/testutil"
)

const computeName = "bench-k8s"

func main() {
	kubeconfig := flag.String("kubeconfig", testutil.KubeconfigPath, "the cluster's kubeconfig (scripts/kube-up.sh writes this one)")
	image := flag.String("image", "ferry-base:bookworm", "the pods' image, already in the cluster (scripts/kube-image.sh); it needs glibc for Ferry's runner")
	samples := flag.Int("samples", 5, "latency samples of each kind, alternated")
	n := flag.Int("n", 100, "jobs in each throughput round")
	rounds := flag.Int("rounds", 3, "throughput rounds of each kind, alternated")
	serverLog := flag.String("server-log", "", "copy the server's log to this file at the end, to see where a job's time goes")
	timeout := flag.Duration("timeout", 10*time.Minute, "the whole run's limit: past it the bench stops, cleans up and fails")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; fmt.Fprintln(os.Stderr, "kubernetes: interrupted, cleaning up"); cancel() }()
	err := run(ctx, *kubeconfig, *image, *serverLog, *samples, *n, *rounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubernetes:", err)
		os.Exit(1)
	}
}

// bench is one run: the cluster, the namespace, the server and the
// watch of what happens in the namespace.
type bench struct {
	kc         string
	image      string
	cs         *kubernetes.Clientset
	ns         string
	fc         *client.Client
	obs        *observer
	serverLog  string
	serverDone chan struct{}
}

func run(ctx context.Context, kubeconfig, image, keepLog string, samples, n, rounds int) error {
	if _, err := os.Stat(kubeconfig); err != nil {
		return fmt.Errorf("-kubeconfig: %v: start the test cluster with scripts/kube-up.sh or name a kubeconfig", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("-kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200 // as a controller would; the default 5/s would throttle the peer's burst
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	b := &bench{kc: kubeconfig, image: image, cs: cs}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("the cluster does not answer: %w", err)
	}
	nodeIP := ""
	if len(nodes.Items) > 0 {
		for _, a := range nodes.Items[0].Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				nodeIP = a.Address
			}
		}
	}
	if net.ParseIP(nodeIP) == nil {
		return errors.New("the cluster's first node has no InternalIP (the server must listen where its pods reach it)")
	}

	rb := make([]byte, 4)
	_, _ = rand.Read(rb)
	b.ns = "ferry-bench-" + hex.EncodeToString(rb)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	defer b.deleteNamespace()
	b.obs = newObserver()
	go b.obs.watchPods(ctx, cs, b.ns)
	go b.obs.watchJobs(ctx, cs, b.ns)

	tmp, err := os.MkdirTemp("", "ferry-bench-k8s-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if keepLog != "" {
		defer func() {
			// After the server has stopped (deferred below), before tmp goes.
			if out, err := os.ReadFile(b.serverLog); err == nil {
				_ = os.WriteFile(keepLog, out, 0o600)
			}
		}()
	}
	// The pods mount the server's binary from the node (a hostPath): on
	// this single-node cluster that is this file.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	stop, err := b.startServer(ctx, tmp, nodeIP)
	if err != nil {
		return err
	}
	defer stop()
	if err := b.attach(ctx); err != nil {
		return err
	}

	fmt.Printf("kubernetes benchmark: image %s, namespace %s, %d latency samples and %d rounds of %d jobs, each way\n\n", image, b.ns, samples, rounds, n)
	if err := b.latency(ctx, samples); err != nil {
		return err
	}
	return b.throughput(ctx, n, rounds)
}

// startServer starts `ferry server` from a fresh build, listening on the
// node's address, and returns how to stop it.
func (b *bench) startServer(ctx context.Context, tmp, nodeIP string) (func(), error) {
	bin := filepath.Join(tmp, "ferry")
	if err := testutil.BuildFerry(bin); err != nil {
		return nil, fmt.Errorf("%w (go run the bench from inside the repository)", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen on the node's address %s: %w", nodeIP, err)
	}
	addr := ln.Addr().String()
	ln.Close()
	data := filepath.Join(tmp, "data")
	b.serverLog = filepath.Join(tmp, "server.log")
	logf, err := os.Create(b.serverLog)
	if err != nil {
		return nil, err
	}
	srv := exec.Command(bin, "server", "--data-dir", data, "--work-dir", filepath.Join(tmp, "work"), "--addr", addr)
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	b.serverDone = make(chan struct{})
	go func() { _ = srv.Wait(); logf.Close(); close(b.serverDone) }()
	stop := func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.serverDone:
		case <-time.After(15 * time.Second):
			_ = srv.Process.Kill()
			<-b.serverDone
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if tok, err := os.ReadFile(filepath.Join(data, "owner.token")); err == nil {
			b.fc = client.New("http://"+addr, strings.TrimSpace(string(tok)))
			if b.fc.Health(ctx) == nil {
				return stop, nil
			}
		}
		select {
		case <-b.serverDone:
			return nil, fmt.Errorf("ferry server ended at start-up:\n%s", b.logTail())
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("ferry server did not answer in 30 s:\n%s", b.logTail())
		}
	}
}

func (b *bench) logTail() string {
	out, _ := os.ReadFile(b.serverLog)
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}

// podTemplate is the pod template of both Ferry's compute and the peer's
// Jobs: the image is in the cluster already and never pulled.
const podTemplate = `{"spec": {"terminationGracePeriodSeconds": 10, "containers": [{"name": "runner", "imagePullPolicy": "Never"}]}}`

// attach attaches the kubernetes compute on the bench's namespace.
func (b *bench) attach(ctx context.Context) error {
	kc, err := os.ReadFile(b.kc)
	if err != nil {
		return err
	}
	var tmpl map[string]any
	_ = json.Unmarshal([]byte(podTemplate), &tmpl)
	doc := map[string]any{"name": computeName, "type": "kubernetes", "namespace": b.ns, "image": b.image, "pod_template": tmpl}
	raw, _ := json.Marshal(doc)
	c, err := spec.ParseCompute(raw) // JSON is YAML
	if err != nil {
		return fmt.Errorf("the bench's compute: %w", err)
	}
	c.KubeconfigContent = string(kc)
	if _, err := b.fc.CreateCompute(ctx, c); err != nil {
		return fmt.Errorf("attach the kubernetes compute: %w", err)
	}
	return nil
}

// peerJob is the Job Ferry's target would make for a trivial job, made
// directly: Indexed, one pod, no retries, the same image and template.
func (b *bench) peerJob(name string) *batchv1.Job {
	var tmpl corev1.PodTemplateSpec
	_ = json.Unmarshal([]byte(podTemplate), &tmpl)
	one, indexed := int32(1), batchv1.IndexedCompletion
	tmpl.Labels = map[string]string{"bench": "peer"}
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.Containers[0].Image = b.image
	tmpl.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "echo hi"}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "peer"}},
		Spec: batchv1.JobSpec{
			Completions: &one, Parallelism: &one, CompletionMode: &indexed,
			BackoffLimit: new(int32), TTLSecondsAfterFinished: new(int32(600)),
			Template: tmpl,
		},
	}
}

// sample is one trivial job's timings from its submit.
type sample struct {
	running  time.Duration // submit -> Running (Ferry: the job's status; peer: the pod's)
	log      time.Duration // submit -> its line "hi" read from the log stream
	podMade  time.Duration // submit -> the pod seen
	podSched time.Duration // submit -> the pod bound to a node
	podStart time.Duration // submit -> the pod's container started
	trace    []string      // Ferry: its status history, from the submit on
}

// latency measures submit -> Running and submit -> first log line, one
// job at a time, Ferry and the peer alternated.
func (b *bench) latency(ctx context.Context, samples int) error {
	var ferry, peer []sample
	steps := map[string][]time.Duration{}
	var order []string
	for i := 0; i < samples; i++ {
		s, err := b.ferryOne(ctx, fmt.Sprintf("lat-%02d", i), steps, &order)
		if err != nil {
			return err
		}
		ferry = append(ferry, s)
		p, err := b.peerOne(ctx, fmt.Sprintf("peer-lat-%02d", i))
		if err != nil {
			return err
		}
		peer = append(peer, p)
	}
	pick := func(ss []sample, f func(sample) time.Duration) time.Duration {
		var d []time.Duration
		for _, s := range ss {
			d = append(d, f(s))
		}
		return median(d)
	}
	load := loadavg()
	fr, pr := pick(ferry, func(s sample) time.Duration { return s.running }), pick(peer, func(s sample) time.Duration { return s.running })
	fl, pl := pick(ferry, func(s sample) time.Duration { return s.log }), pick(peer, func(s sample) time.Duration { return s.log })
	fmt.Printf("one trivial job at a time, median of %d each (load average %s):\n", samples, load)
	fmt.Printf("  %-34s ferry %-10v peer %-10v ratio %.2f (aim <= 1.2)\n", "submit -> Running", fr, pr, ratio(fr, pr))
	fmt.Printf("  %-34s ferry %-10v peer %-10v ratio %.2f (aim <= 1.2)\n", "submit -> first log line (\"hi\")", fl, pl, ratio(fl, pl))
	fmt.Printf("  %-34s ferry %-10v peer %v\n", "submit -> pod seen", pick(ferry, func(s sample) time.Duration { return s.podMade }), pick(peer, func(s sample) time.Duration { return s.podMade }))
	fmt.Printf("  %-34s ferry %-10v peer %v\n", "submit -> pod bound to the node", pick(ferry, func(s sample) time.Duration { return s.podSched }), pick(peer, func(s sample) time.Duration { return s.podSched }))
	fmt.Printf("  %-34s ferry %-10v peer %v\n", "submit -> pod phase Running", pick(ferry, func(s sample) time.Duration { return s.podStart }), pick(peer, func(s sample) time.Duration { return s.podStart }))
	fmt.Printf("  where a Ferry job's time goes (median, from its status history):\n")
	for _, st := range order {
		fmt.Printf("    %-32s %v\n", st, median(steps[st]))
	}
	fmt.Printf("  the last Ferry job, event by event from its submit (the server's clock is the bench's):\n")
	for _, l := range ferry[len(ferry)-1].trace {
		fmt.Printf("    %s\n", l)
	}
	fmt.Println()
	return nil
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// ferryOne submits one trivial job to Ferry and times it.
func (b *bench) ferryOne(ctx context.Context, name string, steps map[string][]time.Duration, order *[]string) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	spec, _ := json.Marshal(map[string]any{"name": name, "command": "echo hi", "compute": "azureml:" + computeName})
	logs := newLineWatch("hi")
	t0 := time.Now()
	if _, err := b.fc.SubmitJob(ctx, apitypes.JobRequest{Spec: spec}); err != nil {
		return sample{}, fmt.Errorf("submit %s: %w", name, err)
	}
	go func() {
		// Follow the log from the submit on, as `ferry job stream` does.
		var off int64
		for ctx.Err() == nil && !logs.seen() {
			o, _ := b.fc.StreamLogs(ctx, name, off, true, logs)
			off = o
			if !logs.seen() {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	var j *jobView
	for {
		got, err := b.fc.GetJob(ctx, name)
		if err != nil {
			return sample{}, fmt.Errorf("%s: %w", name, err)
		}
		if got.Ended != nil {
			if got.Status != "Completed" {
				return sample{}, fmt.Errorf("%s: %s (%s); the server's log:\n%s", name, got.Status, got.StatusReason, b.logTail())
			}
			j = &jobView{started: got.Started}
			for _, e := range got.History {
				j.trace = append(j.trace, fmt.Sprintf("+%-8v %-10s %s", e.Time.Sub(t0).Round(time.Millisecond), e.To, e.Reason))
			}
			for k := 1; k < len(got.History); k++ {
				st := got.History[k-1].To + " -> " + got.History[k].To
				if _, ok := steps[st]; !ok {
					*order = append(*order, st)
				}
				steps[st] = append(steps[st], got.History[k].Time.Sub(got.History[k-1].Time))
			}
			break
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return sample{}, fmt.Errorf("%s did not end in 2 minutes", name)
		}
	}
	lt, err := logs.wait(ctx)
	if err != nil {
		return sample{}, fmt.Errorf("%s: no \"hi\" in its log: %w", name, err)
	}
	s := sample{log: lt.Sub(t0), trace: j.trace}
	if j.started != nil {
		s.running = j.started.Sub(t0)
	}
	p, err := b.obs.waitPod(ctx, "ferry:"+name)
	if err != nil {
		return sample{}, fmt.Errorf("%s: its pod: %w", name, err)
	}
	s.podMade, s.podSched, s.podStart = p.seen.Sub(t0), p.scheduled.Sub(t0), p.started.Sub(t0)
	s.trace = append(s.trace,
		fmt.Sprintf("+%-8v (pod seen by the bench's watch)", s.podMade.Round(time.Millisecond)),
		fmt.Sprintf("+%-8v (pod bound to the node)", s.podSched.Round(time.Millisecond)),
		fmt.Sprintf("+%-8v (pod phase Running seen)", s.podStart.Round(time.Millisecond)),
		fmt.Sprintf("+%-8v (\"hi\" read from the job's log stream)", s.log.Round(time.Millisecond)))
	// Ferry deletes its objects once the job has ended; wait, so that the
	// next sample starts on an empty namespace.
	return s, b.waitNoPods(ctx)
}

type jobView struct {
	started *time.Time
	trace   []string
}

// peerOne creates the same Job directly and times it the same way: pod
// Running from the pod watch, the line from the pod's log stream.
func (b *bench) peerOne(ctx context.Context, name string) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	logs := newLineWatch("hi")
	t0 := time.Now()
	if _, err := b.cs.BatchV1().Jobs(b.ns).Create(ctx, b.peerJob(name), metav1.CreateOptions{}); err != nil {
		return sample{}, fmt.Errorf("create Job %s: %w", name, err)
	}
	p, err := b.obs.waitPodStarted(ctx, name)
	if err != nil {
		return sample{}, fmt.Errorf("Job %s: %w", name, err)
	}
	s := sample{running: p.started.Sub(t0), podMade: p.seen.Sub(t0), podSched: p.scheduled.Sub(t0), podStart: p.started.Sub(t0)}
	// Stream the log as `kubectl logs -f` does, from the moment the pod
	// runs (before that the kubelet refuses it).
	for !logs.seen() {
		rc, err := b.cs.CoreV1().Pods(b.ns).GetLogs(p.name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err == nil {
			_, _ = io.Copy(logs, rc)
			rc.Close()
		}
		if logs.seen() {
			break
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return sample{}, fmt.Errorf("Job %s: no \"hi\" in its pod's log in 2 minutes", name)
		}
	}
	lt, _ := logs.wait(ctx)
	s.log = lt.Sub(t0)
	if _, err := b.obs.waitJobDone(ctx, name); err != nil {
		return sample{}, fmt.Errorf("Job %s: %w", name, err)
	}
	return s, b.deletePeerJobs(ctx)
}

// throughput runs rounds of n trivial jobs each way, alternated, each
// timed from the first submit to the last job done.
func (b *bench) throughput(ctx context.Context, n, rounds int) error {
	var fr, pr, jr []float64
	for r := 0; r < rounds; r++ {
		load := loadavg()
		f, err := b.ferryBurst(ctx, r, n)
		if err != nil {
			return err
		}
		p, pj, err := b.peerBurst(ctx, r, n)
		if err != nil {
			return err
		}
		fmt.Printf("round %d: ferry %6.2f jobs/s   peer %6.2f jobs/s (pods Succeeded; %.2f to the Jobs' Complete)   ratio %.2f   (load average before %s, after %s)\n", r+1, f, p, pj, f/p, load, loadavg())
		fr, pr, jr = append(fr, f), append(pr, p), append(jr, pj)
	}
	mf, mp := medianF(fr), medianF(pr)
	fmt.Printf("\n%d trivial jobs, first submit -> all done, median of %d rounds (load average %s):\n", n, rounds, loadavg())
	fmt.Printf("  ferry %.2f jobs/s   peer (Jobs created directly, to pods Succeeded) %.2f jobs/s   ratio %.2f (aim >= 0.8)\n", mf, mp, mf/mp)
	fmt.Printf("  (the peer to its Jobs' Complete condition: %.2f jobs/s, ratio %.2f)\n", medianF(jr), mf/medianF(jr))
	return nil
}

// submitters is how many submits (or Job creates) are in flight at once,
// both ways.
const submitters = 8

func (b *bench) ferryBurst(ctx context.Context, round, n int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("tp%d-", round)
	t0 := time.Now()
	err := parallel(n, func(i int) error {
		spec, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("%s%03d", prefix, i), "command": "echo hi", "compute": "azureml:" + computeName})
		_, err := b.fc.SubmitJob(ctx, apitypes.JobRequest{Spec: spec})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("submit: %w", err)
	}
	for {
		jobs, err := b.fc.ListJobs(ctx, url.Values{"compute": {computeName}, "limit": {"100000"}})
		if err != nil {
			return 0, err
		}
		done, last := 0, t0
		for _, j := range jobs {
			if !strings.HasPrefix(j.Name, prefix) || j.Ended == nil {
				continue
			}
			if j.Status != "Completed" {
				return 0, fmt.Errorf("%s: %s (%s)", j.Name, j.Status, j.StatusReason)
			}
			done++
			if j.Ended.After(last) {
				last = *j.Ended
			}
		}
		if done == n {
			if err := b.waitNoPods(ctx); err != nil {
				return 0, err
			}
			return float64(n) / last.Sub(t0).Seconds(), nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return 0, fmt.Errorf("ferry round %d: %d of %d jobs done before the deadline", round+1, done, n)
		}
	}
}

func (b *bench) peerBurst(ctx context.Context, round, n int) (podsRate, jobsRate float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("peer-tp%d-%03d", round, i)
	}
	t0 := time.Now()
	err = parallel(n, func(i int) error {
		_, err := b.cs.BatchV1().Jobs(b.ns).Create(ctx, b.peerJob(names[i]), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("create Jobs: %w", err)
	}
	// Done is the pod Succeeded (its container exited 0, as Ferry's job
	// is Completed once its runner reports the exit), which comes before
	// the Job's Complete condition (the Job controller's turn): both are
	// printed.
	last, lastJob := t0, t0
	for _, name := range names {
		at, err := b.obs.waitJobDone(ctx, name)
		if err != nil {
			return 0, 0, fmt.Errorf("peer round %d: Job %s: %w", round+1, name, err)
		}
		if at.After(lastJob) {
			lastJob = at
		}
		at, err = b.obs.waitPodEnded(ctx, name)
		if err != nil {
			return 0, 0, fmt.Errorf("peer round %d: Job %s: %w", round+1, name, err)
		}
		if at.After(last) {
			last = at
		}
	}
	return float64(n) / last.Sub(t0).Seconds(), float64(n) / lastJob.Sub(t0).Seconds(), b.deletePeerJobs(ctx)
}

// parallel runs f(0..n-1) with submitters at once and returns the first
// error.
func parallel(n int, f func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, submitters)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// deletePeerJobs deletes the peer's Jobs and waits until their pods are
// gone.
func (b *bench) deletePeerJobs(ctx context.Context) error {
	bg := metav1.DeletePropagationBackground
	if err := b.cs.BatchV1().Jobs(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{LabelSelector: "bench=peer"}); err != nil {
		return fmt.Errorf("delete the peer's Jobs: %w", err)
	}
	return b.waitNoPods(ctx)
}

// waitNoPods waits (up to 2 minutes) until the namespace has no pods and
// no Jobs.
func (b *bench) waitNoPods(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := b.cs.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		jobs, err := b.cs.BatchV1().Jobs(b.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 && len(jobs.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s still has %d pods and %d Jobs 2 minutes after its jobs ended", b.ns, len(pods.Items), len(jobs.Items))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("namespace %s still has %d pods and %d Jobs at the deadline", b.ns, len(pods.Items), len(jobs.Items))
		}
	}
}

// deleteNamespace deletes the bench's namespace and waits (up to 2
// minutes, whatever the run's deadline) until it is gone.
func (b *bench) deleteNamespace() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.cs.CoreV1().Namespaces().Delete(ctx, b.ns, metav1.DeleteOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "kubernetes: delete namespace %s: %v\n", b.ns, err)
		return
	}
	for {
		if _, err := b.cs.CoreV1().Namespaces().Get(ctx, b.ns, metav1.GetOptions{}); err != nil {
			return
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			fmt.Fprintf(os.Stderr, "kubernetes: namespace %s was not gone 2 minutes after its delete\n", b.ns)
			return
		}
	}
}

// podTimes is what the watch saw of one pod, when this process saw it.
type podTimes struct {
	name      string
	seen      time.Time // first event
	scheduled time.Time // bound to a node
	started   time.Time // its container running or already ended; zero before
	ended     time.Time // Succeeded or Failed
}

// observer keeps, from watches of the namespace, when each job's pod was
// seen and started and when each Job completed. Pods are keyed by their
// Job's name, Ferry's by "ferry:" and the Ferry job's name.
type observer struct {
	mu     sync.Mutex
	pods   map[string]*podTimes
	done   map[string]time.Time // Job name -> Complete seen
	failed map[string]string    // Job name -> why it failed
}

func newObserver() *observer {
	return &observer{pods: map[string]*podTimes{}, done: map[string]time.Time{}, failed: map[string]string{}}
}

// watchPods follows the namespace's pods until ctx ends, watching anew
// when the API server ends a watch.
func (o *observer) watchPods(ctx context.Context, cs *kubernetes.Clientset, ns string) {
	for ctx.Err() == nil {
		w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			_ = sleep(ctx, 100*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			key := p.Labels["batch.kubernetes.io/job-name"]
			if j := p.Labels["ferry.job"]; j != "" {
				key = "ferry:" + j
			}
			started := p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			o.mu.Lock()
			t := o.pods[key]
			if t == nil {
				t = &podTimes{name: p.Name, seen: now}
				o.pods[key] = t
			}
			if p.Spec.NodeName != "" && t.scheduled.IsZero() {
				t.scheduled = now
			}
			if started && t.started.IsZero() {
				t.started = now
			}
			if (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) && t.ended.IsZero() {
				t.ended = now
			}
			o.mu.Unlock()
		}
		w.Stop()
	}
}

// watchJobs follows the namespace's Jobs until ctx ends.
func (o *observer) watchJobs(ctx context.Context, cs *kubernetes.Clientset, ns string) {
	for ctx.Err() == nil {
		w, err := cs.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			_ = sleep(ctx, 100*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*batchv1.Job)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			o.mu.Lock()
			for _, c := range j.Status.Conditions {
				if c.Status != corev1.ConditionTrue {
					continue
				}
				switch c.Type {
				case batchv1.JobComplete:
					if _, ok := o.done[j.Name]; !ok {
						o.done[j.Name] = now
					}
				case batchv1.JobFailed:
					o.failed[j.Name] = c.Reason + ": " + c.Message
				}
			}
			o.mu.Unlock()
		}
		w.Stop()
	}
}

// waitPod waits for a pod of key to have been seen and started.
func (o *observer) waitPod(ctx context.Context, key string) (podTimes, error) {
	return o.waitPodStarted(ctx, key)
}

func (o *observer) waitPodStarted(ctx context.Context, key string) (podTimes, error) {
	for {
		o.mu.Lock()
		t := o.pods[key]
		var c podTimes
		if t != nil {
			c = *t
		}
		o.mu.Unlock()
		if !c.started.IsZero() {
			return c, nil
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return c, errors.New("its pod did not start before the deadline")
		}
	}
}

// waitPodEnded waits for the pod of key to have ended and returns when
// the watch saw it.
func (o *observer) waitPodEnded(ctx context.Context, key string) (time.Time, error) {
	for {
		o.mu.Lock()
		var at time.Time
		if t := o.pods[key]; t != nil {
			at = t.ended
		}
		o.mu.Unlock()
		if !at.IsZero() {
			return at, nil
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return at, errors.New("its pod did not end before the deadline")
		}
	}
}

// waitJobDone waits for the Job name to complete and returns when the
// watch saw it.
func (o *observer) waitJobDone(ctx context.Context, name string) (time.Time, error) {
	for {
		o.mu.Lock()
		at, ok := o.done[name]
		why, failed := o.failed[name]
		o.mu.Unlock()
		if ok {
			return at, nil
		}
		if failed {
			return time.Time{}, fmt.Errorf("failed: %s", why)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return time.Time{}, errors.New("not complete before the deadline")
		}
	}
}

// lineWatch is an io.Writer that notes when a line equal to want was
// first written to it.
type lineWatch struct {
	want string
	mu   sync.Mutex
	buf  bytes.Buffer
	at   time.Time
	ch   chan struct{}
}

func newLineWatch(want string) *lineWatch { return &lineWatch{want: want, ch: make(chan struct{})} }

func (l *lineWatch) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.at.IsZero() {
		return len(p), nil
	}
	l.buf.Write(p)
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == l.want {
			l.at = now
			close(l.ch)
			break
		}
	}
	return len(p), nil
}

func (l *lineWatch) seen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.at.IsZero()
}

func (l *lineWatch) wait(ctx context.Context) (time.Time, error) {
	select {
	case <-l.ch:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.at, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[len(s)/2].Round(time.Millisecond)
}

func medianF(f []float64) float64 {
	s := append([]float64(nil), f...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// loadavg is the 1, 5 and 15 minute load averages, as uptime prints them.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
