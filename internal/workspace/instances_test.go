package workspace

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/spec"
)

// eventsOf returns every event of a compute, one message a line.
func eventsOf(t *testing.T, s *Service, compute string) string {
	t.Helper()
	evs, err := s.Nodes().ComputeEvents(context.Background(), compute, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.Kind + " " + e.Message + "\n")
	}
	return b.String()
}

// A restarted instance is Restarting until a node other than its old one
// has joined: not while the old node is still there (its machine could not
// be given back yet), nor while the new one is on its way. So a session
// opened once it says Running reaches the new node.
func TestInstanceRestartIsRunningOnlyOnItsNewNode(t *testing.T) {
	prov := &schedProvider{}
	s, clk, old := newInstanceOn(t, nil, prov)
	ctx := context.Background()
	clk.advance(time.Minute)
	prov.failTerminate = 1
	if _, err := s.Nodes().RestartInstance(ctx, owner, "dev-box"); err != nil {
		t.Fatal(err)
	}
	pass(t, s) // the old node's machine cannot be given back yet
	if got := computeState(t, s, "dev-box"); got != InstanceRestarting {
		t.Fatalf("with only its old node %s there: %s, want Restarting; events:\n%s", old, got, eventsOf(t, s, "dev-box"))
	}
	pass(t, s) // now it can; a new node is launched
	ns := mustNodes(t, s, "dev-box")
	if len(ns) != 1 || ns[0].Name == old || ns[0].State != NodeProvisioning {
		t.Fatalf("after the old node was given back: nodes %+v, want one new Provisioning node", ns)
	}
	if got := computeState(t, s, "dev-box"); got != InstanceRestarting {
		t.Fatalf("with its new node not joined: %s, want Restarting", got)
	}
	if _, err := s.Nodes().OpenSession(ctx, owner, "dev-box", SessionExec); err == nil {
		t.Fatal("a session was opened on a restarting instance")
	}
	joinAll(t, s)
	pass(t, s)
	if got := computeState(t, s, "dev-box"); got != InstanceRunning {
		t.Fatalf("with its new node joined: %s, want Running", got)
	}
	x, err := s.Nodes().OpenSession(ctx, owner, "dev-box", SessionExec)
	if err != nil {
		t.Fatal(err)
	}
	if x.Node != ns[0].Name {
		t.Errorf("the session went to node %s, want the new node %s", x.Node, ns[0].Name)
	}
	x.Close()
	ev := eventsOf(t, s, "dev-box")
	for _, want := range []string{"Running → Restarting: restarted by the user (owner)", "node " + old + " removed: the instance was restarted", "Restarting → Running"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
}

// The node of a stopped instance is given back with an event that says
// who or what stopped it, not the autoscaler's "above max_instances 0".
func TestInstanceStopSaysWhy(t *testing.T) {
	idle := 15
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, s *Service, clk *clock)
		want string
	}{
		{"by the user", func(t *testing.T, s *Service, _ *clock) {
			if _, err := s.Nodes().StopInstance(context.Background(), owner, "dev-box"); err != nil {
				t.Fatal(err)
			}
		}, "removed: the instance was stopped by the user (owner)"},
		{"after idle", func(t *testing.T, s *Service, clk *clock) {
			clk.advance(16 * time.Minute)
		}, "removed: the instance was stopped after idle for 16m0s with no job, session or port-forward"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk, node := newInstance(t, &spec.Compute{Name: "dev-box", Type: "computeinstance", Size: "Standard_DS1_v2", IdleTimeBeforeShutdownMins: &idle})
			tc.stop(t, s, clk)
			for range 3 {
				pass(t, s)
			}
			if got := computeState(t, s, "dev-box"); got != InstanceStopped {
				t.Fatalf("%s, want Stopped", got)
			}
			ev := eventsOf(t, s, "dev-box")
			if !strings.Contains(ev, "node "+node+" "+tc.want) {
				t.Errorf("events lack %q:\n%s", tc.want, ev)
			}
			if strings.Contains(ev, "max_instances") {
				t.Errorf("events speak of max_instances:\n%s", ev)
			}
		})
	}
}
