package online

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

// loadRouter is a router whose load the test sets.
type loadRouter struct {
	routerLog
	load map[string]DeploymentLoad
}

func (r *loadRouter) Load(string) map[string]DeploymentLoad { return r.load }

func autoscaledDoc(t *testing.T, yaml string) *deploymentDoc {
	t.Helper()
	d, err := spec.ParseOnlineDeployment([]byte("name: auto\nendpoint_name: ep-one\ncode_configuration: {code: src, scoring_script: score.py}\n"+yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &deploymentDoc{Spec: d, Generation: 1}
}

// Autoscale's arithmetic: up at once to what the requests in flight and
// waiting need (bounded by max_instances), down only after
// scaleDownDelay below the target, never under min_instances; to zero
// after scale_to_zero_after without a request when min_instances is 0,
// and back to one while a cold start waits.
func TestWantReplicas(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	r := &loadRouter{load: map[string]DeploymentLoad{}}
	s := &Service{cfg: Config{Router: r}, deployCtl: newDeployCtl(t0)}
	since := t0 // when the deployment was made
	want := func(doc *deploymentDoc, set *replicaSet) int {
		return s.wantReplicas("ep-one/auto", doc, set, since, now)
	}

	fixed := autoscaledDoc(t, "instance_count: 3\n")
	if got := want(fixed, &replicaSet{}); got != 3 {
		t.Errorf("scale_settings default: %d, want instance_count 3", got)
	}

	doc := autoscaledDoc(t, "request_settings: {max_concurrent_requests_per_instance: 1}\nscale_settings: {type: target_utilization, min_instances: 1, max_instances: 3, polling_interval: 1, target_utilization_percentage: 70}\n")
	set := &replicaSet{}
	if got := want(doc, set); got != 1 {
		t.Fatalf("at first: %d, want min_instances 1", got)
	}
	// Two requests in flight and one waiting: 3 / 0.7 → 5, bounded by 3;
	// not before the polling interval.
	r.load["auto"] = DeploymentLoad{InFlight: 2, Waiting: 1, LastRequest: now}
	if got := want(doc, set); got != 1 {
		t.Errorf("busy within the polling interval: %d, want still 1", got)
	}
	now = now.Add(time.Second)
	if got := want(doc, set); got != 3 || set.Target == nil || *set.Target != 3 {
		t.Errorf("busy after the polling interval: %d (target %v), want max_instances 3", got, set.Target)
	}
	// Idle: the target stays until scaleDownDelay has passed.
	r.load["auto"] = DeploymentLoad{LastRequest: now}
	now = now.Add(time.Second)
	if got := want(doc, set); got != 3 {
		t.Errorf("idle at once: %d, want 3 kept", got)
	}
	now = now.Add(scaleDownDelay)
	if got := want(doc, set); got != 1 {
		t.Errorf("idle past the delay: %d, want min_instances 1", got)
	}
	// A burst seen between polls counts: the peak, not the last sample.
	r.load["auto"] = DeploymentLoad{InFlight: 2, LastRequest: now}
	want(doc, set)
	r.load["auto"] = DeploymentLoad{LastRequest: now}
	now = now.Add(time.Second)
	if got := want(doc, set); got != 3 {
		t.Errorf("after a burst of 2 between polls: %d, want ceil(2/0.7) = 3", got)
	}

	zero := autoscaledDoc(t, "scale_settings: {type: target_utilization, min_instances: 0, max_instances: 2, scale_to_zero_after: 5}\n")
	// Made on a server up for longer than scale_to_zero_after, and never
	// called: it keeps its replica for scale_to_zero_after from its
	// making, not from the server's start.
	since = now.Add(-time.Second)
	zset := &replicaSet{}
	r.load["auto"] = DeploymentLoad{}
	if got := want(zero, zset); got != 1 {
		t.Errorf("min_instances 0, made a second ago on an old server: %d, want 1", got)
	}
	r.load["auto"] = DeploymentLoad{LastRequest: now}
	if got := want(zero, zset); got != 1 {
		t.Errorf("min_instances 0, just used: %d, want 1", got)
	}
	now = now.Add(5 * time.Second)
	if got := want(zero, zset); got != 0 {
		t.Errorf("min_instances 0, idle for scale_to_zero_after: %d, want 0", got)
	}
	s.deployCtl.demand["ep-one/auto"] = now // a cold start asks
	if got := want(zero, zset); got != 1 {
		t.Errorf("a cold start waiting: %d, want 1", got)
	}
	delete(s.deployCtl.demand, "ep-one/auto")
	r.load["auto"] = DeploymentLoad{Waiting: 1, LastRequest: now.Add(-time.Hour)}
	if got := want(zero, zset); got != 1 {
		t.Errorf("a request waiting: %d, want 1", got)
	}
}

// What a replica runs: Ferry's inference server on the node's address and
// its private socket folder, requiring its secret, the script quoted for
// the shell, AZUREML_MODEL_DIR laid out as Azure lays it out (a real
// folder, not a link), and WORKER_COUNT 1 unless the deployment sets it.
func TestReplicaCommand(t *testing.T) {
	d := autoscaledDoc(t, "").Spec
	d.CodeConfiguration.ScoringScript = "my score's.py"
	cases := []struct {
		name        string
		hasModel    bool
		folder      string
		env         map[string]string
		want, avoid []string
	}{
		{"no model", false, "", nil,
			[]string{`"${{inputs.ferry_inference_server}}/inference_server.py"`, `--script 'my score'\''s.py'`, `--host "${MASTER_ADDR:-127.0.0.1}" --port 0 --unix "$PWD/.ferry-replica/replica.sock" --require-secret`, "WORKER_COUNT=1"},
			[]string{"AZUREML_MODEL_DIR"}},
		{"a model that is a file", true, "", nil, []string{`AZUREML_MODEL_DIR="${{inputs.model}}"`}, []string{".azureml-models"}},
		{"a model that is a folder", true, "model", map[string]string{"WORKER_COUNT": "2"},
			[]string{`mv "${{inputs.model}}" .azureml-models/'model'`, `AZUREML_MODEL_DIR="$PWD/.azureml-models"`},
			[]string{"WORKER_COUNT=1", "ln -s"}},
	}
	for _, c := range cases {
		d.EnvironmentVariables = c.env
		got := replicaCommand(d, c.hasModel, c.folder)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %s\nlacks %s", c.name, got, w)
			}
		}
		for _, a := range c.avoid {
			if strings.Contains(got, a) {
				t.Errorf("%s: %s\nhas %s", c.name, got, a)
			}
		}
	}
}

// An update that changes what a replica runs is a new generation; one of
// the count, scale settings, description or tags alone is not.
func TestRollingChange(t *testing.T) {
	base := func() *deploymentDoc {
		doc := autoscaledDoc(t, "instance_count: 2\nenvironment_variables: {V: a}\n")
		doc.CodeSnapshot = "c1"
		return doc
	}
	for name, change := range map[string]func(*deploymentDoc){
		"instance_count": func(d *deploymentDoc) { d.Spec.InstanceCount = 5 },
		"description":    func(d *deploymentDoc) { d.Spec.Description = "new" },
		"tags":           func(d *deploymentDoc) { d.Spec.Tags = map[string]string{"a": "b"} },
	} {
		next := base()
		change(next)
		if rollingChange(base(), next) {
			t.Errorf("%s alone made a new generation", name)
		}
	}
	for name, change := range map[string]func(*deploymentDoc){
		"an environment variable": func(d *deploymentDoc) { d.Spec.EnvironmentVariables["V"] = "b" },
		"the code":                func(d *deploymentDoc) { d.CodeSnapshot = "c2" },
		"the model":               func(d *deploymentDoc) { d.ModelSnapshot = "m2" },
	} {
		next := base()
		change(next)
		if !rollingChange(base(), next) {
			t.Errorf("%s made no new generation", name)
		}
	}
}

// A replica whose status line shows it on this host (this kernel, and a
// socket that is, seen from here, the one it bound, in a private folder)
// is routed and probed at its Unix socket; the same line from another
// host (another boot id), or with the folder open to others, is reached
// over TCP.
func TestReplicaReachedOverItsSocketOnlyOnThisHost(t *testing.T) {
	sock := filepath.Join(t.TempDir(), ReplicaSocket)
	// Its folder is private, as the replica makes it.
	if err := os.Mkdir(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("needs Linux's boot id: %v", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	// Its worker's own socket, beside it.
	wln, err := net.Listen("unix", sock+".w0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wln.Close() })
	wfi, err := os.Stat(sock + ".w0")
	if err != nil {
		t.Fatal(err)
	}
	wst := wfi.Sys().(*syscall.Stat_t)
	line := fmt.Sprintf(`{"ferry_inference_server": "listening", "address": "10.0.0.7:41234", "pid": 7, "unix": %q, "unix_dev": %d, "unix_ino": %d, "boot_id": %q, "worker_sockets": [{"path": %q, "dev": %d, "ino": %d}]}`,
		sock, st.Dev, st.Ino, strings.TrimSpace(string(boot)), sock+".w0", wst.Dev, wst.Ino)
	here, ok := inferenceserver.ParseStatus([]byte(line))
	if !ok {
		t.Fatalf("not a status line: %s", line)
	}
	var l replicaLive
	l.found(here)
	if got, want := l.url(), "unix:"+sock; got != want {
		t.Errorf("a replica on this host: routed at %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(l.workerURLs()), "[unix:"+sock+".w0]"; got != want {
		t.Errorf("a replica on this host: its workers reached at %s, want %s", got, want)
	}
	elsewhere := here
	elsewhere.BootID = "5b0c2e4e-7d1f-4c39-9a51-another-host"
	l.found(elsewhere)
	if got, want := l.url(), "http://10.0.0.7:41234"; got != want {
		t.Errorf("a replica on another host: routed at %s, want %s", got, want)
	}
	if w := l.workerURLs(); w != nil {
		t.Errorf("a replica on another host: its workers reached at %v, want through its address", w)
	}
	// A socket in a folder other accounts may enter could be another's
	// by the next request: TCP.
	if err := os.Chmod(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l.found(here)
	if got, want := l.url(), "http://10.0.0.7:41234"; got != want {
		t.Errorf("a replica whose socket's folder others may enter: routed at %s, want %s", got, want)
	}
	none := here
	none.Unix, none.UnixDev, none.UnixIno = "", 0, 0
	l.found(none)
	if got, want := l.url(), "http://10.0.0.7:41234"; got != want {
		t.Errorf("a replica with no socket: routed at %s, want %s", got, want)
	}
}

// A chunk of a replica's log wakes the controller only while it still
// looks for the replica's status line in that attempt's log: a serving
// replica ships its access log all the time, and a pass on every chunk
// cost ferry server more CPU than the requests' own routing.
func TestReplicaLogWakesControllerUntilAddressFound(t *testing.T) {
	ctx := context.Background()
	h := workloadtest.NewKeyed(t, 1)
	s, err := New(ctx, h.WS, h.Store, Config{Secrets: h.Key})
	if err != nil {
		t.Fatal(err)
	}
	Register(h.WS, s)
	h.Submit(t, "name: rep\ncommand: 'true'\n")
	h.Pass(t, "dispatch")
	who := auth.Principal{Kind: auth.KindRun, Subject: "rep", Attempt: 1}
	woken := func() bool {
		select {
		case <-s.wake:
			return true
		default:
			return false
		}
	}
	var offset int64
	appendLog := func(line string) {
		t.Helper()
		woken() // what came before
		size, err := h.WS.AppendLog(ctx, who, "rep", 1, 0, offset, []byte(line))
		if err != nil {
			t.Fatal(err)
		}
		offset = size
	}

	appendLog("not a replica\n")
	if woken() {
		t.Error("a chunk of a job that is no replica woke the controller")
	}
	s.deployCtl.mu.Lock()
	l := s.deployCtl.live("rep", "ep/d")
	l.attempt = 1
	s.deployCtl.mu.Unlock()
	appendLog("starting\n")
	if !woken() {
		t.Error("a chunk of a replica whose address is not known yet did not wake the controller")
	}
	s.deployCtl.mu.Lock()
	l.address = "127.0.0.1:1"
	s.deployCtl.mu.Unlock()
	appendLog("GET / 200\n")
	if woken() {
		t.Error("a chunk of a replica whose address is known woke the controller")
	}
	s.deployCtl.mu.Lock()
	l.attempt = 0 // the controller has not read the job's current attempt yet
	s.deployCtl.mu.Unlock()
	appendLog("again\n")
	if !woken() {
		t.Error("a chunk of an attempt the controller has not read did not wake it")
	}
}
