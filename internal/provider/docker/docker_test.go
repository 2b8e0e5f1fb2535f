package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/testutil"
)

const secret = "s3cret-join-token-value"

func TestRewriteServer(t *testing.T) {
	const gw = "172.18.0.1"
	for _, tc := range []struct {
		name    string
		in      []string
		gateway string
		want    []string
		wantErr string
	}{
		{name: "loopback IPv4", in: []string{"agent", "--server", "http://127.0.0.1:8580", "--name", "n"}, gateway: gw,
			want: []string{"agent", "--server", "http://172.18.0.1:8580", "--name", "n"}},
		{name: "equals form", in: []string{"agent", "--server=http://127.0.0.1:8580"}, gateway: gw,
			want: []string{"agent", "--server=http://172.18.0.1:8580"}},
		{name: "localhost keeps scheme and path", in: []string{"--server", "https://LocalHost:9/base/"}, gateway: gw,
			want: []string{"--server", "https://172.18.0.1:9/base/"}},
		{name: "name under .localhost", in: []string{"--server", "http://ferry.localhost:1"}, gateway: gw,
			want: []string{"--server", "http://172.18.0.1:1"}},
		{name: "other loopback", in: []string{"--server", "http://127.1.2.3:1"}, gateway: gw,
			want: []string{"--server", "http://172.18.0.1:1"}},
		{name: "IPv6 loopback", in: []string{"--server", "http://[::1]:8580"}, gateway: gw,
			want: []string{"--server", "http://172.18.0.1:8580"}},
		{name: "unspecified", in: []string{"--server", "http://0.0.0.0:8580"}, gateway: gw,
			want: []string{"--server", "http://172.18.0.1:8580"}},
		{name: "no port", in: []string{"--server", "http://localhost"}, gateway: gw,
			want: []string{"--server", "http://172.18.0.1"}},
		{name: "IPv6 gateway", in: []string{"--server", "http://localhost:1"}, gateway: "fd00::1",
			want: []string{"--server", "http://[fd00::1]:1"}},
		{name: "IPv6 gateway, no port", in: []string{"--server", "http://localhost"}, gateway: "fd00::1",
			want: []string{"--server", "http://[fd00::1]"}},
		{name: "routable left alone", in: []string{"--server", "https://ferry.example:8443"}, gateway: gw,
			want: []string{"--server", "https://ferry.example:8443"}},
		{name: "routable needs no gateway", in: []string{"--server", "http://10.0.0.5:1"},
			want: []string{"--server", "http://10.0.0.5:1"}},
		{name: "no --server", in: []string{"agent", "--name", "n"}, gateway: gw, want: []string{"agent", "--name", "n"}},
		{name: "loopback without gateway", in: []string{"--server", "http://127.0.0.1:1"}, wantErr: "loopback"},
		{name: "not a URL", in: []string{"--server", "127.0.0.1:1"}, gateway: gw, wantErr: "not a URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := slices.Clone(tc.in)
			got, err := RewriteServer(tc.in, tc.gateway)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, ErrNoGateway) != (tc.gateway == "") {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("args (-want +got):\n%s", d)
			}
			if d := cmp.Diff(orig, tc.in); d != "" {
				t.Errorf("the input changed (-before +after):\n%s", d)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	env := []string{"FERRY_JOIN_TOKEN=" + secret, "EMPTY="}
	plain := errors.New("no secret here")
	if got := redact(plain, env); got != plain {
		t.Errorf("an error without a secret was replaced: %v", got)
	}
	got := redact(errors.Join(plain, errors.New("token "+secret)), env)
	if strings.Contains(got.Error(), secret) || !strings.Contains(got.Error(), "token [redacted]") {
		t.Errorf("redact = %q", got)
	}
	if errors.Is(got, plain) {
		t.Error("a redacted error still wraps the one with the secret")
	}
}

func TestContainerName(t *testing.T) {
	if got, want := ContainerName("cpu cluster", "n/1"), "ferry-node-cpu-cluster-n-1"; got != want {
		t.Errorf("ContainerName = %q, want %q", got, want)
	}
	if got := hostname("_a.b_" + strings.Repeat("x", 80)); len(got) > 63 || strings.ContainsAny(got, "._") || got[0] == '-' {
		t.Errorf("hostname = %q", got)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	exe := fakeAgent(t)
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "no exe", cfg: Config{}, wantErr: "Exe"},
		{name: "missing exe", cfg: Config{Exe: filepath.Join(dir, "nope")}, wantErr: "Exe"},
		{name: "exe is a folder", cfg: Config{Exe: dir}, wantErr: "not a file"},
		{name: "one part", cfg: Config{Exe: exe, Mounts: []string{dir}}, wantErr: "Mounts[0]"},
		{name: "too many parts", cfg: Config{Exe: exe, Mounts: []string{dir + ":/data:ro:x"}}, wantErr: "HOST:CONTAINER"},
		{name: "bad option", cfg: Config{Exe: exe, Mounts: []string{dir + ":/data:rx"}}, wantErr: `option "rx"`},
		{name: "relative host", cfg: Config{Exe: exe, Mounts: []string{"data:/data"}}, wantErr: "absolute"},
		{name: "relative container", cfg: Config{Exe: exe, Mounts: []string{dir + ":data"}}, wantErr: "absolute"},
		{name: "missing host", cfg: Config{Exe: exe, Mounts: []string{dir + "/nope:/data"}}, wantErr: "host path"},
		{name: "over the root", cfg: Config{Exe: exe, Mounts: []string{dir + ":/"}}, wantErr: "cannot mount over"},
		{name: "over the node dir", cfg: Config{Exe: exe, Mounts: []string{dir + ":" + NodeDir + "/"}}, wantErr: "cannot mount over"},
		{name: "over the binary", cfg: Config{Exe: exe, Mounts: []string{exe + ":" + ExePath}}, wantErr: "already mounted"},
		{name: "twice", cfg: Config{Exe: exe, Mounts: []string{dir + ":/d", dir + ":/d:ro"}}, wantErr: "Mounts[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err == nil {
				p.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// fakeAgent copies testdata/fake-agent.sh to a temporary folder, executable.
func fakeAgent(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "fake-agent.sh"))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "ferry")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// env is a test's corner of the engine: a network and a pool of its own,
// removed with whatever containers carry the pool's label when the test
// ends, a folder that nodes see at /out, and a fake agent.
type env struct {
	api     *client.Client
	network string
	pool    string
	out     string
	cfg     Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testutil.RequireBaseImage(t)
	api := testutil.RequireDocker(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	e := &env{api: api, network: "ferry-test-" + suffix, pool: "pool" + suffix, out: t.TempDir()}
	e.cfg = Config{Image: testutil.BaseImage, Network: e.network, Exe: fakeAgent(t), Mounts: []string{e.out + ":/out"}, Grace: time.Second}
	t.Cleanup(func() {
		ctx := context.Background()
		cs, err := api.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", LabelPool+"="+e.pool))})
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, c := range cs {
			if err := api.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		_ = api.NetworkRemove(ctx, e.network) // absent when the test never launched
	})
	return e
}

func (e *env) provider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// listen starts an HTTP server on every address of this host, as a Ferry
// server that nodes reach must, and counts the pings it gets.
func listen(t *testing.T) (port string, pings *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	pings = new(atomic.Int32)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ping" {
			pings.Add(1)
			_, _ = w.Write([]byte("pong"))
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return port, pings
}

func request(pool, name, port string) provider.LaunchRequest {
	return provider.LaunchRequest{Pool: pool, Name: name, Size: "Standard_DS3_v2",
		AgentArgs: []string{"agent", "--server", "http://127.0.0.1:" + port, "--name", name},
		AgentEnv:  []string{"FERRY_JOIN_TOKEN=" + secret, "FERRY_TEST=on-node"}}
}

// waitFile waits for a file that a node writes, for at most a minute.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		select {
		case <-deadline:
			t.Fatalf("%s did not appear", path)
		case <-tick.C:
		}
	}
}

func TestLaunchListTerminate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := e.provider(t, e.cfg)
	port, pings := listen(t)

	// Two at once: the first launches on an engine without the network
	// race to make it.
	names := []string{"n1", "n2"}
	launched := make([]provider.Machine, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { launched[i], errs[i] = p.Launch(ctx, request(e.pool, name, port)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n, err := e.api.NetworkInspect(ctx, e.network, network.InspectOptions{})
	if err != nil {
		t.Fatalf("the provider made no network %s: %v", e.network, err)
	}
	gw := n.IPAM.Config[0].Gateway

	if launched[0].Address == "" || launched[0].Address == launched[1].Address || net.ParseIP(launched[0].Address) == nil {
		t.Errorf("addresses %q and %q: want two distinct IPs", launched[0].Address, launched[1].Address)
	}
	for i, m := range launched {
		if want := ContainerName(e.pool, names[i]); m.ID != want || m.Pool != e.pool || m.State != provider.StateRunning {
			t.Errorf("launched %+v, want ID %s in pool %s, running", m, want, e.pool)
		}
	}

	// What each agent got: the rewritten --server, which reaches this
	// host, its --dir, and the token in its environment only.
	for _, name := range names {
		reach := waitFile(t, filepath.Join(e.out, name+".reach"))
		if strings.TrimSpace(reach) != "pong" {
			t.Errorf("node %s could not reach the server through the gateway: %s", name, reach)
		}
		args := strings.Split(strings.TrimSpace(waitFile(t, filepath.Join(e.out, name+".args"))), "\n")
		want := []string{"agent", "--server", "http://" + gw + ":" + port, "--name", name, "--dir", NodeDir}
		if d := cmp.Diff(want, args); d != "" {
			t.Errorf("node %s agent args (-want +got):\n%s", name, d)
		}
		if env := waitFile(t, filepath.Join(e.out, name+".env")); !strings.Contains(env, "FERRY_JOIN_TOKEN="+secret+"\n") {
			t.Errorf("node %s has no join token in its environment", name)
		}
	}
	if got := pings.Load(); got != 2 {
		t.Errorf("the server got %d pings, want 2", got)
	}
	for _, m := range launched {
		info, err := e.api.ContainerInspect(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		visible := strings.Join(slices.Concat(info.Config.Entrypoint, info.Config.Cmd, info.Args, []string{info.Path}), " ")
		for k, v := range info.Config.Labels {
			visible += " " + k + "=" + v
		}
		if strings.Contains(visible, secret) {
			t.Errorf("%s: the join token is in its command line or labels: %s", m.ID, visible)
		}
		if info.Config.Hostname != info.Config.Labels[LabelNode] || info.HostConfig.Init == nil || !*info.HostConfig.Init ||
			info.HostConfig.RestartPolicy.Name != container.RestartPolicyDisabled {
			t.Errorf("%s: hostname %q, init %v, restart %q; want the node name, init, no restarts",
				m.ID, info.Config.Hostname, info.HostConfig.Init, info.HostConfig.RestartPolicy.Name)
		}
	}

	list := func(p *Provider, pool string) []provider.Machine {
		t.Helper()
		ms, err := p.List(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	if d := cmp.Diff(launched, list(p, e.pool)); d != "" {
		t.Errorf("List (-launched +listed):\n%s", d)
	}
	all := list(p, "")
	for _, m := range launched {
		if !slices.ContainsFunc(all, func(o provider.Machine) bool { return o.ID == m.ID }) {
			t.Errorf("List of every pool lacks %s", m.ID)
		}
	}
	// The engine holds the state: a new provider sees the same machines.
	if d := cmp.Diff(launched, list(e.provider(t, e.cfg), e.pool)); d != "" {
		t.Errorf("a new provider's List (-launched +listed):\n%s", d)
	}
	if got, err := p.Get(ctx, launched[0].ID); err != nil || !cmp.Equal(got, launched[0]) {
		t.Errorf("Get = %+v, %v; want %+v", got, err, launched[0])
	}
	if _, err := p.Get(ctx, ContainerName(e.pool, "nobody")); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get of a machine never launched: %v, want ErrNotFound", err)
	}
	if _, err := p.Launch(ctx, request(e.pool, "n1", port)); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second launch of n1: %v, want 'already exists'", err)
	}

	// A node whose container stopped is listed as stopped, without an
	// address, until it is terminated.
	zero := 0
	if err := e.api.ContainerStop(ctx, launched[1].ID, container.StopOptions{Timeout: &zero}); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Get(ctx, launched[1].ID); err != nil || got.State != provider.StateStopped || got.Address != "" {
		t.Errorf("after a stop, Get = %+v, %v; want stopped, no address", got, err)
	}

	for _, m := range launched {
		for range 2 { // the second time, it is gone already
			if err := p.Terminate(ctx, m.ID); err != nil {
				t.Fatalf("Terminate %s: %v", m.ID, err)
			}
		}
		if _, err := e.api.ContainerInspect(ctx, m.ID); err == nil {
			t.Errorf("Terminate left container %s", m.ID)
		}
	}
	if ms := list(p, e.pool); len(ms) != 0 {
		t.Errorf("after Terminate, List = %+v", ms)
	}
}

func TestFailedLaunchLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	port, _ := listen(t)

	cfg := e.cfg
	cfg.Image = "ferry-test-no-such-image:nope"
	_, err := e.provider(t, cfg).Launch(ctx, request(e.pool, "bad-image", port))
	if err == nil || !strings.Contains(err.Error(), cfg.Image) || !strings.Contains(err.Error(), "make-node-image.sh") {
		t.Errorf("launch from a missing image: %v, want an error naming the image and how to make one", err)
	}
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("the error holds the join token: %v", err)
	}

	// A failure after the container is made: GPUs, where the engine has no
	// NVIDIA runtime, fail at start, and the container must go.
	p := e.provider(t, e.cfg)
	r := request(e.pool, "gpu", port)
	r.GPUs = 1
	m, err := p.Launch(ctx, r)
	if err == nil {
		t.Logf("this engine runs GPU containers; %s launched", m.ID)
		if err := p.Terminate(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	} else if strings.Contains(err.Error(), secret) {
		t.Errorf("the error holds the join token: %v", err)
	}

	if ms, err := p.List(ctx, e.pool); err != nil || len(ms) != 0 {
		t.Errorf("after failed launches, List = %+v, %v; want nothing", ms, err)
	}
	cs, err := e.api.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("name", ContainerName(e.pool, "")))})
	if err != nil || len(cs) != 0 {
		t.Errorf("containers left after failed launches: %+v, %v", cs, err)
	}
}

func TestTerminateLeavesOthersAlone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := e.provider(t, e.cfg)
	if err := p.Terminate(ctx, "not-ours"); err == nil {
		t.Error("Terminate of an ID the provider cannot have made: no error")
	}
	// A container with a machine's name but not made by the provider.
	id := ContainerName(e.pool, "foreign")
	c, err := e.api.ContainerCreate(ctx, &container.Config{Image: testutil.BaseImage, Cmd: []string{"true"}}, nil, nil, nil, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.api.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
	if err := p.Terminate(ctx, id); err != nil {
		t.Fatalf("Terminate of a foreign container: %v, want nil (no such machine)", err)
	}
	if _, err := e.api.ContainerInspect(ctx, c.ID); err != nil {
		t.Errorf("Terminate removed a container the provider did not make: %v", err)
	}
}
