package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKubeBusyboxPod runs a pod of the busybox image on the test cluster
// in a namespace of its own: it must reach Running, resolve the API's
// Service name through the cluster DNS, get NXDOMAIN at once for a name
// outside the cluster (there is no upstream DNS), and its log must be
// readable through the API server. The namespace is deleted at the end.
func TestKubeBusyboxPod(t *testing.T) {
	kubeconfig := Kube(t)
	kubectl := Kubectl(t)
	run := func(stdin string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	b := make([]byte, 4)
	rand.Read(b)
	ns := "ferry-smoke-" + hex.EncodeToString(b)
	if out, err := run("", "create", "namespace", ns); err != nil {
		t.Fatalf("create namespace: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := run("", "delete", "namespace", ns, "--wait=true", "--timeout=50s"); err != nil {
			t.Errorf("delete namespace %s: %v: %s", ns, err, out)
		}
	})
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: smoke, namespace: %s}
spec:
  terminationGracePeriodSeconds: 0
  restartPolicy: Never
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: [/bin/sh, -c]
    args:
    - |
      if nslookup kubernetes.default.svc.cluster.local >/dev/null 2>&1; then echo dns-ok; else echo dns-failed; fi
      if nslookup no-such-host.example.com >/dev/null 2>&1; then echo external-resolved; else echo external-nxdomain; fi
      echo ferry-smoke-done
      sleep 3600
`, ns, KubeBusyboxImage)
	start := time.Now()
	if out, err := run(pod, "create", "-f", "-"); err != nil {
		t.Fatalf("create pod: %v: %s", err, out)
	}
	var phase string
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		out, err := run("", "-n", ns, "get", "pod", "smoke", "-o", "jsonpath={.status.phase}")
		if err != nil {
			t.Fatalf("get pod: %v: %s", err, out)
		}
		if phase = out; phase == "Running" || phase == "Failed" || phase == "Succeeded" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if phase != "Running" {
		desc, _ := run("", "-n", ns, "describe", "pod", "smoke")
		t.Fatalf("pod phase %q, want Running:\n%s", phase, desc)
	}
	t.Logf("pod create → Running: %v", time.Since(start).Round(time.Millisecond))
	var logs string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := run("", "-n", ns, "logs", "smoke")
		if err != nil {
			t.Fatalf("logs: %v: %s", err, out)
		}
		if logs = out; strings.Contains(logs, "ferry-smoke-done") {
			break
		}
	}
	for _, want := range []string{"dns-ok", "external-nxdomain", "ferry-smoke-done"} {
		if !strings.Contains(logs, want) {
			t.Errorf("pod log lacks %q:\n%s", want, logs)
		}
	}
}
