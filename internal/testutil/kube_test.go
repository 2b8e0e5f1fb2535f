package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kubeRun runs kubectl against the test cluster with stdin.
type kubeRun func(stdin string, args ...string) (string, error)

func newKubeRun(t *testing.T) kubeRun {
	kubeconfig := Kube(t)
	kubectl := Kubectl(t)
	return func(stdin string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// runPod makes a namespace of its own (deleted when the test ends), runs a
// pod of image with the shell script there, waits for it to be Running and
// for its log to hold "ferry-smoke-done", and returns the log.
func runPod(t *testing.T, run kubeRun, image, script string) string {
	t.Helper()
	ns := "ferry-smoke-" + randHex(4)
	if out, err := run("", "create", "namespace", ns); err != nil {
		t.Fatalf("create namespace: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := run("", "delete", "namespace", ns, "--wait=true", "--timeout=50s"); err != nil {
			t.Errorf("delete namespace %s: %v: %s", ns, err, out)
		}
	})
	var args strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
		fmt.Fprintf(&args, "      %s\n", line)
	}
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
%s      echo ferry-smoke-done
      sleep 3600
`, ns, image, args.String())
	start := time.Now()
	if out, err := run(pod, "create", "-f", "-"); err != nil {
		t.Fatalf("create pod: %v: %s", err, out)
	}
	var phase string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := run("", "-n", ns, "get", "pod", "smoke", "-o", "jsonpath={.status.phase}")
		if err != nil {
			t.Fatalf("get pod: %v: %s", err, out)
		}
		if phase = out; phase == "Running" || phase == "Failed" || phase == "Succeeded" {
			break
		}
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
	if !strings.Contains(logs, "ferry-smoke-done") {
		t.Fatalf("pod log lacks ferry-smoke-done after a minute:\n%s", logs)
	}
	return logs
}

// TestKubeBusyboxPod runs a pod of the busybox image on the test cluster:
// it must reach Running, resolve the API's Service name through the
// cluster DNS (CoreDNS behind kube-proxy), get NXDOMAIN for a name outside
// the cluster (there is no upstream DNS), and its log must be readable
// through the API server; it must reach a server on the host at the
// node's address.
func TestKubeBusyboxPod(t *testing.T) {
	run := newKubeRun(t)
	// A server on this host that the pod calls at the node's address, as
	// pods reach Ferry's server.
	nodeIP, err := run("", "get", "node", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`)
	if err != nil || nodeIP == "" {
		t.Fatalf("node InternalIP: %v: %q", err, nodeIP)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "host-server-answered")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	hostAddr := nodeIP + " " + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	logs := runPod(t, run, KubeBusyboxImage, `
if nslookup kubernetes.default.svc.cluster.local >/dev/null 2>&1; then echo dns-ok; else echo dns-failed; fi
if nslookup no-such-host.example.com >/dev/null 2>&1; then echo external-resolved; else echo external-nxdomain; fi
printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 10 `+hostAddr+`; echo
`)
	for _, want := range []string{"dns-ok", "external-nxdomain", "host-server-answered"} {
		if !strings.Contains(logs, want) {
			t.Errorf("pod log lacks %q:\n%s", want, logs)
		}
	}
}

// TestKubeImageImport copies a Docker image the cluster has never seen
// (the busybox image under a new name) in with KubeImage
// (scripts/kube-image.sh) and runs a pod of it; the name is removed from
// Docker and from the cluster's containerd at the end.
func TestKubeImageImport(t *testing.T) {
	run := newKubeRun(t)
	RequireDocker(t)
	name := "ferry-kube-import-test-" + randHex(4) + ":1"
	if out, err := exec.Command("docker", "tag", KubeBusyboxImage, name).CombinedOutput(); err != nil {
		t.Fatalf("docker tag %s %s: %v: %s", KubeBusyboxImage, name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "rmi", name).CombinedOutput(); err != nil {
			t.Errorf("docker rmi %s: %v: %s", name, err, out)
		}
		if out, err := exec.Command("ctr", "--address", "/run/ferry-kube/containerd.sock", "-n", "k8s.io",
			"images", "rm", "docker.io/library/"+name).CombinedOutput(); err != nil {
			t.Errorf("ctr images rm %s: %v: %s", name, err, out)
		}
	})
	KubeImage(t, name)
	logs := runPod(t, run, name, `echo imported-image-runs`)
	if !strings.Contains(logs, "imported-image-runs") {
		t.Errorf("pod log lacks imported-image-runs:\n%s", logs)
	}
}
