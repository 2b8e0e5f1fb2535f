package testutil

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// KubeconfigPath is where scripts/kube-up.sh writes the admin kubeconfig
// of the machine's test cluster; FERRY_TEST_KUBECONFIG names another.
const KubeconfigPath = "/var/lib/ferry-kube/admin.kubeconfig"

// kubectlPath is the kubectl that scripts/kube-up.sh builds beside the
// cluster (the same version as its API server).
const kubectlPath = "/var/lib/ferry-kube/bin/kubectl"

// KubeBusyboxImage is a static busybox in an otherwise empty image that
// scripts/kube-up.sh imports into the test cluster; pods use it with
// imagePullPolicy: Never (the cluster reaches no registry).
const KubeBusyboxImage = "ferry-kube-busybox:1"

const kubeAdvice = "run scripts/kube-up.sh (see docs/kubernetes.md)"

// Kube skips the test unless a Kubernetes cluster answers through the
// kubeconfig at FERRY_TEST_KUBECONFIG or KubeconfigPath, and returns that
// kubeconfig's path. Under CI=true a missing cluster fails the test.
func Kube(t testing.TB) string {
	t.Helper()
	path := os.Getenv("FERRY_TEST_KUBECONFIG")
	if path == "" {
		path = KubeconfigPath
	}
	if _, err := os.Stat(path); err != nil {
		skip(t, "needs a Kubernetes cluster: no kubeconfig at %s: %s", path, kubeAdvice)
		return ""
	}
	kubectl := Kubectl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", path, "--request-timeout=10s", "get", "--raw", "/readyz").CombinedOutput()
	if err != nil {
		skip(t, "needs a Kubernetes cluster: the API server of %s does not answer (%v: %s): %s", path, err, out, kubeAdvice)
	}
	return path
}

// Kubectl returns the kubectl that scripts/kube-up.sh builds, or one on
// PATH; it skips the test (fails under CI=true) when there is none.
func Kubectl(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(kubectlPath); err == nil {
		return kubectlPath
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	skip(t, "needs kubectl: %s", kubeAdvice)
	return ""
}

// KubeImage copies a Docker image (NAME:TAG) into the test cluster's
// containerd with scripts/kube-image.sh, so that pods can use it with
// imagePullPolicy: Never. The image stays there for later tests.
func KubeImage(t testing.TB, image string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "kube-image.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", script, image).CombinedOutput(); err != nil {
		t.Fatalf("kube-image.sh %s: %v: %s", image, err, out)
	}
}
