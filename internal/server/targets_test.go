package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/compute/local"
	"github.com/ferry-ml/ferry/internal/spec"
)

func TestRegistryMakesTargetsByType(t *testing.T) {
	mk := targetFactory(computeTypes, targetEnv{Local: local.Config{Capacity: 3}, Exe: "/usr/local/bin/ferry"})
	tg, err := mk(&spec.Compute{Name: "local", Type: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if tg.Type() != "local" || tg.Capacity() != 3 {
		t.Errorf("local target: type %q, capacity %d; want local, 3 from the server's settings", tg.Type(), tg.Capacity())
	}
	if tg, err := mk(&spec.Compute{Name: "big", Type: "local", Capacity: 7}); err != nil || tg.Capacity() != 7 {
		t.Errorf("a local compute with capacity 7: %v, %v", tg, err)
	}

	hpc := &spec.Compute{Name: "hpc", Type: "slurm", Partition: "debug", WorkDir: "/shared/ferry"}
	if tg, err := mk(hpc); err != nil || tg.Type() != "slurm" {
		t.Errorf("a slurm compute: %v, %v; want a slurm target", tg, err)
	}
	hpc.WorkDir = ""
	if _, err := mk(hpc); err == nil || strings.Count(err.Error(), "compute hpc") != 1 || !strings.Contains(err.Error(), "work_dir") {
		t.Errorf("a slurm compute without work_dir: %v; want one error naming the compute once and the field", err)
	}

	// Outside a cluster, a kubernetes compute needs a kubeconfig.
	if _, err := mk(&spec.Compute{Name: "k8s", Type: "kubernetes", Namespace: "ml"}); err == nil || !strings.Contains(err.Error(), "compute k8s: kubeconfig:") {
		t.Errorf("a kubernetes compute without a kubeconfig: %v; want an error naming the compute and kubeconfig", err)
	}

	_, err = mk(&spec.Compute{Name: "pool", Type: "amlcompute"})
	if apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "type:") || !strings.Contains(err.Error(), "available: kubernetes, local, slurm") {
		t.Errorf("an unregistered type: %v, want an invalid-request error naming the field and the types there are", err)
	}
}

// A type's constructor error names the compute; an unknown type's error
// lists every registered type.
func TestRegistryNamesTheComputeAndTheTypes(t *testing.T) {
	refused := errors.New("partition: gpu does not exist")
	types := map[string]newTarget{
		"local": newLocal,
		"picky": func(targetEnv, *spec.Compute) (compute.Target, error) { return nil, refused },
	}
	mk := targetFactory(types, targetEnv{})
	_, err := mk(&spec.Compute{Name: "hpc", Type: "picky"})
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "compute hpc") {
		t.Errorf("constructor error: %v, want it wrapped with the compute's name", err)
	}
	_, err = mk(&spec.Compute{Name: "x", Type: "nope"})
	if err == nil || !strings.Contains(err.Error(), "available: local, picky") {
		t.Errorf("unknown type: %v, want the sorted list of registered types", err)
	}
}

// A kubernetes compute on a server that advertises a loopback URL is
// refused naming --advertise-url: its pods would start and their runners
// never reach the server (issue 29 #7). An address the pods can reach is
// accepted; the cluster itself is not asked (its checks come at attach,
// after the target is made).
func TestKubernetesRefusedOnALoopbackServer(t *testing.T) {
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: not-a-real-one}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	k8s := func() *spec.Compute {
		return &spec.Compute{Name: "k8s", Type: "kubernetes", Namespace: "ml", KubeconfigContent: kubeconfig}
	}
	for _, url := range []string{"http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080", "http://0.0.0.0:8080", "http://127.0.0.2:9/"} {
		mk := targetFactory(computeTypes, targetEnv{APIURL: url, Exe: "/usr/local/bin/ferry"})
		_, err := mk(k8s())
		if apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "compute k8s:") ||
			!strings.Contains(err.Error(), "--advertise-url") || !strings.Contains(err.Error(), url) {
			t.Errorf("advertised %s: %v; want an invalid-request error naming the compute, the URL and --advertise-url", url, err)
		}
		if err != nil && strings.Contains(err.Error(), "not-a-real-one") {
			t.Errorf("the refusal shows the kubeconfig's token: %v", err)
		}
	}
	mk := targetFactory(computeTypes, targetEnv{APIURL: "http://10.0.0.7:8080", Exe: "/usr/local/bin/ferry"})
	tg, err := mk(k8s())
	if err != nil {
		t.Fatalf("advertised an address of the host: %v", err)
	}
	if c, ok := tg.(interface{ Close() error }); ok {
		c.Close()
	}
}
