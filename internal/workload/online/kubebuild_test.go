package online

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

// buildingKube is a recordingKube that builds images: each EnvImage call
// is recorded and waits for the test's answer (or its context's end).
type buildingKube struct {
	*recordingKube
	mu      sync.Mutex
	builds  []KubeRegistry
	envs    []*environment.Spec
	answers chan buildAnswer
}

type buildAnswer struct {
	ref string
	err error
}

func (k *buildingKube) EnvImage(ctx context.Context, reg KubeRegistry, env *environment.Spec) (string, error) {
	k.mu.Lock()
	k.builds, k.envs = append(k.builds, reg), append(k.envs, env)
	k.mu.Unlock()
	select {
	case a := <-k.answers:
		return a.ref, a.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (k *buildingKube) buildCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.builds)
}

var _ KubeImageBuilder = (*buildingKube)(nil)

// waitBuilds waits until n builds were asked for (each in the
// controller's goroutine).
func (k *buildingKube) waitBuilds(t *testing.T, n int) {
	t.Helper()
	for range 5000 {
		if k.buildCount() >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d builds asked for, want %d", k.buildCount(), n)
}

// waitBuilt waits until the controller's build of a deployment's image
// has ended (its goroutine has recorded the answer).
func waitBuilt(t *testing.T, s *Service, key string) {
	t.Helper()
	for range 5000 {
		s.deployCtl.mu.Lock()
		kl := s.deployCtl.kube[key]
		done := kl != nil && !kl.building
		s.deployCtl.mu.Unlock()
		if done {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the build of %s's image did not end", key)
}

// A deployment on a kubernetes compute whose environment Ferry builds (a
// Dockerfile): refused without a registry, naming it; with one, create
// returns Creating at once, the controller's pass starts the build and
// goes on without waiting (no apply meanwhile, the reason says what is
// under way), and once built the pods run the image by digest with the
// registry's login; a restarted server asks for the image again (the
// builder finds its tag) and applies it; a failed build makes the
// deployment Failed with the build's words, and is not retried; a
// deployment deleted during its build cancels it.
func TestKubernetesDeploymentBuiltEnvironment(t *testing.T) {
	ctx := context.Background()
	h := workloadtest.NewKeyed(t, 1)
	kube := &buildingKube{recordingKube: &recordingKube{}, answers: make(chan buildAnswer)}
	s := openOnline(t, h, kube)
	for _, y := range []string{
		"name: k8s-noreg\ntype: kubernetes\nnamespace: ns\nkubeconfig_content: 'apiVersion: v1'\nimage: img:1\n",
		"name: k8s\ntype: kubernetes\nnamespace: ns\nkubeconfig_content: 'apiVersion: v1'\nregistry: 127.0.0.1:5000/ns\nregistry_credentials: {username: u, password: pw}\n",
	} {
		c, err := spec.ParseCompute([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.WS.CreateCompute(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for name, compute := range map[string]string{"noreg": "azureml:k8s-noreg", "kep": "azureml:k8s"} {
		if _, err := s.CreateOnlineEndpoint(ctx, owner, &spec.OnlineEndpoint{Name: name, Compute: compute}); err != nil {
			t.Fatal(err)
		}
	}
	_, code := h.PutFile(t, "def init(): pass\ndef run(x): return x\n")
	_, envFiles := h.PutFile(t, "FROM ferry-base:bookworm\n")
	dep := func(name, endpoint string) (*spec.OnlineDeployment, apitypes.DeploymentUploads) {
		return &spec.OnlineDeployment{Name: name, EndpointName: endpoint, InstanceCount: 1,
				CodeConfiguration: &spec.CodeConfiguration{Code: "code", ScoringScript: "f.txt"},
				Environment:       &spec.Environment{Build: &spec.Build{Path: "env", DockerfilePath: "f.txt"}}},
			apitypes.DeploymentUploads{CodeSnapshot: code, EnvironmentSnapshot: envFiles}
	}
	pass := func(s *Service) {
		t.Helper()
		if err := s.reconcileDeployments(ctx); err != nil {
			t.Fatal(err)
		}
	}
	get := func(s *Service, endpoint, name string) *apitypes.OnlineDeployment {
		t.Helper()
		d, err := s.GetOnlineDeployment(ctx, endpoint, name)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	d, up := dep("blue", "noreg")
	if _, err := s.CreateOnlineDeployment(ctx, owner, d, up, false); apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "registry") {
		t.Errorf("a Dockerfile environment on a compute without a registry: %v", err)
	}

	// A conda file on an image is built too: refused without a registry
	// (naming the field), taken with one.
	d, up = dep("conda", "noreg")
	d.Environment = &spec.Environment{Image: "img:1", CondaFile: "f.txt"}
	if _, err := s.CreateOnlineDeployment(ctx, owner, d, up, false); apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "environment.conda_file") || !strings.Contains(err.Error(), "registry") {
		t.Errorf("a conda file on an image on a compute without a registry: %v", err)
	}
	d.EndpointName = "kep"
	if got, err := s.CreateOnlineDeployment(ctx, owner, d, up, false); err != nil || got.ProvisioningState != apitypes.DeploymentCreating {
		t.Errorf("a conda file on an image on a compute with a registry: %+v %v", got, err)
	}
	if err := s.DeleteOnlineDeployment(ctx, owner, "kep", "conda"); err != nil {
		t.Fatal(err)
	}
	pass(s)
	if kube.buildCount() != 0 {
		t.Errorf("a deployment deleted before its first pass was built")
	}
	kube.calls = nil

	// Create returns before any build.
	d, up = dep("blue", "kep")
	created, err := s.CreateOnlineDeployment(ctx, owner, d, up, false)
	if err != nil {
		t.Fatal(err)
	}
	if created.ProvisioningState != apitypes.DeploymentCreating || kube.buildCount() != 0 {
		t.Fatalf("create: %s with %d builds, want Creating and none", created.ProvisioningState, kube.buildCount())
	}
	pass(s)
	kube.waitBuilds(t, 1)
	pass(s) // the build goes on: not started twice, nothing applied
	if got := get(s, "kep", "blue"); got.ProvisioningState != apitypes.DeploymentCreating || !strings.Contains(got.Reason, "building the environment's image") ||
		kube.buildCount() != 1 || len(kube.calls) != 0 {
		t.Fatalf("during the build: %s (%s), %d builds, calls %v", got.ProvisioningState, got.Reason, kube.buildCount(), kube.calls)
	}
	if reg, env := kube.builds[0], kube.envs[0]; reg != (KubeRegistry{Address: "127.0.0.1:5000/ns", Username: "u", Password: "pw"}) ||
		env.Kind != environment.KindBuild || env.Context != envFiles {
		t.Errorf("built %+v for registry %+v", env, reg)
	}
	const ref = "127.0.0.1:5000/ns/ferry-env@sha256:0123"
	kube.answers <- buildAnswer{ref: ref}
	waitBuilt(t, s, "kep/blue")
	pass(s)
	if got := get(s, "kep", "blue"); got.ProvisioningState != apitypes.DeploymentSucceeded || kube.applied.Image != ref ||
		kube.applied.Registry == nil || kube.applied.Registry.Username != "u" || kube.applied.Registry.Password != "pw" {
		t.Fatalf("built: %s (%s), applied image %q registry %+v", got.ProvisioningState, got.Reason, kube.applied.Image, kube.applied.Registry)
	}

	// A restart asks again (the server's builder finds the tag) and
	// applies the same image.
	h.Restart(t)
	s2 := openOnline(t, h, kube)
	pass(s2)
	if got := get(s2, "kep", "blue"); got.ProvisioningState != apitypes.DeploymentSucceeded || got.Reason != "" {
		t.Errorf("a Succeeded deployment during its image's look-up after a restart: %s (%s)", got.ProvisioningState, got.Reason)
	}
	kube.answers <- buildAnswer{ref: ref}
	waitBuilt(t, s2, "kep/blue")
	kube.calls = nil
	pass(s2)
	if kube.buildCount() != 2 || len(kube.calls) == 0 || kube.calls[0] != "apply" || kube.applied.Image != ref {
		t.Errorf("after a restart: %d builds, calls %v, image %q", kube.buildCount(), kube.calls, kube.applied.Image)
	}

	// A failed build.
	d, up = dep("red", "kep")
	if _, err := s2.CreateOnlineDeployment(ctx, owner, d, up, false); err != nil {
		t.Fatal(err)
	}
	pass(s2)
	kube.answers <- buildAnswer{err: errors.New("preparing the environment's image (build f.txt): exit 1; the build's last output:\nRUN false: returned a non-zero code")}
	waitBuilt(t, s2, "kep/red")
	pass(s2)
	pass(s2)
	if got := get(s2, "kep", "red"); got.ProvisioningState != apitypes.DeploymentFailed || !strings.Contains(got.Reason, "RUN false: returned a non-zero code") ||
		!strings.Contains(got.Reason, "kubernetes compute k8s") {
		t.Errorf("a failed build: %s (%s)", got.ProvisioningState, got.Reason)
	}
	if n := kube.buildCount(); n != 3 {
		t.Errorf("%d builds after a failed one, want 3 (not retried)", n)
	}

	// Deleted during its build: the build is cancelled, the record goes.
	if err := s2.DeleteOnlineDeployment(ctx, owner, "kep", "red"); err != nil {
		t.Fatal(err)
	}
	d, up = dep("gray", "kep")
	if _, err := s2.CreateOnlineDeployment(ctx, owner, d, up, false); err != nil {
		t.Fatal(err)
	}
	pass(s2)
	if err := s2.DeleteOnlineDeployment(ctx, owner, "kep", "gray"); err != nil {
		t.Fatal(err)
	}
	pass(s2)
	pass(s2)
	if _, err := s2.GetOnlineDeployment(ctx, "kep", "gray"); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("deleted during its build: %v", err)
	}
}
