package studio_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// kubectlIn runs the test cluster's kubectl with the admin kubeconfig,
// failing the test when it fails.
func kubectlIn(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, testutil.Kubectl(t), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Attach the test Kubernetes cluster through the form, with a service
// account's token in a kubeconfig of the test's own namespace. While the
// account may not create Services, the attach is refused beside the
// kubeconfig, naming that permission, and nothing is stored; granted it,
// the same form attaches, and the compute's page shows it ready with its
// namespace, default image and instance types. The kubeconfig's token
// never appears in any page nor in the server's output.
func TestStudioKubeAttachInBrowser(t *testing.T) {
	admin := testutil.Kube(t)
	b4 := make([]byte, 4)
	_, _ = rand.Read(b4)
	ns := "ferry-studio-" + hex.EncodeToString(b4)
	kubectlIn(t, admin, "create", "namespace", ns)
	t.Cleanup(func() { kubectlIn(t, admin, "delete", "namespace", ns, "--wait=true", "--timeout=120s") })
	kubectlIn(t, admin, "create", "serviceaccount", "ferry", "-n", ns)
	kubectlIn(t, admin, "create", "role", "ferry", "-n", ns,
		"--verb=create,delete,watch,list,get,update,patch", "--resource=jobs.batch,pods,secrets,deployments.apps")
	kubectlIn(t, admin, "create", "rolebinding", "ferry", "-n", ns, "--role=ferry", "--serviceaccount="+ns+":ferry")
	token := strings.TrimSpace(kubectlIn(t, admin, "create", "token", "ferry", "-n", ns))
	server := strings.TrimSpace(kubectlIn(t, admin, "config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	ca := strings.TrimSpace(kubectlIn(t, admin, "config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}"))
	kubeconfig := "apiVersion: v1\nkind: Config\n" +
		"clusters: [{name: c, cluster: {server: \"" + server + "\", certificate-authority-data: " + ca + "}}]\n" +
		"users: [{name: ferry, user: {token: " + token + "}}]\n" +
		"contexts: [{name: x, context: {cluster: c, user: ferry, namespace: " + ns + "}}]\ncurrent-context: x\n"
	kcFile := filepath.Join(t.TempDir(), "ferry.kubeconfig")
	if err := os.WriteFile(kcFile, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}

	// The cluster's pods must reach the server: it listens on the node's
	// address, not loopback, or the attach is refused.
	nodeIP := strings.TrimSpace(kubectlIn(t, admin, "get", "node", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`))
	s := startServerAt(t, nil, net.JoinHostPort(nodeIP, "0"))
	c := s.client()
	detachAtEnd(t, c, "k8s-lab")
	b := newBrowser(t)
	b.signIn(s)
	// noToken fails the test when the page now shown holds the token.
	noToken := func(where string) {
		t.Helper()
		html := get(b, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if strings.Contains(html, token) || strings.Contains(html, token[len(token)-40:]) {
			t.Errorf("%s holds the kubeconfig's token", where)
		}
	}
	b.run("open the Kubernetes attach form", chromedp.Navigate(s.url+"/studio/compute"),
		loads(chromedp.Click(chromedp.CSS(`a[href="/studio/compute/attach-kubernetes"]`))), chromedp.WaitVisible(chromedp.ID("namespace")))
	b.screenshot("kube-attach")

	const types = "cpu-small:\n  resources:\n    requests: {cpu: 500m, memory: 1Gi}\n    limits: {cpu: \"2\", memory: 2Gi}\n" +
		"gpu-one:\n  nodeSelector: {accelerator: nvidia}\n  resources:\n    limits: {nvidia.com/gpu: \"1\"}\n  tolerations:\n    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"
	b.run("send the form with credentials that may not create Services",
		chromedp.SetValue(chromedp.ID("name"), "k8s-lab"),
		chromedp.SetValue(chromedp.ID("description"), "the lab's cluster"),
		chromedp.SetValue(chromedp.ID("namespace"), ns),
		chromedp.SetValue(chromedp.ID("image"), "python:3.12-slim"),
		chromedp.SetUploadFiles(chromedp.ID("kubeconfig_file"), []string{kcFile}),
		chromedp.SetValue(chromedp.ID("instance_types"), types),
		chromedp.SetValue(chromedp.ID("default_instance_type"), "cpu-small"),
		loads(chromedp.Click(chromedp.ID("attach"))),
		chromedp.WaitVisible(chromedp.ID("kubeconfig-error")))
	msg := b.textOf("#kubeconfig-error")
	for _, want := range []string{"create services", ns} {
		if !strings.Contains(msg, want) {
			t.Errorf("the kubeconfig's error %q lacks %q (the permission the attach check found missing)", msg, want)
		}
	}
	if beside := eval[bool](b, `document.getElementById("kubeconfig-field").contains(document.getElementById("kubeconfig-error"))`); !beside {
		t.Error("the kubeconfig's error is not beside the kubeconfig field")
	}
	if kept := get(b, "read the namespace kept", chromedp.Value(chromedp.ID("namespace"))); kept != ns {
		t.Errorf("the form lost the namespace: %q, want %s", kept, ns)
	}
	if kept := get(b, "read the instance types kept", chromedp.Value(chromedp.ID("instance_types"))); !strings.Contains(kept, "gpu-one:") {
		t.Errorf("the form lost the instance types: %q", kept)
	}
	if kept := get(b, "read the pasted kubeconfig", chromedp.Value(chromedp.ID("kubeconfig"))); kept != "" {
		t.Error("the form shown again holds a kubeconfig")
	}
	noToken("the refused form")
	if _, err := c.GetCompute(context.Background(), "k8s-lab"); err == nil {
		t.Fatal("an attach the cluster refused made the compute")
	}
	b.screenshot("kube-attach-error")

	// Granted Services, the same credentials attach; the kubeconfig is
	// pasted this time.
	kubectlIn(t, admin, "create", "role", "ferry-services", "-n", ns, "--verb=create,delete,watch,list,get,update", "--resource=services")
	kubectlIn(t, admin, "create", "rolebinding", "ferry-services", "-n", ns, "--role=ferry-services", "--serviceaccount="+ns+":ferry")
	b.run("send it again with the kubeconfig pasted",
		chromedp.SetValue(chromedp.ID("kubeconfig"), kubeconfig),
		loads(chromedp.Click(chromedp.ID("attach"))),
		chromedp.WaitVisible(chromedp.ID("compute-state")))
	if st := b.textOf("#compute-state"); st != "Succeeded" {
		t.Errorf("the attached Kubernetes cluster is %q, want Succeeded", st)
	}
	if got := b.textOf("#kube-namespace"); got != ns {
		t.Errorf("the compute's page shows namespace %q, want %s", got, ns)
	}
	if got := b.textOf("#kube-image"); got != "python:3.12-slim" {
		t.Errorf("the compute's page shows default image %q, want python:3.12-slim", got)
	}
	if got := b.textOf("#kube-credentials"); !strings.Contains(got, "sealed") {
		t.Errorf("the compute's page says the credentials are %q, want a sealed kubeconfig", got)
	}
	if row := b.textOf(`tr[data-instance-type="cpu-small"]`); !strings.Contains(row, "(default)") || !strings.Contains(row, "cpu=500m, memory=1Gi") || !strings.Contains(row, "cpu=2, memory=2Gi") {
		t.Errorf("the instance type row of cpu-small %q lacks (default) or its requests and limits", row)
	}
	if row := b.textOf(`tr[data-instance-type="gpu-one"]`); !strings.Contains(row, "nvidia.com/gpu=1") || !strings.Contains(row, "accelerator=nvidia") {
		t.Errorf("the instance type row of gpu-one %q lacks its GPU limit or node selector", row)
	}
	if d := b.textOf("#delete"); d != "Detach" {
		t.Errorf("the Kubernetes compute's page offers %q, want Detach (the cluster stays)", d)
	}
	noToken("the compute's page")
	b.screenshot("kube-attach-done")
	got, err := c.GetCompute(context.Background(), "k8s-lab")
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != "kubernetes" || got.Spec == nil || got.Spec.Namespace != ns || got.Spec.Image != "python:3.12-slim" ||
		len(got.Spec.InstanceTypes) != 2 || got.Spec.DefaultInstanceType != "cpu-small" {
		t.Errorf("the form made %s of type %s with spec %+v; want kubernetes in %s with two instance types", got.Name, got.Type, got.Spec, ns)
	}
	b.run("open the compute list", chromedp.Navigate(s.url+"/studio/compute"), chromedp.WaitVisible(chromedp.CSS(`tr[data-compute="k8s-lab"]`)))
	if row := b.textOf(`tr[data-compute="k8s-lab"]`); !strings.Contains(row, "kubernetes") {
		t.Errorf("the list's row for k8s-lab %q does not say kubernetes", row)
	}
	noToken("the compute list")
	b.run("open the detach page", chromedp.Navigate(s.url+"/studio/compute/k8s-lab/delete"), chromedp.WaitVisible(chromedp.CSS("form")))
	noToken("the detach page")
	if strings.Contains(s.output.String(), token) {
		t.Error("the server printed the kubeconfig's token")
	}
}
