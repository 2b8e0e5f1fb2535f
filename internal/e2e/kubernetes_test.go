package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/compute/computetest"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// Ferry on the real test cluster (scripts/kube-up.sh): every job here
// goes through a real `ferry server`, the cluster's API server, scheduler,
// Job controller and kubelet. Each test has a namespace of its own, deleted
// when it ends, and proves that every attempt's objects are gone from it.

// kubeImage is the pods' image: Debian with python3 and torch
// (scripts/make-node-image.sh), imported into the cluster.
const kubeImage = "ferry-node:bookworm"

// kubeImageIn says whether this run imported kubeImage already.
var (
	kubeImageMu sync.Mutex
	kubeImageIn bool
)

// kubeEnv is the test cluster as one test uses it.
type kubeEnv struct {
	t          *testing.T
	kubeconfig string
	kubectl    string
	nodeIP     string // where pods reach this host
	namespace  string // this test's own
}

// requireKube skips without a cluster (testutil.Kube) and otherwise gives
// the test a fresh namespace, deleted at its end, and the pods' image.
func requireKube(t *testing.T) *kubeEnv {
	t.Helper()
	kc := testutil.Kube(t)
	k := &kubeEnv{t: t, kubeconfig: kc, kubectl: testutil.Kubectl(t)}
	if err := exec.Command("docker", "image", "inspect", kubeImage).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and there is no %s image: scripts/test-setup.sh makes it", kubeImage)
		}
		t.Skipf("needs the %s image: scripts/make-node-image.sh", kubeImage)
	}
	func() {
		kubeImageMu.Lock()
		defer kubeImageMu.Unlock()
		if !kubeImageIn {
			testutil.KubeImage(t, kubeImage) // 1.3 GB: once per run
			kubeImageIn = true
		}
	}()
	// The node's address is this host's, as the pods see it: the server
	// under test listens there.
	k.nodeIP = strings.TrimSpace(k.run("get", "nodes", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`))
	if net.ParseIP(k.nodeIP) == nil {
		t.Fatalf("the test cluster's node has no InternalIP address: %q", k.nodeIP)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	k.namespace = "ferry-e2e-" + hex.EncodeToString(b)
	k.run("create", "namespace", k.namespace)
	t.Cleanup(func() {
		k.run("delete", "namespace", k.namespace, "--wait=true", "--timeout=120s")
	})
	return k
}

// run runs kubectl against the cluster and returns its output; it fails
// the test when kubectl fails.
func (k *kubeEnv) run(args ...string) string {
	k.t.Helper()
	out, err := k.try(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (k *kubeEnv) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, k.kubectl, append([]string{"--kubeconfig", k.kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// ferryObjects lists what Ferry made in the test's namespace and is
// still there: Jobs, pods, Services and Secrets.
func (k *kubeEnv) ferryObjects() []string {
	k.t.Helper()
	out := k.run("get", "jobs,pods,services,secrets", "-n", k.namespace, "-l", "app.kubernetes.io/managed-by=ferry", "-o", "name")
	return strings.Fields(out)
}

// waitEmpty waits until Ferry has nothing left in the namespace.
func (k *kubeEnv) waitEmpty() {
	k.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		left := k.ferryObjects()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("Ferry's objects left in namespace %s after its jobs ended: %v", k.namespace, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// computeYAML is a kubernetes compute file on the test cluster: the
// admin kubeconfig, the test's namespace, the node image (never pulled:
// the cluster pulls from no registry) and extra lines. Its pods see this
// run's folders at the same paths (hostPath), as the conformance suite
// needs, and share the host's PID namespace, so that the suite sees the
// pids its jobs see.
func (k *kubeEnv) computeYAML(name, kubeconfig, extra string) string {
	return fmt.Sprintf(`name: %s
type: kubernetes
namespace: %s
kubeconfig: %s
image: %s
pod_template:
  spec:
    hostPID: true
    terminationGracePeriodSeconds: 10
    containers:
      - name: runner
        imagePullPolicy: Never
        volumeMounts: [{name: run-root, mountPath: %[5]s}]
    volumes:
      - {name: run-root, hostPath: {path: %[5]s}}
%[6]s`, name, k.namespace, kubeconfig, kubeImage, runRoot, extra)
}

// startKube starts a server listening on the node's address (so that
// pods reach it), with args added, and attaches the compute.
func startKube(t *testing.T, k *kubeEnv, computeYAML string, args ...string) *server {
	t.Helper()
	s := startKubeServer(t, k, args...)
	s.mustFerry("compute", "attach", "-f", computeFile(t, computeYAML))
	return s
}

// startKubeServer starts a server listening on the node's address, which
// pods reach and a kubernetes compute may be attached to (a server on a
// loopback address refuses them).
func startKubeServer(t *testing.T, k *kubeEnv, args ...string) *server {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(k.nodeIP, "0"))
	if err != nil {
		t.Fatalf("listen on the node's address %s: %v", k.nodeIP, err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &server{t: t, dir: t.TempDir(), work: workDir(t), addr: addr, args: append([]string{"--cancel-grace", "1s"}, args...), home: t.TempDir(), output: &syncBuffer{}}
	s.start()
	t.Cleanup(func() { s.end() })
	return s
}

// The conformance suite on the cluster: one job at a time (capacity 1),
// with the server killed with SIGKILL while one job runs and one waits.
// Nothing is left in the namespace once the jobs have ended.
func TestConformanceKubernetes(t *testing.T) {
	k := requireKube(t)
	computetest.Run(t, computetest.Harness{
		Compute: "azureml:conform-k8s",
		Start: func(t *testing.T) computetest.Server {
			return conformServer{startKube(t, k, k.computeYAML("conform-k8s", k.kubeconfig, "capacity: 1\n"))}
		},
	})
	k.waitEmpty()
}

// A job asking for more GPUs than any node has waits Queued with the
// scheduler's message, and its cancel removes its objects.
func TestKubernetesUnschedulableQueuedAndCanceled(t *testing.T) {
	k := requireKube(t)
	s := startKube(t, k, k.computeYAML("k8s-gpu", k.kubeconfig, `instance_types:
  gpu-four:
    resources:
      limits: {nvidia.com/gpu: "4"}
`))
	mustContain(t, "compute show", s.mustFerry("compute", "show", "k8s-gpu").stdout, "gpu-four", "nvidia.com/gpu=4")
	s.mustFerry("job", "create", "-f", jobFile(t, "command: echo ran\ncompute: azureml:k8s-gpu\nresources:\n  instance_type: gpu-four\n", nil), "--name", "gpu-wait")
	j := s.waitReason("gpu-wait", "Insufficient nvidia.com/gpu")
	if j.Status != "Queued" {
		t.Errorf("gpu-wait: %s (%s), want Queued", j.Status, j.StatusReason)
	}
	// The handle is the Job's name, and the Job is the cluster's.
	if left := k.ferryObjects(); !strings.HasPrefix(j.Handle, "ferry-gpu-wait-") || !slices.Contains(left, "job.batch/"+j.Handle) {
		t.Errorf("gpu-wait's handle %q; the namespace has %v", j.Handle, left)
	}
	s.mustFerry("job", "cancel", "gpu-wait")
	s.waitStatus("gpu-wait", "Canceled")
	k.waitEmpty()
}

// A job over its instance type's memory limit fails, saying it was
// killed for memory.
func TestKubernetesOOMKilledFails(t *testing.T) {
	k := requireKube(t)
	s := startKube(t, k, k.computeYAML("k8s-mem", k.kubeconfig, `instance_types:
  small:
    resources:
      limits: {memory: 200Mi}
`))
	file := jobFile(t, `command: /usr/bin/python3 -c "b = b'x' * (1 << 30); print(len(b))"
compute: azureml:k8s-mem
resources:
  instance_type: small
`, nil)
	s.ferry("job", "create", "-f", file, "--name", "oom", "--stream")
	j := s.waitStatus("oom", "Failed")
	oom := strings.Contains(j.StatusReason+j.Error, "OOMKilled") || (j.ExitCode != nil && *j.ExitCode == 137)
	if !oom {
		t.Errorf("oom: %s, exit %v (%s; %s); want Failed, killed for memory (OOMKilled or exit 137)", j.Status, j.ExitCode, j.StatusReason, j.Error)
	}
	k.waitEmpty()
}

// A job whose environment is an image runs in a pod of that image (the
// runner runs it in place); one whose image the cluster does not have
// fails while it prepares, with the kubelet's reason.
func TestKubernetesImageEnvironments(t *testing.T) {
	k := requireKube(t)
	s := startKube(t, k, k.computeYAML("k8s-img", k.kubeconfig, ""))
	file := jobFile(t, "command: /usr/bin/python3 -c 'import torch; print(\"torch\", torch.__version__ is not None)'\ncompute: azureml:k8s-img\nenvironment:\n  image: "+kubeImage+"\n", nil)
	r := s.ferry("job", "create", "-f", file, "--name", "inimg", "--stream")
	if j := s.show("inimg"); j.Status != "Completed" {
		t.Errorf("a job on an image environment: %s (%s; %s)\n%s", j.Status, j.StatusReason, j.Error, r)
	}
	mustContain(t, "its log", r.stdout, "torch True")

	file = jobFile(t, "command: echo ran\ncompute: azureml:k8s-img\nenvironment:\n  image: ferry-missing-image:none\n", nil)
	s.mustFerry("job", "create", "-f", file, "--name", "noimg")
	j := s.waitStatus("noimg", "Failed")
	if !strings.Contains(j.StatusReason+j.Error, "ErrImageNeverPull") || !strings.Contains(j.StatusReason+j.Error, "preparing") {
		t.Errorf("noimg: %s (%s; %s); want Failed while preparing with ErrImageNeverPull", j.Status, j.StatusReason, j.Error)
	}
	k.waitEmpty()
}

// Credentials that may not create Services are refused at attach, naming
// the permission, and the kubeconfig's token is never shown.
func TestKubernetesAttachRefusedWithoutPermission(t *testing.T) {
	k := requireKube(t)
	k.run("create", "serviceaccount", "limited", "-n", k.namespace)
	k.run("create", "role", "limited", "-n", k.namespace,
		"--verb=create,delete,watch,list,get", "--resource=jobs.batch,pods,secrets,deployments.apps")
	k.run("create", "rolebinding", "limited", "-n", k.namespace, "--role=limited", "--serviceaccount="+k.namespace+":limited")
	token := strings.TrimSpace(k.run("create", "token", "limited", "-n", k.namespace))
	server := strings.TrimSpace(k.run("config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	ca := strings.TrimSpace(k.run("config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}"))
	kc := filepath.Join(t.TempDir(), "limited.kubeconfig")
	writeFiles(t, filepath.Dir(kc), map[string]string{filepath.Base(kc): fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: limited, user: {token: %s}}]
contexts: [{name: x, context: {cluster: c, user: limited, namespace: %s}}]
current-context: x
`, server, ca, token, k.namespace)})

	s := startKubeServer(t, k)
	r := s.ferry("compute", "attach", "-f", computeFile(t, k.computeYAML("k8s-limited", kc, "")))
	if r.code == 0 {
		t.Fatalf("attach with credentials that may not create services passed: %s", r)
	}
	mustContain(t, "the refusal", r.stderr, "kubeconfig", "create services")
	if strings.Contains(r.stdout+r.stderr+s.output.String(), token) {
		t.Errorf("the kubeconfig's token was shown")
	}
	if out := s.ferry("compute", "show", "k8s-limited"); out.code == 0 {
		t.Errorf("the refused compute was stored: %s", out)
	}
	// The admin's kubeconfig is accepted, and never shown back.
	s.mustFerry("compute", "attach", "-f", computeFile(t, k.computeYAML("k8s-admin", k.kubeconfig, "")))
	show := s.mustFerry("compute", "show", "k8s-admin", "-o", "json").stdout
	admin, err := os.ReadFile(k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(admin), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasSuffix(f[0], "-data:") && strings.Contains(show, f[1]) {
			t.Errorf("compute show holds the kubeconfig's %s", f[0])
		}
	}
}

// A server that advertises a loopback URL refuses to attach a
// kubernetes compute, naming --advertise-url: its pods would start, and
// their runners never reach the server, each job Queued without a word
// (issue 29 #7). The refusal comes before the cluster is asked, so this
// needs no cluster; nothing is stored.
func TestKubernetesAttachRefusedOnALoopbackServer(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"kubeconfig": `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: t0k3n-never-shown}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`})
	r := s.ferry("compute", "attach", "-f", computeFile(t, "name: k8s\ntype: kubernetes\nnamespace: ml\nkubeconfig: "+filepath.Join(dir, "kubeconfig")+"\n"))
	if r.code == 0 {
		t.Fatalf("a kubernetes compute was attached to a server on %s: %s", s.addr, r)
	}
	mustContain(t, "the refusal", r.stderr, "compute k8s:", "http://"+s.addr, "a loopback address, which no pod can reach", "--advertise-url")
	if strings.Contains(r.stdout+r.stderr+s.output.String(), "t0k3n-never-shown") {
		t.Errorf("the kubeconfig's token was shown")
	}
	if out := s.ferry("compute", "show", "k8s"); out.code == 0 {
		t.Errorf("the refused compute was stored: %s", out)
	}
}

// 2 pods x 2 processes of PyTorch DDP as one Indexed Job: the ranks find
// rank 0 through the headless Service and gloo's all-reduce over the
// four sums 1+2+3+4.
func TestKubernetesPyTorchDDPOnTwoPods(t *testing.T) {
	k := requireKube(t)
	s := startKube(t, k, k.computeYAML("k8s-ddp", k.kubeconfig, ""))
	job := jobFile(t, `command: /usr/bin/python3 ddp.py
code: src
compute: azureml:k8s-ddp
resources:
  instance_count: 2
distribution:
  type: pytorch
  process_count_per_instance: 2
`, map[string]string{"src/ddp.py": ddpScript})
	r := s.ferry("job", "create", "-f", job, "--stream", "--name", "k8s-ddp")
	if r.code != 0 {
		t.Fatalf("ddp job: %s\nserver:\n%s", r, s.output)
	}
	checkDDP(t, s, "k8s-ddp", r.stdout)
	k.waitEmpty()
}
