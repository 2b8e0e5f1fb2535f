package online

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

// recordingKube is a KubeReplicas that records what the controller asks
// of it and says every applied generation has all its replicas ready.
type recordingKube struct {
	mu       sync.Mutex
	calls    []string
	applied  KubeDeployment
	watching int
	objects  bool
}

func (k *recordingKube) log(c string) { k.mu.Lock(); k.calls = append(k.calls, c); k.mu.Unlock() }

func (k *recordingKube) Apply(_ context.Context, d KubeDeployment) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, "apply")
	k.applied, k.objects = d, true
	return nil
}

func (k *recordingKube) Scale(_ context.Context, _ KubeTarget, _, _ string, n int) error {
	k.log("scale")
	k.mu.Lock()
	k.applied.Replicas = &n
	k.mu.Unlock()
	return nil
}

func (k *recordingKube) Status(context.Context, KubeTarget, string, string) (KubeState, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return KubeState{State: apitypes.DeploymentSucceeded, Generation: k.applied.Generation, Desired: *k.applied.Replicas, Ready: *k.applied.Replicas}, nil
}

func (k *recordingKube) WatchReady(_ context.Context, _ KubeTarget, _, _ string, onChange func([]string)) (func(), error) {
	k.mu.Lock()
	k.watching++
	k.mu.Unlock()
	onChange([]string{"http://10.0.0.1:5001"})
	return func() { k.mu.Lock(); k.watching--; k.mu.Unlock() }, nil
}

func (k *recordingKube) Delete(context.Context, KubeTarget, string, string) error {
	k.log("delete")
	k.mu.Lock()
	k.objects = false
	k.mu.Unlock()
	return nil
}

func (k *recordingKube) Remaining(context.Context, KubeTarget, string, string) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.objects {
		return []string{"Deployment/x"}, nil
	}
	return nil, nil
}

// openOnline makes the online endpoints of h's workspace, on kube,
// registered, as a starting server does.
func openOnline(t *testing.T, h *workloadtest.Keyed, kube KubeReplicas) *Service {
	t.Helper()
	s, err := New(context.Background(), h.WS, h.Store, Config{Secrets: h.Key, KubeReplicas: kube, Log: h.Log})
	if err != nil {
		t.Fatal(err)
	}
	Register(h.WS, s)
	return s
}

// The controller's branch for an endpoint on a kubernetes compute:
// create applies with instance_count, a count change scales without a
// new template, a new Service on the same store (a restart) applies the
// same generation again and watches again, delete deletes and forgets;
// the ready pods the watch reports are routed. A deployment on an
// endpoint of the other kind is refused.
func TestKubernetesDeploymentController(t *testing.T) {
	ctx := context.Background()
	h := workloadtest.NewKeyed(t, 1)
	kube := &recordingKube{}
	s := openOnline(t, h, kube)
	c, err := spec.ParseCompute([]byte("name: k8s\ntype: kubernetes\nnamespace: ns\nkubeconfig_content: 'apiVersion: v1'\nimage: img:1\n" +
		"instance_types:\n  small:\n    resources:\n      requests: {cpu: 100m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WS.CreateCompute(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateOnlineEndpoint(ctx, owner, &spec.OnlineEndpoint{Name: "kep", Compute: "azureml:k8s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateOnlineEndpoint(ctx, owner, &spec.OnlineEndpoint{Name: "bad", Compute: "azureml:nope"}); apperr.CodeOf(err) != apperr.CodeInvalid {
		t.Errorf("an endpoint on a compute that does not exist: %v", err)
	}
	_, code := h.PutFile(t, "def init(): pass\ndef run(x): return x\n")
	dep := func(n int) *spec.OnlineDeployment {
		return &spec.OnlineDeployment{Name: "blue", EndpointName: "kep", InstanceType: "small", InstanceCount: n,
			CodeConfiguration: &spec.CodeConfiguration{Code: "code", ScoringScript: "f.txt"}}
	}
	local := dep(1)
	if _, err := s.CreateOnlineDeployment(ctx, owner, local, apitypes.DeploymentUploads{CodeSnapshot: code}, true); apperr.CodeOf(err) != apperr.CodeInvalid {
		t.Errorf("--local on a kubernetes endpoint: %v", err)
	}
	if _, err := s.CreateOnlineDeployment(ctx, owner, dep(2), apitypes.DeploymentUploads{CodeSnapshot: code}, false); err != nil {
		t.Fatal(err)
	}
	pass := func(s *Service) {
		t.Helper()
		if err := s.reconcileDeployments(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pass(s)
	d, err := s.GetOnlineDeployment(ctx, "kep", "blue")
	if err != nil {
		t.Fatal(err)
	}
	if d.ProvisioningState != apitypes.DeploymentSucceeded || d.Compute != "k8s" || *kube.applied.Replicas != 2 || kube.applied.Image != "img:1" ||
		kube.applied.InstanceType.Requests["cpu"] != "100m" || string(kube.applied.Code["f.txt"]) == "" || kube.applied.Target.Namespace != "ns" {
		t.Fatalf("after create: %+v, applied %+v", d, kube.applied)
	}
	routed, err := s.routedDeployments(ctx, "kep")
	if err != nil {
		t.Fatal(err)
	}
	if got := routed["blue"].Replicas; !slices.Equal(got, []string{"http://10.0.0.1:5001"}) {
		t.Errorf("routed %v", got)
	}
	// The pods get the replicas' secret, and the gateway sends it to them.
	secret := kube.applied.ReplicaSecret
	if len(secret.Reveal()) < 40 || routed["blue"].Secrets["http://10.0.0.1:5001"] != secret {
		t.Errorf("applied with a secret of %d bytes; routed with %v", len(secret.Reveal()), routed["blue"].Secrets)
	}
	if _, err := s.UpdateOnlineDeployment(ctx, owner, dep(3), DeploymentChange{Uploads: apitypes.DeploymentUploads{CodeSnapshot: code}}); err != nil {
		t.Fatal(err)
	}
	pass(s)
	if !slices.Equal(kube.calls, []string{"apply", "scale"}) || *kube.applied.Replicas != 3 || kube.applied.Generation != 1 {
		t.Errorf("a count change: calls %v, replicas %d, generation %d", kube.calls, *kube.applied.Replicas, kube.applied.Generation)
	}

	// A managedOnlineDeployment beside blue runs off the cluster (here
	// --local, on this machine); blue cannot become one by an update.
	green := dep(1)
	green.Name, green.InstanceType = "green", ""
	green.Schema = "https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json"
	g, err := s.CreateOnlineDeployment(ctx, owner, green, apitypes.DeploymentUploads{CodeSnapshot: code}, true)
	if err != nil || g.Compute != "local" {
		t.Fatalf("a managedOnlineDeployment on a kubernetes endpoint: %+v, %v", g, err)
	}
	toManaged := dep(3)
	toManaged.Schema, toManaged.InstanceType = green.Schema, "Standard_DS1_v2"
	if _, err := s.UpdateOnlineDeployment(ctx, owner, toManaged, DeploymentChange{Uploads: apitypes.DeploymentUploads{CodeSnapshot: code}}); apperr.CodeOf(err) != apperr.CodeInvalid || !strings.Contains(err.Error(), "$schema") {
		t.Errorf("an update moving blue off the cluster: %v", err)
	}
	pass(s)
	if !slices.Equal(kube.calls, []string{"apply", "scale"}) {
		t.Errorf("the cluster was asked %v for a managed deployment", kube.calls)
	}
	if err := s.DeleteOnlineDeployment(ctx, owner, "kep", "green"); err != nil {
		t.Fatal(err)
	}

	// A restart: a second Service on the same store.
	h.Restart(t)
	s2 := openOnline(t, h, kube)
	pass(s2)
	if kube.watching != 2 || kube.calls[len(kube.calls)-1] != "apply" || kube.applied.Generation != 1 {
		t.Errorf("after a restart: watching %d, calls %v", kube.watching, kube.calls)
	}
	if kube.applied.ReplicaSecret != secret {
		t.Error("a restarted server applies another replica secret: the running pods would refuse its gateway")
	}
	if err := s2.DeleteOnlineDeployment(ctx, owner, "kep", "blue"); err != nil {
		t.Fatal(err)
	}
	pass(s2)
	if _, err := s2.GetOnlineDeployment(ctx, "kep", "blue"); apperr.CodeOf(err) != apperr.CodeNotFound {
		t.Errorf("after delete: %v (calls %v)", err, kube.calls)
	}
	if kube.watching != 1 { // the first "server"'s watch is the one left
		t.Errorf("after delete: %d watches left", kube.watching)
	}
	// Made again under the same name, it has a secret of its own.
	if _, err := s2.CreateOnlineDeployment(ctx, owner, dep(1), apitypes.DeploymentUploads{CodeSnapshot: code}, false); err != nil {
		t.Fatal(err)
	}
	pass(s2)
	if again := kube.applied.ReplicaSecret; again == "" || again == secret {
		t.Errorf("a deployment made again under its old name: its secret is empty or the old one (%t)", again == secret)
	}
}
