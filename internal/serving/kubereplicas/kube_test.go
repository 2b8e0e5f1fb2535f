package kubereplicas

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/kube"
	"github.com/ferry-ml/ferry/internal/serving/gateway"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// testImage has python3 (scripts/make-base-image.sh makes it).
const testImage = testutil.BaseImage

// scoreScript answers with the VERSION it was started with and its pod.
const scoreScript = `import os, time

def init():
    global version
    version = os.environ.get("VERSION", "unset")
    if os.environ.get("FAIL_INIT"):
        raise ValueError("no model here: " + os.environ["FAIL_INIT"])

def run(raw_data):
    time.sleep(0.005)
    return {"version": version, "pod": os.environ.get("HOSTNAME", "")}
`

// kubeTest is a Client in a namespace of the test's own, deleted (and
// waited for) when the test ends.
func kubeTest(t *testing.T) *Client {
	t.Helper()
	path := testutil.Kube(t)
	testutil.RequireBaseImage(t)
	testutil.KubeImage(t, testImage)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	ns := "ferry-kr-" + hex.EncodeToString(b)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns, err)
			return
		}
		testutil.WaitFor(t, 2*time.Minute, "namespace "+ns+" gone", func() bool {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("waiting for namespace %s to go: %v", ns, err)
			}
			return apierrors.IsNotFound(err)
		})
	})
	return New(cs, ns, slog.New(slog.NewTextHandler(t.Output(), nil)))
}

// loadAverage is the machine's load, for the figures the test logs.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func harnessSpec(t *testing.T, endpoint, deployment string, generation int, env map[string]string) Spec {
	t.Helper()
	h, err := NewHarness(HarnessOptions{
		Endpoint: endpoint, Deployment: deployment, Image: testImage, PullPolicy: corev1.PullNever,
		Code: map[string][]byte{"score.py": []byte(scoreScript)}, ScoringScript: "score.py",
		Env: env, RequestTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	return Spec{
		Endpoint: endpoint, Deployment: deployment, Generation: generation,
		Template: h.Template, ConfigMaps: []corev1.ConfigMap{h.ConfigMap},
		Replicas:  new(int32(1)),
		Readiness: spec.Probe{InitialDelay: &zero, Period: 1, Timeout: 2, FailureThreshold: 3},
		Liveness:  spec.Probe{InitialDelay: new(5), Period: 5, Timeout: 2, FailureThreshold: 3},
		// Ample for the informer's news to reach the gateway on a
		// loaded 2-core machine.
		DrainDelay: 3 * time.Second, RequestTimeout: 5 * time.Second,
	}
}

// replicaFeed routes the replicas WatchReady reports to a gateway and
// keeps the last set for the test.
type replicaFeed struct {
	g       *gateway.Gateway
	mu      sync.Mutex
	current []string
	changes int
}

const testKey = "k8s-test-key"

func (f *replicaFeed) set(urls []string) {
	f.g.Set(gateway.Endpoint{
		Name: "ep", AuthMode: "key", Keys: []string{testKey}, Traffic: map[string]int{"blue": 100},
		Deployments: map[string]gateway.Deployment{"blue": {
			Replicas: urls, RequestTimeout: 10 * time.Second, MaxConcurrent: 8, MaxQueueWait: 5 * time.Second,
		}},
	})
	f.mu.Lock()
	f.current = slices.Clone(urls)
	f.changes++
	f.mu.Unlock()
}

func (f *replicaFeed) replicas() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.current)
}

type answer struct {
	Version string `json:"version"`
	Pod     string `json:"pod"`
}

// score sends one request through the gateway.
func score(client *http.Client, url string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/endpoints/ep/score", strings.NewReader(`{"data": [1]}`))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return answer{}, fmt.Errorf("answer %q: %v", body, err)
	}
	return a, nil
}

func waitState(t *testing.T, c *Client, limit time.Duration, want string, generation int) State {
	t.Helper()
	var st State
	what := fmt.Sprintf("deployment ep/blue %s at generation %d", want, generation)
	testutil.WaitFor(t, limit, what, func() bool {
		var err error
		st, err = c.Status(context.Background(), "ep", "blue")
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if st.State == StateFailed && want != StateFailed {
			t.Fatalf("waiting for %s: deployment failed: %s", what, st.Reason)
		}
		return st.State == want && st.Generation == generation
	})
	return st
}

// TestServeScaleRollDelete runs a deployment's replicas on the test
// cluster: they answer through a real gateway fed by WatchReady; Scale
// takes them 1 → 2 → 1; a rolling update under constant load fails no
// request and both versions answer; Delete leaves nothing behind.
func TestServeScaleRollDelete(t *testing.T) {
	c := kubeTest(t)
	ctx := context.Background()
	feed := &replicaFeed{g: gateway.New(gateway.Options{})}
	srv := httptest.NewServer(feed.g)
	defer srv.Close()
	client := &http.Client{Timeout: 30 * time.Second}

	s := harnessSpec(t, "ep", "blue", 1, map[string]string{"VERSION": "v1"})
	created := time.Now()
	if err := c.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), "ep", "blue") })
	stop, err := c.WatchReady(ctx, "ep", "blue", feed.set)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	// 1. Ready, and answering through the gateway.
	st := waitState(t, c, 3*time.Minute, StateSucceeded, 1)
	testutil.WaitFor(t, 30*time.Second, "one replica routed", func() bool { return len(feed.replicas()) == 1 })
	t.Logf("created → Succeeded and routed in %v: %s, routed %v (load: %s)", time.Since(created).Round(time.Millisecond), st.Reason, feed.replicas(), loadAverage())
	a, err := score(client, srv.URL)
	if err != nil || a.Version != "v1" {
		t.Fatalf("score through the gateway: %+v, %v", a, err)
	}

	// 2. Scale 1 → 2 → 1 through the scale subresource.
	if err := c.Scale(ctx, "ep", "blue", 2); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 2*time.Minute, "two replicas routed", func() bool { return len(feed.replicas()) == 2 })
	if st := waitState(t, c, time.Minute, StateSucceeded, 1); st.Ready != 2 || st.Desired != 2 {
		t.Errorf("after Scale(2): %d of %d ready", st.Ready, st.Desired)
	}
	pods := map[string]bool{}
	for range 40 {
		a, err := score(client, srv.URL)
		if err != nil {
			t.Fatalf("score with 2 replicas: %v", err)
		}
		pods[a.Pod] = true
	}
	if len(pods) != 2 {
		t.Errorf("40 requests over 2 replicas were answered by %v", pods)
	}
	if err := c.Scale(ctx, "ep", "blue", 1); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "one replica routed", func() bool { return len(feed.replicas()) == 1 })
	if st := waitState(t, c, 2*time.Minute, StateSucceeded, 1); st.Desired != 1 {
		t.Errorf("after Scale(1): %d wanted", st.Desired)
	}

	// 3. A rolling update (a changed environment variable) under constant
	// load through the gateway.
	before := feed.replicas()
	var ok, failed atomic.Int64
	var mu sync.Mutex
	versions := map[string]int{}
	var failures []string
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				a, err := score(client, srv.URL)
				mu.Lock()
				if err != nil {
					failed.Add(1)
					failures = append(failures, err.Error())
				} else {
					ok.Add(1)
					versions[a.Version]++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second) // load on the old version first
	s2 := harnessSpec(t, "ep", "blue", 2, map[string]string{"VERSION": "v2"})
	updated := time.Now()
	if err := c.Apply(ctx, s2); err != nil {
		stopLoad()
		wg.Wait()
		t.Fatal(err)
	}
	waitState(t, c, 3*time.Minute, StateSucceeded, 2)
	rolled := time.Since(updated)
	testutil.WaitFor(t, time.Minute, "the new replica alone routed", func() bool {
		r := feed.replicas()
		return len(r) == 1 && !slices.Equal(r, before)
	})
	time.Sleep(time.Second) // load on the new version alone
	stopLoad()
	wg.Wait()
	t.Logf("rolling update under load: update → Succeeded in %v; %d answered (%v), %d failed; routed %v → %v (load: %s)",
		rolled.Round(time.Millisecond), ok.Load(), versions, failed.Load(), before, feed.replicas(), loadAverage())
	if failed.Load() != 0 {
		t.Errorf("%d requests failed during the rolling update, the first: %s", failed.Load(), failures[0])
	}
	if versions["v1"] == 0 || versions["v2"] == 0 {
		t.Errorf("answers by version %v: want both v1 and v2", versions)
	}
	if a, err := score(client, srv.URL); err != nil || a.Version != "v2" {
		t.Errorf("after the update: %+v, %v; want v2", a, err)
	}

	// 4. Delete leaves nothing behind, and the gateway is told.
	if err := c.Delete(ctx, "ep", "blue"); err != nil {
		t.Fatal(err)
	}
	var left []string
	testutil.WaitFor(t, 2*time.Minute, "every object of ep/blue gone", func() bool {
		var err error
		if left, err = c.Remaining(ctx, "ep", "blue"); err != nil {
			t.Fatalf("waiting for every object of ep/blue gone: %v", err)
		}
		return len(left) == 0
	})
	testutil.WaitFor(t, 30*time.Second, "no replica routed", func() bool { return len(feed.replicas()) == 0 })
	if _, err := c.Status(ctx, "ep", "blue"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Status after Delete: %v, want ErrNotFound", err)
	}
}

// TestFailedDeployments: a scoring script whose init() raises makes the
// deployment Failed with the traceback (from the pod's termination
// message, or from the container's log when the template keeps its own
// terminationMessagePolicy); an image the cluster cannot have makes it
// Failed naming the image; a pod no node can take keeps the deployment
// Creating with the scheduler's message.
func TestFailedDeployments(t *testing.T) {
	c := kubeTest(t)
	ctx := context.Background()
	trace := []string{"exited with status 3", "Traceback (most recent call last):", "in init", "ValueError: no model here: weights.json is missing"}
	failInit := map[string]string{"FAIL_INIT": "weights.json is missing"}
	cases := []struct {
		deployment string
		env        map[string]string
		change     func(*corev1.Container)
		state      string
		want       []string
	}{
		{"blue", failInit, nil, StateFailed, trace},
		{"logs", failInit, func(c *corev1.Container) { c.TerminationMessagePolicy = corev1.TerminationMessageReadFile }, StateFailed, trace},
		{"green", nil, func(c *corev1.Container) { c.Image = "ferry-no-such-image:1" }, StateFailed,
			[]string{"image ferry-no-such-image:1", "ErrImageNeverPull"}},
		{"big", nil, func(c *corev1.Container) {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("512")}
		}, StateCreating, []string{"waits for a node: 0/1 nodes are available: 1 Insufficient cpu"}},
	}
	for _, k := range cases {
		s := harnessSpec(t, "ep", k.deployment, 1, k.env)
		if k.change != nil {
			k.change(&s.Template.Spec.Containers[0])
		}
		if err := c.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := c.Delete(ctx, "ep", k.deployment); err != nil {
				t.Error(err)
			}
			testutil.WaitFor(t, 2*time.Minute, "ep/"+k.deployment+" gone", func() bool {
				left, err := c.Remaining(ctx, "ep", k.deployment)
				if err != nil {
					t.Fatalf("waiting for ep/%s gone: %v", k.deployment, err)
				}
				return len(left) == 0
			})
		}()
	}
	for _, k := range cases {
		var st State
		what := fmt.Sprintf("ep/%s %s with a reason naming %q", k.deployment, k.state, k.want[0])
		testutil.WaitFor(t, 3*time.Minute, what, func() bool {
			var err error
			if st, err = c.Status(ctx, "ep", k.deployment); err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			return st.State == k.state && strings.Contains(st.Reason, k.want[0])
		})
		t.Logf("%s: %s: %s", k.deployment, st.State, st.Reason)
		for _, want := range k.want {
			if !strings.Contains(st.Reason, want) {
				t.Errorf("%s: reason %q lacks %q", k.deployment, st.Reason, want)
			}
		}
	}
}

// TestOldConfigMapsPruned: each version of the code is a ConfigMap of its
// own; those of versions the Deployment no longer keeps (beyond its
// revision history) are deleted by the next Apply, and the current one
// stays. Zero replicas: no pod needs to start for the ReplicaSets to be
// made.
func TestOldConfigMapsPruned(t *testing.T) {
	c := kubeTest(t)
	ctx := context.Background()
	t.Cleanup(func() { _ = c.Delete(context.Background(), "ep", "blue") })
	apply := func(generation int) Spec {
		t.Helper()
		h, err := NewHarness(HarnessOptions{
			Endpoint: "ep", Deployment: "blue", Image: testImage, PullPolicy: corev1.PullNever,
			Code: map[string][]byte{"score.py": fmt.Appendf(nil, "%s\n# version %d\n", scoreScript, generation)}, ScoringScript: "score.py",
		})
		if err != nil {
			t.Fatal(err)
		}
		s := Spec{Endpoint: "ep", Deployment: "blue", Generation: generation, Replicas: new(int32(0)),
			Template: h.Template, ConfigMaps: []corev1.ConfigMap{h.ConfigMap}}
		if err := c.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, time.Minute, fmt.Sprintf("generation %d rolled out", generation), func() bool {
			st, err := c.Status(ctx, "ep", "blue")
			if err != nil {
				t.Fatalf("waiting for generation %d rolled out: %v", generation, err)
			}
			return st.State == StateSucceeded && st.Generation == generation
		})
		return s
	}
	configMaps := func() []string {
		t.Helper()
		left, err := c.Remaining(ctx, "ep", "blue")
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(left, func(s string) bool { return !strings.HasPrefix(s, "configmap/") })
	}
	var last Spec
	for g := 1; g <= revisionHistory+3; g++ {
		last = apply(g)
	}
	// The controller trims the ReplicaSets after the rollout; the Apply
	// after that prunes their ConfigMaps.
	testutil.WaitFor(t, time.Minute, "old ReplicaSets trimmed to the history", func() bool {
		left, err := c.Remaining(ctx, "ep", "blue")
		if err != nil {
			t.Fatalf("waiting for old ReplicaSets trimmed to the history: %v", err)
		}
		n := 0
		for _, s := range left {
			if strings.HasPrefix(s, "replicaset/") {
				n++
			}
		}
		return n <= revisionHistory+1
	})
	if err := c.Apply(ctx, last); err != nil {
		t.Fatal(err)
	}
	cms := configMaps()
	t.Logf("after %d versions: %v", revisionHistory+3, cms)
	if len(cms) > revisionHistory+1 || !slices.Contains(cms, "configmap/"+last.ConfigMaps[0].Name) {
		t.Errorf("ConfigMaps left %v: want at most %d, the current %s among them", cms, revisionHistory+1, last.ConfigMaps[0].Name)
	}
}

// TestSecretsOwnedUpdatedDeleted: a Spec's Secret (an image pull Secret)
// is made before the Deployment and then owned by it, a new content
// replaces the old under its name, a Spec without it deletes it, and
// Delete leaves none (Remaining lists them until then).
func TestSecretsOwnedUpdatedDeleted(t *testing.T) {
	c := kubeTest(t)
	ctx := context.Background()
	t.Cleanup(func() { _ = c.Delete(context.Background(), "ep", "blue") })
	base := harnessSpec(t, "ep", "blue", 1, nil)
	base.Replicas = new(int32(0))
	secrets := c.cs.CoreV1().Secrets(c.ns)
	pull := func(password string) corev1.Secret {
		return corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ObjectName("ep", "blue") + "-pull"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{"r:5000":{"username":"u","password":%q}}}`, password)}}
	}
	apply := func(s Spec) {
		t.Helper()
		if err := c.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	s := base
	s.Secrets = []corev1.Secret{pull("one")}
	apply(s)
	dep, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, ObjectName("ep", "blue"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := secrets.Get(ctx, s.Secrets[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != dep.UID || got.Labels[LabelReplicasOf] != ObjectName("ep", "blue") {
		t.Errorf("secret's owners %+v, labels %v; want the Deployment %s and the deployment's labels", got.OwnerReferences, got.Labels, dep.UID)
	}
	s.Secrets = []corev1.Secret{pull("two")}
	apply(s)
	if got, err := secrets.Get(ctx, s.Secrets[0].Name, metav1.GetOptions{}); err != nil || !strings.Contains(string(got.Data[corev1.DockerConfigJsonKey]), `"two"`) {
		t.Errorf("after a new password: %v %s", err, got.Data[corev1.DockerConfigJsonKey])
	}
	apply(base)
	if _, err := secrets.Get(ctx, s.Secrets[0].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Spec without the Secret left it: %v", err)
	}
	apply(s)
	if left, err := c.Remaining(ctx, "ep", "blue"); err != nil || !slices.Contains(left, "secret/"+s.Secrets[0].Name) {
		t.Errorf("Remaining %v %v; want the Secret among them", left, err)
	}
	if err := c.Delete(ctx, "ep", "blue"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "nothing left", func() bool {
		left, err := c.Remaining(ctx, "ep", "blue")
		if err != nil {
			t.Fatalf("waiting for nothing left: %v", err)
		}
		return len(left) == 0
	})
}
