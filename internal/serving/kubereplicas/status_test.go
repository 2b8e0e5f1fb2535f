package kubereplicas

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// snapshot is a Deployment at revision rev whose current ReplicaSet has
// hash "new", an older one "old", with status counts and pods.
func snapshot(rev string, desired, replicas, updated, available int32, pods ...corev1.Pod) (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: 2, Annotations: map[string]string{revisionAnnotation: rev}},
		Spec: appsv1.DeploymentSpec{Replicas: &desired, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationGeneration: "7"}},
		}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: replicas, UpdatedReplicas: updated,
			AvailableReplicas: available, ReadyReplicas: available},
	}
	sets := []appsv1.ReplicaSet{
		{ObjectMeta: metav1.ObjectMeta{Name: "rs-old", Labels: map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "old"},
			Annotations: map[string]string{revisionAnnotation: "0"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "rs-new", Labels: map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "new"},
			Annotations: map[string]string{revisionAnnotation: rev}}},
	}
	return d, sets, pods
}

func pod(name, hash string, cs ...corev1.ContainerStatus) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}},
		Status: corev1.PodStatus{ContainerStatuses: cs}}
}

func crashed(msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: "server", RestartCount: 2,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: msg}}}
}

func TestDecide(t *testing.T) {
	trace := "I loading\nTraceback (most recent call last):\n  File \"score.py\", line 2, in init\nValueError: no model here\n"
	unschedulable := pod("p-pending", "new")
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}
	imageErr := pod("p-img", "new", corev1.ContainerStatus{Name: "server", Image: "nope:1",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}})
	readyAfterRestart := crashed("Traceback (most recent call last):\nOSError\n")
	readyAfterRestart.State, readyAfterRestart.Ready = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, true

	type snap = func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod)
	for _, c := range []struct {
		name   string
		snap   snap
		state  string
		reason string // a part of the reason
	}{
		{"first rollout under way", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) { return snapshot("1", 2, 0, 0, 0) },
			StateCreating, "0 of 2 replicas ready"},
		{"all available", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) { return snapshot("3", 2, 2, 2, 2) },
			StateSucceeded, "2 of 2 replicas ready"},
		{"rolling: an old replica left", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) { return snapshot("3", 2, 3, 2, 2) },
			StateUpdating, ""},
		{"init() fails", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			return snapshot("1", 1, 1, 1, 0, pod("p1", "new", crashed(trace)))
		}, StateFailed, "exited with status 3 (Error) before it was ready, CrashLoopBackOff\nTraceback (most recent call last):"},
		{"image error", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			return snapshot("2", 1, 2, 1, 1, imageErr)
		},
			StateFailed, "image nope:1): ErrImageNeverPull: image not present"},
		{"an old replica's crash is not the new one's failure", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			return snapshot("2", 1, 2, 1, 1, pod("p-old", "old", crashed(trace)), pod("p-new", "new"))
		}, StateUpdating, ""},
		{"ready after a restart", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			return snapshot("1", 2, 2, 2, 1, pod("p1", "new", readyAfterRestart))
		}, StateCreating, "1 of 2 replicas ready"},
		{"unschedulable", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			return snapshot("1", 1, 1, 1, 0, unschedulable)
		},
			StateCreating, "replica p-pending waits for a node: 0/1 nodes are available: 1 Insufficient cpu."},
		{"progress deadline", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			d, sets, pods := snapshot("2", 1, 2, 1, 1)
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
				Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "x" has timed out progressing.`}}
			return d, sets, pods
		}, StateFailed, `ReplicaSet "x" has timed out progressing.`},
		{"rolled, an old replica still draining", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			old := pod("p-old", "old")
			old.DeletionTimestamp = &metav1.Time{}
			return snapshot("2", 1, 1, 1, 1, old, pod("p-new", "new"))
		}, StateUpdating, "1 of 1 replicas ready"},
		{"not yet observed", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) {
			d, sets, pods := snapshot("2", 1, 1, 1, 1)
			d.Generation = 3
			return d, sets, pods
		}, StateUpdating, ""},
		{"scaled to zero", func() (*appsv1.Deployment, []appsv1.ReplicaSet, []corev1.Pod) { return snapshot("2", 0, 0, 0, 0) },
			StateSucceeded, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Decide(c.snap())
			if got.State != c.state || !strings.Contains(got.Reason, c.reason) {
				t.Errorf("Decide = %s %q, want %s with %q", got.State, got.Reason, c.state, c.reason)
			}
			if got.Generation != 7 {
				t.Errorf("generation %d, want the template's 7", got.Generation)
			}
		})
	}
}

func TestReadyURLs(t *testing.T) {
	yes, no := true, false
	port, other := int32(5001), int32(9)
	name, otherName := portName, "metrics"
	slice := func(ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Ports: ports, Endpoints: eps}
	}
	ep := func(ip string, ready, terminating *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating}}
	}
	ports := []discoveryv1.EndpointPort{{Name: &otherName, Port: &other}, {Name: &name, Port: &port}}
	got := readyURLs([]any{
		slice(ports, ep("10.0.0.2", &yes, nil), ep("10.0.0.1", &yes, &no), ep("10.0.0.3", &no, nil), ep("10.0.0.4", &no, &yes)),
		slice(ports, ep("10.0.0.2", &yes, nil), ep("10.0.0.5", nil, nil)),
		slice(nil, ep("10.0.0.6", &yes, nil)), // no port yet
		slice(ports, ep("fd00::1", &yes, nil)),
	})
	want := []string{"http://10.0.0.1:5001", "http://10.0.0.2:5001", "http://[fd00::1]:5001"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readyURLs (-want +got):\n%s", diff)
	}
}
