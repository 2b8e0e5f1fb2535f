package kubereplicas

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Azure's states of a deployment, as Status names them.
const (
	StateCreating  = "Creating"
	StateUpdating  = "Updating"
	StateSucceeded = "Succeeded"
	StateFailed    = "Failed"
)

// State is what the cluster says of a deployment.
type State struct {
	// State is Creating (the first rollout is under way), Updating (a
	// later one, or a scale, is), Succeeded (every replica of the
	// current template is available and no other is left) or Failed (a
	// replica of the current template cannot start: Reason says why).
	State string
	// Reason says why a deployment Failed (a pod's crash with the end
	// of its log, the scoring script's traceback when init() failed; an
	// image error), or what it waits for (the scheduler's message for a
	// pod no node takes).
	Reason string
	// Desired, Ready and Updated are the Deployment's replica counts:
	// asked for, ready, and of the current template.
	Desired, Ready, Updated int32
	// Generation is the caller's generation of the current template.
	Generation int

	// crashed names the pod and container whose crash failed the
	// deployment, for Status to read the log of.
	crashedPod, crashedContainer string
	crashHead                    string // Reason without the log
}

const revisionAnnotation = "deployment.kubernetes.io/revision"

// imageErrors are the reasons a container waits with that mean its image
// cannot be had or run as given: retrying will not help until the
// deployment changes.
var imageErrors = []string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// Decide is the state of a Deployment, given its ReplicaSets and pods: a
// pure function of that snapshot.
func Decide(d *appsv1.Deployment, sets []appsv1.ReplicaSet, pods []corev1.Pod) State {
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	st := State{Desired: desired, Ready: d.Status.ReadyReplicas, Updated: d.Status.UpdatedReplicas}
	st.Generation, _ = strconv.Atoi(d.Spec.Template.Annotations[AnnotationGeneration])
	revision := d.Annotations[revisionAnnotation]
	phase := StateUpdating
	if revision == "" || revision == "1" {
		phase = StateCreating
	}
	s := d.Status
	observed := s.ObservedGeneration >= d.Generation
	// The current template's ReplicaSet: its pods decide; an older one's
	// pods still serve, or are going.
	hash := ""
	for _, rs := range sets {
		if rs.Annotations[revisionAnnotation] == revision && revision != "" {
			hash = rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		}
	}
	// Succeeded once the older templates' pods are gone, not only out of
	// routing: a client told Succeeded gets the new version.
	older := slices.ContainsFunc(pods, func(p corev1.Pod) bool {
		return hash != "" && p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash
	})
	if observed && !older && s.UpdatedReplicas == desired && s.Replicas == desired && s.AvailableReplicas == desired {
		st.State = StateSucceeded
		st.Reason = fmt.Sprintf("%d of %d replicas ready", s.ReadyReplicas, desired)
		return st
	}
	for _, c := range d.Status.Conditions {
		switch {
		case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && observed:
			st.State, st.Reason = StateFailed, c.Message
			return st
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
			st.State, st.Reason = StateFailed, "replicas cannot be created: "+c.Message
			return st
		}
	}
	st.State = phase
	st.Reason = fmt.Sprintf("%d of %d replicas ready", s.ReadyReplicas, desired)
	if hash == "" || !observed {
		return st
	}
	current := slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool {
		return p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash || p.DeletionTimestamp != nil
	})
	slices.SortFunc(current, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range current {
		if why, container, log, ok := podFailure(p); ok {
			st.State, st.Reason = StateFailed, why
			if log = tracebackTail(log); log != "" {
				st.Reason += "\n" + log
			}
			st.crashedPod, st.crashedContainer, st.crashHead = p.Name, container, why
			return st
		}
	}
	for _, p := range current {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				st.Reason = fmt.Sprintf("replica %s waits for a node: %s", p.Name, c.Message)
				return st
			}
		}
	}
	return st
}

// podFailure says why a pod of the current template cannot serve: an
// image error, or a container that exited with an error before it was
// ready (crashed, or crash-looping). A container that is ready now, even
// after restarts, is no failure. ok is false when there is none; for a
// crash, container names the container and log is its termination
// message (the end of its log, with FallbackToLogsOnError).
func podFailure(p corev1.Pod) (why, container, log string, ok bool) {
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && slices.Contains(imageErrors, w.Reason) {
			return fmt.Sprintf("replica %s: container %s (image %s): %s: %s", p.Name, cs.Name, cs.Image, w.Reason, w.Message), "", "", true
		}
		if cs.Ready {
			continue
		}
		var t *corev1.ContainerStateTerminated
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
			t = cs.State.Terminated
		case cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode != 0 && cs.RestartCount > 0:
			t = cs.LastTerminationState.Terminated
		default:
			continue
		}
		why = fmt.Sprintf("replica %s: container %s exited with status %d (%s) before it was ready", p.Name, cs.Name, t.ExitCode, t.Reason)
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			why += ", " + w.Reason
		}
		return why, cs.Name, t.Message, true
	}
	return "", "", "", false
}

// tracebackTail is the end of a log from its last Python traceback on,
// or its last 20 lines.
func tracebackTail(log string) string {
	if strings.TrimSpace(log) == "" {
		return ""
	}
	if i := strings.LastIndex(log, "Traceback (most recent call last):"); i >= 0 {
		log = log[i:]
	} else {
		lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
		log = strings.Join(lines[max(0, len(lines)-20):], "\n")
	}
	return strings.TrimSpace(log)
}

// Status reads the deployment's Deployment, ReplicaSets and pods and
// decides its state (Decide). For a replica that crashed, the reason ends
// with its previous run's log from the last traceback on, read from the
// cluster when the pod's termination message does not hold one. A
// deployment with no Deployment on the cluster wraps ErrNotFound.
func (c *Client) Status(ctx context.Context, endpoint, deployment string) (State, error) {
	name := ObjectName(endpoint, deployment)
	d, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return State{}, fmt.Errorf("deployment %s/%s: Deployment %s in namespace %s: %w", endpoint, deployment, name, c.ns, ErrNotFound)
	}
	if err != nil {
		return State{}, fmt.Errorf("deployment %s/%s: get Deployment %s: %w", endpoint, deployment, name, err)
	}
	sel := metav1.ListOptions{LabelSelector: selector(endpoint, deployment)}
	sets, err := c.cs.AppsV1().ReplicaSets(c.ns).List(ctx, sel)
	if err != nil {
		return State{}, fmt.Errorf("deployment %s/%s: list ReplicaSets: %w", endpoint, deployment, err)
	}
	pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, sel)
	if err != nil {
		return State{}, fmt.Errorf("deployment %s/%s: list pods: %w", endpoint, deployment, err)
	}
	st := Decide(d, sets.Items, pods.Items)
	if st.crashedPod != "" && !strings.Contains(st.Reason, "Traceback") {
		if tail := c.previousLog(ctx, st.crashedPod, st.crashedContainer); tail != "" {
			st.Reason = st.crashHead + "\n" + tail
		}
	}
	return st, nil
}

// previousLog is the end of a crashed container's last run's log, from
// its last traceback on; "" when it cannot be read.
//
// Just after a crash neither log may be readable for a moment (seen in
// CI: the kubelet restarting the container, the crashed run not yet its
// "previous"), and the deployment's Failed reason would then lack the
// traceback for good: it is asked for a few times before giving up.
func (c *Client) previousLog(ctx context.Context, pod, container string) string {
	for try := range logTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return ""
			case <-time.After(logRetry):
			}
		}
		if tail := c.crashLog(ctx, pod, container); tail != "" {
			return tail
		}
	}
	return ""
}

const (
	logTries = 5
	logRetry = 300 * time.Millisecond
)

// crashLog is one try of previousLog: the previous run's log, else the
// current one's (a container that has not been restarted yet), the first
// with a traceback; else the first that is not empty.
func (c *Client) crashLog(ctx context.Context, pod, container string) string {
	tail, limit := int64(200), int64(64<<10)
	first := ""
	for _, previous := range []bool{true, false} {
		rc, err := c.cs.CoreV1().Pods(c.ns).GetLogs(pod, &corev1.PodLogOptions{
			Container: container, Previous: previous, TailLines: &tail, LimitBytes: &limit,
		}).Stream(ctx)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || len(b) == 0 {
			continue
		}
		log := tracebackTail(string(b))
		if strings.Contains(log, "Traceback") {
			return log
		}
		first = cmp.Or(first, log)
	}
	return first
}
