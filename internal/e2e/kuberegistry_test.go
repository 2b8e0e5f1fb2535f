package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// A kubernetes compute with a registry (scripts/registry-up.sh's, with
// its login): Ferry builds a Dockerfile environment on the server's
// Docker engine, pushes it and the runner's own image there, and the
// cluster pulls both from it.

// registryComputeYAML is a kubernetes compute on the test cluster with
// registry reg (under a prefix of the test's namespace, so that every
// run pushes afresh) and its login, and no pod template: no hostPath of
// any kind.
func (k *kubeEnv) registryComputeYAML(name, reg, user, password string) string {
	return fmt.Sprintf(`name: %s
type: kubernetes
namespace: %s
kubeconfig: %s
registry: %s
registry_credentials: {username: %s, password: %s}
`, name, k.namespace, k.kubeconfig, reg, user, password)
}

// podSpec is what the test reads of a pod.
type podSpec struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		InitContainers []struct {
			Image string `json:"image"`
		} `json:"initContainers"`
		Containers []struct {
			Image string `json:"image"`
		} `json:"containers"`
		Volumes []struct {
			Name     string          `json:"name"`
			HostPath json.RawMessage `json:"hostPath"`
		} `json:"volumes"`
	} `json:"spec"`
}

// firstPod waits for a pod of Ferry's in the namespace and returns it.
func (k *kubeEnv) firstPod(within time.Duration) podSpec {
	k.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var list struct{ Items []podSpec }
		out := k.run("get", "pods", "-n", k.namespace, "-l", "app.kubernetes.io/managed-by=ferry", "-o", "json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			k.t.Fatalf("kubectl get pods -o json: %v\n%s", err, out)
		}
		if len(list.Items) > 0 {
			return list.Items[0]
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("no pod of Ferry's appeared in namespace %s in %s", k.namespace, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitEnded waits (up to within) until the job ended.
func (s *server) waitEnded(name string, within time.Duration) job {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		j := s.show(name)
		switch j.Status {
		case "Completed", "Failed", "Canceled":
			return j
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s is still %s (%s) after %s\nserver:\n%s", name, j.Status, j.StatusReason, within, s.output)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startKubeWithRegistry starts a server with kubernetes compute k8s-reg
// whose registry is the test registry, under a prefix of the test's
// namespace (whose repositories the test's cleanup deletes), for tests of
// the images Ferry builds and pushes there: it needs Docker and the base
// image to build from.
func startKubeWithRegistry(t *testing.T) (k *kubeEnv, tr testutil.TestRegistry, prefix string, s *server) {
	t.Helper()
	k = requireKube(t)
	tr = testutil.Registry(t)
	testutil.RequireDocker(t)
	testutil.RequireBaseImage(t)
	prefix = tr.Addr + "/" + k.namespace
	t.Cleanup(func() { deleteRepos(t, tr, prefix, "ferry-env", "ferry-runner") })
	return k, tr, prefix, startKube(t, k, k.registryComputeYAML("k8s-reg", prefix, tr.Username, tr.Password))
}

// deleteRepos deletes every tagged image of the repositories under
// prefix in the test registry.
func deleteRepos(t *testing.T, tr testutil.TestRegistry, prefix string, repos ...string) {
	t.Helper()
	auth := remote.WithAuth(&authn.Basic{Username: tr.Username, Password: tr.Password})
	for _, r := range repos {
		repo, err := name.NewRepository(prefix + "/" + r)
		if err != nil {
			t.Error(err)
			continue
		}
		tags, err := remote.List(repo, auth)
		if err != nil {
			continue // never pushed
		}
		for _, tag := range tags {
			d, err := remote.Head(repo.Tag(tag), auth)
			if err == nil {
				err = remote.Delete(repo.Digest(d.Digest.String()), auth)
			}
			if err != nil {
				t.Errorf("delete %s:%s from the test registry: %v", repo, tag, err)
			}
		}
	}
}

// A job whose environment is a Dockerfile runs on the cluster in the
// image Ferry built and pushed (the marker its build wrote is there), in
// a pod with no hostPath volume whose runner came from the runner's
// image; a second job of the same environment pushes nothing; wrong
// registry credentials and an unreachable registry fail the job before
// it runs, saying so. Nothing is left in the namespace.
func TestKubernetesRegistryBuiltEnvironment(t *testing.T) {
	k, tr, prefix, s := startKubeWithRegistry(t)
	marker := "built-by-ferry-" + k.namespace
	files := map[string]string{"env/Dockerfile": fmt.Sprintf("FROM %s\nRUN echo %s > /ferry-marker\n", testutil.BaseImage, marker)}
	job := func(compute string) string {
		return jobFile(t, "command: cat /ferry-marker && sleep 3\ncompute: azureml:"+compute+"\nenvironment:\n  build:\n    path: env\n", files)
	}
	s.mustFerry("job", "create", "-f", job("k8s-reg"), "--name", "built-1")
	pod := k.firstPod(5 * time.Minute)
	for _, v := range pod.Spec.Volumes {
		if len(v.HostPath) > 0 && string(v.HostPath) != "null" {
			t.Errorf("pod %s has a hostPath volume %s: %s", pod.Metadata.Name, v.Name, v.HostPath)
		}
	}
	if len(pod.Spec.InitContainers) != 1 || !strings.HasPrefix(pod.Spec.InitContainers[0].Image, prefix+"/ferry-runner@sha256:") {
		t.Errorf("pod %s's init containers: %+v; want the runner's image from %s, by digest", pod.Metadata.Name, pod.Spec.InitContainers, prefix)
	}
	envImage := pod.Spec.Containers[0].Image
	if !strings.HasPrefix(envImage, prefix+"/ferry-env@sha256:") {
		t.Errorf("pod %s runs %s; want the environment's image from %s, by digest", pod.Metadata.Name, envImage, prefix)
	}
	if j := s.waitEnded("built-1", 5*time.Minute); j.Status != "Completed" {
		t.Fatalf("built-1: %s (%s; %s)\nserver:\n%s", j.Status, j.StatusReason, j.Error, s.output)
	}
	mustContain(t, "built-1's log", s.mustFerry("job", "stream", "built-1").stdout, marker)
	k.waitEmpty()

	s.mustFerry("job", "create", "-f", job("k8s-reg"), "--name", "built-2")
	if pod2 := k.firstPod(2 * time.Minute); pod2.Spec.Containers[0].Image != envImage {
		t.Errorf("built-2 runs %s, built-1 ran %s", pod2.Spec.Containers[0].Image, envImage)
	}
	if j := s.waitEnded("built-2", 3*time.Minute); j.Status != "Completed" {
		t.Fatalf("built-2: %s (%s; %s)", j.Status, j.StatusReason, j.Error)
	}
	log := s.output.String()
	if n := strings.Count(log, "pushed an environment's image"); n != 1 {
		t.Errorf("the server pushed the environment's image %d times for two jobs of it, want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "pushed the runner's image"); n != 1 {
		t.Errorf("the server pushed the runner's image %d times, want 1", n)
	}
	k.waitEmpty()

	// Wrong credentials, and a registry nobody answers at: the job fails
	// before any pod, saying what to check.
	s.mustFerry("compute", "attach", "-f", computeFile(t, k.registryComputeYAML("k8s-badlogin", prefix, tr.Username, "not-the-password")))
	s.mustFerry("compute", "attach", "-f", computeFile(t, k.registryComputeYAML("k8s-noreg", "127.0.0.1:1/"+k.namespace, tr.Username, tr.Password)))
	for _, tc := range []struct{ compute, want string }{
		{"k8s-badlogin", "registry_credentials"},
		{"k8s-noreg", "reaches 127.0.0.1:1"},
	} {
		s.mustFerry("job", "create", "-f", job(tc.compute), "--name", tc.compute+"-job")
		j := s.waitEnded(tc.compute+"-job", 2*time.Minute)
		if j.Status != "Failed" || !strings.Contains(j.StatusReason+j.Error, tc.want) || !strings.Contains(j.StatusReason+j.Error, "environment's image") {
			t.Errorf("%s-job: %s (%s; %s); want Failed, preparing the environment's image, naming %q", tc.compute, j.Status, j.StatusReason, j.Error, tc.want)
		}
	}
	if out := s.output.String() + s.mustFerry("compute", "show", "k8s-reg", "-o", "json").stdout; strings.Contains(out, tr.Password) || strings.Contains(out, "not-the-password") {
		t.Errorf("a registry password was shown or logged")
	}
	k.waitEmpty()
}
