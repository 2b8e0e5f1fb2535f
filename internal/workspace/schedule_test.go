package workspace

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
)

// schedProvider makes machines on paper: the provider interface is a
// boundary Ferry owns, and this test is about the instance's schedules.
type schedProvider struct {
	mu         sync.Mutex
	launched   []string
	terminated []string // machine IDs, in the order they were terminated
	// failTerminate is how many Terminate calls fail before one works, as
	// with a provider that is slow or down for a while; failLaunch is the
	// same for Launch.
	failTerminate, failLaunch int
	launchCalls               int // Launch calls, failed ones too
}

func (p *schedProvider) Type() string { return "paper" }
func (p *schedProvider) Launch(_ context.Context, r provider.LaunchRequest) (provider.Machine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.launchCalls++
	if p.failLaunch > 0 {
		p.failLaunch--
		return provider.Machine{}, errors.New("no capacity in the region for a moment")
	}
	p.launched = append(p.launched, r.Name)
	return provider.Machine{ID: r.Name, Pool: r.Pool, State: provider.StateRunning}, nil
}
func (p *schedProvider) List(context.Context, string) ([]provider.Machine, error) { return nil, nil }
func (p *schedProvider) Terminate(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failTerminate > 0 {
		p.failTerminate--
		return errors.New("the cloud is down for a moment")
	}
	p.terminated = append(p.terminated, id)
	return nil
}

// openStore opens a SQLite store in dir, closed when the test ends.
func openStore(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newPoolService is a workspace on st with node provider prov (mostly the
// paper one) and clock clk, as a server (re)started on the same data would be.
func newPoolService(t *testing.T, st store.Store, dir string, prov provider.Provider, clk *clock) *Service {
	t.Helper()
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Config{
		PoolTypes: testPoolTypes,
		Store:     st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
		Targets:   func(*spec.Compute) (compute.Target, error) { return &fakeTarget{capacity: 1}, nil },
		Providers: func(*spec.Compute) (provider.Provider, error) { return prov, nil },
		Now:       clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// joinAll joins every launched node that has not joined, as its agent would.
func joinAll(t *testing.T, s *Service) {
	t.Helper()
	nodes, err := s.st.ListNodes(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.State == NodeProvisioning {
			if _, err := s.Nodes().JoinNode(context.Background(), auth.Principal{Kind: KindJoin, Subject: n.Name}, nodeproto.JoinRequest{Name: n.Name}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// pass is one pool loop pass, after a heartbeat from every joined node.
func pass(t *testing.T, s *Service) {
	t.Helper()
	nodes, err := s.st.ListNodes(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.State == NodeIdle || n.State == NodeBusy {
			if _, err := s.Nodes().NodeHeartbeat(context.Background(), auth.Principal{Kind: KindNode, Subject: n.Name}, n.Name, nodeproto.Heartbeat{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.pools.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func computeState(t *testing.T, s *Service, name string) string {
	t.Helper()
	c, err := s.GetCompute(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return c.State
}

// A schedule's occurrence fires once, even across a server restart: an
// instance stopped at 18:00 and started again by hand is not stopped again
// by the same 18:00 occurrence when the server restarts at 18:02.
func TestInstanceScheduleFiresOnceAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	// 17:59 in New York is 22:59 UTC in January.
	clk := &clock{now: time.Date(2026, 1, 5, 22, 59, 0, 0, time.UTC)}
	prov := &schedProvider{}
	s := newPoolService(t, st, dir, prov, clk)
	ctx := context.Background()
	c := &spec.Compute{Name: "eve-box", Type: "computeinstance", Size: "Standard_DS1_v2", Schedules: map[string]any{
		"compute_start_stop": []any{map[string]any{"action": "stop", "trigger": map[string]any{
			"type": "cron", "expression": "0 18 * * *", "time_zone": "Eastern Standard Time"}}},
	}}
	if _, err := s.CreateCompute(ctx, c); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if got := computeState(t, s, "eve-box"); got != InstanceRunning {
		t.Fatalf("before 18:00: %s, want Running", got)
	}

	clk.advance(90 * time.Second) // 18:00:30 in New York
	for range 4 {
		pass(t, s)
	}
	if got := computeState(t, s, "eve-box"); got != InstanceStopped {
		ev, _ := s.Nodes().ComputeEvents(ctx, "eve-box", 20)
		t.Fatalf("after 18:00: %s, want Stopped; nodes %+v; events %+v", got, mustNodes(t, s, "eve-box"), ev)
	}
	if _, err := s.Nodes().StartInstance(ctx, owner, "eve-box"); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if got := computeState(t, s, "eve-box"); got != InstanceRunning {
		t.Fatalf("started by hand: %s, want Running", got)
	}

	// The server restarts: a new Service on the same store.
	clk.advance(90 * time.Second)
	s2 := newPoolService(t, st, dir, prov, clk)
	pass(t, s2)
	pass(t, s2)
	if got := computeState(t, s2, "eve-box"); got != InstanceRunning {
		t.Fatalf("after a restart, the 18:00 stop fired again: %s, want Running", got)
	}
	// The next day's 18:00 still fires.
	clk.advance(24 * time.Hour)
	for range 3 {
		pass(t, s2)
	}
	if got := computeState(t, s2, "eve-box"); got != InstanceStopped {
		t.Fatalf("the next day's 18:00: %s, want Stopped", got)
	}
}

func mustNodes(t *testing.T, s *Service, compute string) []store.Node {
	t.Helper()
	ns, err := s.st.ListNodes(context.Background(), compute)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// An instance whose node is lost is Unusable until a new node has joined.
func TestInstanceUnusableWhileItsNodeIsReplaced(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)}
	prov := &schedProvider{}
	s := newPoolService(t, st, dir, prov, clk)
	c := &spec.Compute{Name: "lone-box", Type: "computeinstance", Size: "Standard_DS1_v2",
		CreateOnBehalfOf: map[string]any{"user_object_id": "u-1", "user_tenant_id": "t-1"}}
	if _, err := s.CreateCompute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if got := computeState(t, s, "lone-box"); got != InstanceRunning {
		t.Fatalf("%s, want Running", got)
	}
	// No heartbeat for longer than the lease: the node is lost.
	clk.advance(s.cfg.NodeLease + time.Second)
	if err := s.pools.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := computeState(t, s, "lone-box"); got != InstanceUnusable {
		t.Fatalf("with its node lost: %s, want Unusable", got)
	}
	pass(t, s)
	joinAll(t, s)
	pass(t, s)
	if got := computeState(t, s, "lone-box"); got != InstanceRunning {
		t.Fatalf("with a new node: %s, want Running", got)
	}
	if n := len(prov.launched); n != 2 {
		t.Fatalf("%d launches, want 2", n)
	}
}
