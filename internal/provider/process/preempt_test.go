package process

import (
	"context"
	"errors"
	"testing"

	"github.com/ferry-ml/ferry/internal/provider"
)

// A preempted machine is listed preempted, by a provider made after a
// server restart too, keeps running until it is terminated, and a
// preemption of a machine that is not there is ErrNotFound.
func TestPreemptIsListedUntilTerminated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	p := newProvider(t, Config{Dir: dir})
	a := launch(t, p, shAgent("pool", "a", 0, sleeper))
	b := launch(t, p, shAgent("pool", "b", 0, sleeper))
	if err := p.Preempt(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Preempt(ctx, a.ID); err != nil {
		t.Errorf("a second Preempt: %v", err)
	}
	again := newProvider(t, Config{Dir: dir})
	ms, err := again.List(ctx, "pool")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, m := range ms {
		states[m.ID] = m.State
	}
	if states[a.ID] != provider.StatePreempted || states[b.ID] != provider.StateRunning {
		t.Errorf("states after preempting %s: %v; want it preempted and %s running", a.ID, states, b.ID)
	}
	if got, err := p.Get(ctx, a.ID); err != nil || got.State != provider.StatePreempted || got.Address == "" {
		t.Errorf("Get(%s) = %+v, %v; want it preempted, still reachable during its notice", a.ID, got, err)
	}
	if err := p.Terminate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Preempt(ctx, a.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Preempt of a terminated machine: err = %v; want ErrNotFound", err)
	}
}
