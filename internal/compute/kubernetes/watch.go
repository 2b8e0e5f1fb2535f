package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/kube"
)

// watcher follows the Jobs and pods of one compute with informers, says
// what became of each attempt, and settles each attempt that ended:
// remembers how, and deletes its objects.
type watcher struct {
	cl      *Cluster
	compute string
	log     *slog.Logger

	startMu sync.Mutex
	started bool
	stopCh  chan struct{}
	jobs    kube.Lister[*batchv1.Job]
	pods    kube.Lister[*corev1.Pod]
	queue   workqueue.TypedRateLimitingInterface[string]

	mu    sync.Mutex
	ended map[string]endedState // by handle: attempts settled, whose objects are gone or going
}

type endedState struct {
	st compute.EngineState
	at time.Time
}

// endedMemory is how long the end of a settled attempt is remembered: the
// workspace asks every few seconds, and a server restarted later finds
// the attempt's runner report, or its lease, deciding.
const endedMemory = time.Hour

// syncTimeout bounds the informers' first list.
const syncTimeout = 30 * time.Second

func newWatcher(cl *Cluster, computeName string, log *slog.Logger) *watcher {
	return &watcher{cl: cl, compute: computeName, log: log, ended: map[string]endedState{}}
}

// selector selects the objects of the compute.
func (w *watcher) selector() string {
	return labelManagedBy + "=" + managedBy + "," + labelCompute + "=" + w.compute
}

// start starts the informers once and waits for their caches; a start
// that fails is tried again by the next call.
func (w *watcher) start(ctx context.Context) error {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.started {
		return nil
	}
	stop := make(chan struct{})
	jobInf := w.cl.Client.BatchV1().Jobs(w.cl.Namespace).Informer(w.selector())
	podInf := w.cl.Client.CoreV1().Pods(w.cl.Namespace).Informer(w.selector())
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(obj any) {
		if m, err := metaOf(obj); err == nil && m.GetLabels()[labelHandle] != "" {
			queue.Add(m.GetLabels()[labelHandle])
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }}
	if _, err := jobInf.AddEventHandler(handler); err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(handler); err != nil {
		return err
	}
	go jobInf.Run(stop)
	go podInf.Run(stop)
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), jobInf.HasSynced, podInf.HasSynced) {
		close(stop)
		queue.ShutDown()
		return fmt.Errorf("kubernetes: cannot list the jobs and pods of namespace %s at %s (within %s); check that the cluster answers", w.cl.Namespace, w.cl.Host, syncTimeout)
	}
	w.stopCh, w.jobs, w.pods, w.queue, w.started = stop, kube.NewLister[*batchv1.Job](jobInf), kube.NewLister[*corev1.Pod](podInf), queue, true
	go w.work()
	go w.sweep()
	return nil
}

// stop ends the informers and the settling.
func (w *watcher) stop() {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.started {
		close(w.stopCh)
		w.queue.ShutDown()
		w.started = false
	}
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T is no object", obj)
	}
	return m, nil
}

// work settles the attempts the informers saw change, one at a time.
func (w *watcher) work() {
	for {
		name, shut := w.queue.Get()
		if shut {
			return
		}
		if err := w.settle(name); err != nil {
			w.log.Warn("kubernetes: settle an ended attempt", "handle", name, "err", err)
			w.queue.AddRateLimited(name)
		} else {
			w.queue.Forget(name)
		}
		w.queue.Done(name)
	}
}

// settle deletes the objects of an attempt that ended, once its end is
// remembered.
func (w *watcher) settle(name string) error {
	job, ok := w.jobs.Get(w.cl.Namespace, name)
	if !ok {
		return nil // gone, or a pod of a Job not seen yet: its Job's event comes
	}
	if job.DeletionTimestamp != nil {
		return nil
	}
	st := w.evaluate(job)
	if st.Phase != compute.PhaseEnded {
		return nil
	}
	w.remember(name, st)
	w.log.Info("kubernetes: attempt ended; deleting its objects", "handle", name, "outcome", st.Outcome, "reason", st.Reason)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	return w.deleteAttempt(ctx, name)
}

// remember keeps how an attempt ended, for Inspect, after its objects
// are gone.
func (w *watcher) remember(name string, st compute.EngineState) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.ended[name]; !ok {
		w.ended[name] = endedState{st: st, at: now}
	}
	for k, e := range w.ended {
		if now.Sub(e.at) > endedMemory {
			delete(w.ended, k)
		}
	}
}

// deleteAttempt deletes an attempt's Job (foreground: its pods first),
// Service and Secret; what is gone already is no error.
func (w *watcher) deleteAttempt(ctx context.Context, name string) error {
	ns := w.cl.Namespace
	fg := metav1.DeletePropagationForeground
	var errs []string
	if err := w.cl.Client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, "job: "+apiProblem(err))
	}
	if err := w.cl.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, "service: "+apiProblem(err))
	}
	if err := w.cl.Client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, "secret: "+apiProblem(err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("kubernetes: delete %s: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// sweep deletes, once after the start, the Secrets and Services a
// launch left without a Job (its server died between the two).
func (w *watcher) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	list, err := w.cl.Client.CoreV1().Secrets(w.cl.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.selector()})
	if err != nil {
		w.log.Warn("kubernetes: list secrets for orphans", "err", err)
		return
	}
	for _, s := range list.Items {
		if _, ok := w.jobs.Get(w.cl.Namespace, s.Name); ok || time.Since(s.CreationTimestamp.Time) < time.Minute {
			continue
		}
		w.log.Info("kubernetes: deleting the objects of a launch that made no Job", "handle", s.Name)
		if err := w.deleteAttempt(ctx, s.Name); err != nil {
			w.log.Warn("kubernetes: delete orphans", "err", err)
		}
	}
}

// state is what the cluster says of an attempt; false when it knows none.
func (w *watcher) state(name string) (compute.EngineState, bool) {
	w.mu.Lock()
	e, ok := w.ended[name]
	w.mu.Unlock()
	if ok {
		return e.st, true
	}
	job, ok := w.jobs.Get(w.cl.Namespace, name)
	if !ok {
		return compute.EngineState{}, false
	}
	return w.evaluate(job), true
}

// find is FindHandles from the informer's cache.
func (w *watcher) find(as []compute.Attempt) map[compute.Attempt]compute.Handle {
	out := map[compute.Attempt]compute.Handle{}
	jobs := w.jobs.List(w.cl.Namespace, labels.Everything())
	want := map[compute.Attempt]bool{}
	for _, a := range as {
		want[a] = true
	}
	for _, j := range jobs {
		n, err := strconv.Atoi(j.Labels[labelAttempt])
		a := compute.Attempt{Job: j.Annotations[annotationJob], Attempt: n}
		if err == nil && want[a] && j.DeletionTimestamp == nil {
			out[a] = compute.Handle(j.Name)
		}
	}
	return out
}

// podsOf lists the pods of a Job.
func (w *watcher) podsOf(name string) []*corev1.Pod {
	return w.pods.List(w.cl.Namespace, labels.SelectorFromSet(labels.Set{labelHandle: name}))
}

// evaluate maps a Job and its pods to the engine state Ferry acts on.
func (w *watcher) evaluate(job *batchv1.Job) compute.EngineState {
	pods := w.podsOf(job.Name)
	ended := func(outcome, reason string, exit *int) compute.EngineState {
		return compute.EngineState{Phase: compute.PhaseEnded, Outcome: outcome, Reason: reason, ExitCode: exit}
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet:
			return ended("Completed", "Complete", nil)
		case batchv1.JobFailed, batchv1.JobFailureTarget:
			why, exit := failureOf(pods)
			reason := c.Reason
			if why != "" {
				reason += ": " + why
			}
			return ended("Failed", reason, exit)
		}
	}
	for _, p := range pods {
		if why, exit, fatal := podFatal(p); fatal {
			return ended("Failed", why, exit)
		}
	}
	var running []string
	var waiting string
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded:
			running = append(running, p.Name)
		case waiting == "":
			waiting = pendingReason(p)
		}
	}
	if len(running) > 0 {
		slices.Sort(running)
		where := "pod " + running[0]
		if len(running) > 1 {
			where = "pods " + strings.Join(running, ", ")
		}
		return compute.EngineState{Phase: compute.PhaseRunning, Reason: "Running", Runner: where}
	}
	if waiting == "" {
		waiting = "the Job's pods are being created"
	}
	return compute.EngineState{Phase: compute.PhasePending, Reason: waiting}
}

// imagePullReasons are the waiting reasons of a container whose image
// cannot be had: the attempt fails while it prepares, with the reason.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
}

// podFatal says whether a pod's state ends the attempt, and why.
func podFatal(p *corev1.Pod) (why string, exit *int, fatal bool) {
	// The runner's init container (its image from the compute's
	// registry) comes first.
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if wt := cs.State.Waiting; wt != nil && imagePullReasons[wt.Reason] {
			return fmt.Sprintf("%s while preparing: %s", wt.Reason, wt.Message), nil, true
		}
	}
	if p.Status.Phase == corev1.PodFailed {
		why, exit := podFailure(p)
		return why, exit, true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && p.DeletionTimestamp != nil {
			return fmt.Sprintf("%s: %s", c.Reason, c.Message), nil, true
		}
	}
	return "", nil, false
}

// failureOf is the first failed pod's reason.
func failureOf(pods []*corev1.Pod) (string, *int) {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed {
			return podFailure(p)
		}
	}
	return "", nil
}

// podFailure says why a failed pod failed: evicted, OOMKilled, its
// node lost, past its deadline, or its runner's exit status.
func podFailure(p *corev1.Pod) (string, *int) {
	if p.Status.Reason != "" { // Evicted, DeadlineExceeded, NodeLost, ...
		return strings.TrimSpace(p.Status.Reason + ": " + p.Status.Message), nil
	}
	for _, cs := range p.Status.ContainerStatuses {
		if tm := cs.State.Terminated; tm != nil && tm.ExitCode != 0 {
			code := int(tm.ExitCode)
			if tm.Reason == "OOMKilled" || code == 137 {
				return fmt.Sprintf("OOMKilled (exit %d) in pod %s", code, p.Name), &code
			}
			return fmt.Sprintf("%s (exit %d) in pod %s", tm.Reason, code, p.Name), &code
		}
	}
	return "pod " + p.Name + " failed", nil
}

// pendingReason is why a pod has not started, in the cluster's words:
// the scheduler's message ("0/3 nodes are available: 3 Insufficient
// nvidia.com/gpu."), or its container's waiting reason.
func pendingReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if wt := cs.State.Waiting; wt != nil && wt.Reason != "" {
			return wt.Reason
		}
	}
	return string(p.Status.Phase)
}
