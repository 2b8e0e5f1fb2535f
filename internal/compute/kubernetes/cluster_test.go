package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// The target against the test cluster (scripts/kube-up.sh) without a
// Ferry server: what it makes, what it says of it, and that it leaves
// nothing behind. Its "runner" is a shell script that exits 7 (busybox's
// sh, in the busybox image the cluster has).

// busyboxImage is the image scripts/kube-up.sh imports.
const busyboxImage = "ferry-kube-busybox:1"

// clusterTarget is a target on a fresh namespace of the test cluster,
// deleted when the test ends.
func clusterTarget(t *testing.T, extra func(c *spec.Compute)) *Target {
	t.Helper()
	kc := testutil.Kube(t)
	content, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "ferry-unit-" + hex.EncodeToString(b)
	c := &spec.Compute{Name: "k8s-unit", Type: Type, Namespace: ns, KubeconfigContent: string(content), Image: busyboxImage,
		PodTemplate: map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "runner", "imagePullPolicy": "Never"}}}}}
	if extra != nil {
		extra(c)
	}
	exe := filepath.Join(t.TempDir(), "runner.sh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho no server here\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tg, err := New(Config{Compute: c, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := tg.cl.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tg.Close()
		_ = tg.cl.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	if err := tg.CheckCompute(ctx, c); err != nil {
		t.Fatalf("CheckCompute with the admin's kubeconfig: %v", err)
	}
	return tg
}

// left lists what of the target's is still in its namespace.
func left(t *testing.T, tg *Target) []string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: tg.w.selector()}
	var out []string
	ns := tg.cl.Namespace
	if l, err := tg.cl.Client.BatchV1().Jobs(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			out = append(out, "job/"+o.Name)
		}
	}
	if l, err := tg.cl.Client.CoreV1().Pods(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			out = append(out, "pod/"+o.Name)
		}
	}
	if l, err := tg.cl.Client.CoreV1().Services(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			out = append(out, "service/"+o.Name)
		}
	}
	if l, err := tg.cl.Client.CoreV1().Secrets(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			out = append(out, "secret/"+o.Name)
		}
	}
	return out
}

func inspectOne(t *testing.T, tg *Target, h compute.Handle) (compute.EngineState, bool) {
	t.Helper()
	m, err := tg.Inspect(context.Background(), []compute.Handle{h})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := m[h]
	return st, ok
}

// An attempt no node can take is Pending with the scheduler's message,
// found again by its labels, and its cancel deletes all of it.
func TestClusterPendingFoundAndCanceled(t *testing.T) {
	tg := clusterTarget(t, func(c *spec.Compute) {
		c.InstanceTypes = map[string]spec.KubeInstanceType{"gpus": {Resources: spec.KubeResources{Limits: map[string]string{"nvidia.com/gpu": "8"}}}}
		c.DefaultInstanceType = "gpus"
	})
	ctx := context.Background()
	l := compute.Launch{Job: "Pending_Job", Attempt: 3, APIURL: "http://192.0.2.1:1", RunToken: "tok", Spec: &spec.Job{Command: "x"}}
	h, err := tg.Launch(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	var st compute.EngineState
	testutil.WaitFor(t, 60*time.Second, "the scheduler's message", func() bool {
		st, _ = inspectOne(t, tg, h)
		return st.Phase == compute.PhasePending && strings.Contains(st.Reason, "Insufficient nvidia.com/gpu")
	})
	found, err := tg.FindHandles(ctx, []compute.Attempt{{Job: "Pending_Job", Attempt: 3}, {Job: "Pending_Job", Attempt: 2}})
	if err != nil || len(found) != 1 || found[compute.Attempt{Job: "Pending_Job", Attempt: 3}] != h {
		t.Errorf("FindHandles = %v, %v; want attempt 3 alone, as %s", found, err, h)
	}
	if err := tg.Cancel(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := tg.Cancel(ctx, h); err != nil {
		t.Errorf("a second cancel: %v", err)
	}
	if st, ok := inspectOne(t, tg, h); !ok || st.Phase != compute.PhaseEnded || st.Outcome != "Canceled" {
		t.Errorf("after the cancel: %+v, %v; want Ended Canceled", st, ok)
	}
	testutil.WaitFor(t, 60*time.Second, "nothing left", func() bool { return len(left(t, tg)) == 0 })
}

// An attempt whose runner fails ends Failed with the pod's reason, and
// the target deletes its objects without being asked.
func TestClusterFailedAttemptIsSettled(t *testing.T) {
	tg := clusterTarget(t, nil)
	ctx := context.Background()
	h, err := tg.Launch(ctx, compute.Launch{Job: "fails", Attempt: 1, APIURL: "http://192.0.2.1:1", RunToken: "tok", Spec: &spec.Job{Command: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	var st compute.EngineState
	testutil.WaitFor(t, 60*time.Second, "the attempt's end", func() bool {
		st, _ = inspectOne(t, tg, h)
		return st.Phase == compute.PhaseEnded
	})
	if st.Outcome != "Failed" || !strings.Contains(st.Reason, "exit 7") || st.ExitCode == nil || *st.ExitCode != 7 {
		t.Errorf("ended %+v; want Failed with the runner's exit", st)
	}
	testutil.WaitFor(t, 60*time.Second, "nothing left", func() bool { return len(left(t, tg)) == 0 })
	// A new target (a restarted server) no longer finds it: Gone.
	tg2, err := New(tg.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tg2.Close()
	if st, ok := inspectOne(t, tg2, h); ok {
		t.Errorf("a fresh target still knows the settled attempt: %+v", st)
	}
}
