package workspace

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// The pool loop's machines: launching a node (with a join token of its
// own, and a backoff when its provider fails), retiring one, and losing
// one whose agent went silent.

// launchNode asks the compute's provider for one more machine, with a join
// token made for it alone.
func (l *poolLoop) launchNode(ctx context.Context, pc *poolCompute) error {
	prov, err := l.providers(&pc.spec)
	if err != nil {
		return err
	}
	name := pc.rec.Name + "-" + randomSuffix(6)
	secret, hash := auth.NewToken()
	now := l.now()
	if err := l.st.CreateNode(ctx, store.Node{Name: name, Compute: pc.rec.Name, State: NodeProvisioning,
		Reason: "launched; waiting for its agent to join", Size: pc.size.Name, Created: now}); err != nil {
		return err
	}
	if err := l.st.CreateToken(ctx, store.Token{Hash: hash, Kind: KindJoin, Subject: name, Created: now}); err != nil {
		return err
	}
	m, err := prov.Launch(ctx, provider.LaunchRequest{
		Pool: pc.rec.Name, Name: name, Size: pc.size.Name, GPUs: pc.size.GPUs,
		AgentArgs: []string{"agent", "--server", l.apiURL, "--name", name},
		AgentEnv:  []string{"FERRY_JOIN_TOKEN=" + secret},
	})
	if err != nil {
		backoff := l.launchBackoff(pc.rec.Name, err)
		l.event(ctx, pc.rec.Name, "launch_failed", fmt.Sprintf("node %s could not be launched (%v); retrying in %s", name, err, backoff))
		_ = l.st.DeleteTokens(ctx, KindJoin, name)
		_ = l.st.DeleteNode(ctx, name)
		return err
	}
	l.mu.Lock()
	delete(l.launchFails, pc.rec.Name)
	delete(l.launchErr, pc.rec.Name)
	delete(l.launchRetry, pc.rec.Name)
	l.mu.Unlock()
	_, err = l.st.UpdateNode(ctx, name, func(n *store.Node) error {
		n.Machine, n.Address = m.ID, m.Address
		return nil
	})
	return err
}

// launchBackoff records a failed launch and returns how long the compute
// waits before the next one: 5 s, doubling to 5 min.
func (l *poolLoop) launchBackoff(compute string, err error) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.launchFails[compute]++
	d := 5 * time.Second << min(l.launchFails[compute]-1, 6)
	d = min(d, 5*time.Minute)
	l.launchRetry[compute] = l.now().Add(d)
	l.launchErr[compute] = err.Error()
	return d
}

// providerCallTimeout bounds one call to a node provider from the pool loop.
const providerCallTimeout = 2 * time.Minute

// retireNode terminates a node's machine and forgets the node. When the
// machine cannot be terminated the node stays, to be tried again on the
// next pass.
func (l *poolLoop) retireNode(ctx context.Context, n store.Node, why string) {
	if n.Machine != "" {
		pc, err := l.st.GetCompute(ctx, n.Compute)
		var c spec.Compute
		if err == nil && json.Unmarshal(pc.Spec, &c) == nil && l.providers != nil {
			if prov, err := l.providers(&c); err == nil {
				// A provider that hangs must not hold the pool loop forever.
				tctx, cancel := context.WithTimeout(ctx, providerCallTimeout)
				err := prov.Terminate(tctx, n.Machine)
				cancel()
				if err != nil && !errors.Is(err, provider.ErrNotFound) {
					l.log.Error("terminate node", "node", n.Name, "err", err)
					return // try again next pass
				}
			}
		}
	}
	_ = l.st.DeleteTokens(ctx, KindNode, n.Name)
	_ = l.st.DeleteTokens(ctx, KindJoin, n.Name)
	if err := l.st.DeleteNode(ctx, n.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
		l.log.Error("delete node", "node", n.Name, "err", err)
		return
	}
	l.mu.Lock()
	delete(l.preemptedAt, n.Name)
	l.mu.Unlock()
	l.log.Info("node retired", "node", n.Name, "why", why)
}

// loseNode marks a silent node Lost and fails the attempts it ran.
func (l *poolLoop) loseNode(ctx context.Context, n store.Node, jobs []store.Job, silent time.Duration) store.Node {
	why := fmt.Sprintf("node lost: no heartbeat for %s", silent.Round(time.Second))
	u, err := l.st.UpdateNode(ctx, n.Name, func(x *store.Node) error {
		x.State, x.Reason = NodeLost, why
		return nil
	})
	if err != nil {
		return n
	}
	l.event(ctx, n.Compute, "node_lost", fmt.Sprintf("node %s: %s", n.Name, why))
	for _, j := range jobs {
		_ = l.ws.finish(ctx, j.Name, j.Attempt, apitypes.StatusFailed, "node lost", nil, fmt.Sprintf("node %s was lost (%s) while it ran this job", n.Name, why))
	}
	return u
}
