package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/instance"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// The agents' side of pools: a launched node joins with its join token,
// heartbeats, reports its setup scripts and long-polls for the attempts
// and sessions placed on it.

// JoinNode admits the agent of a launched node in exchange for its join
// token, which is used up.
func (nd *Nodes) JoinNode(ctx context.Context, who auth.Principal, req nodeproto.JoinRequest) (*nodeproto.JoinReply, error) {
	if who.Kind != KindJoin {
		return nil, apperr.Forbidden("joining needs a node's join token")
	}
	if req.Name != who.Subject {
		return nil, apperr.Forbidden("this join token is for node %s, not %s", who.Subject, req.Name)
	}
	facts, err := json.Marshal(req.Facts)
	if err != nil {
		return nil, err
	}
	now := nd.ws.now()
	setup, err := nd.setupFor(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	n, err := nd.ws.st.UpdateNode(ctx, req.Name, func(n *store.Node) error {
		if n.State != NodeProvisioning {
			return apperr.Conflict("node %s has already joined (it is %s)", n.Name, n.State)
		}
		reason := "joined"
		if len(setup) > 0 {
			reason = nodeSettingUp
		}
		n.State, n.Reason, n.Joined, n.Heartbeat, n.IdleSince, n.Facts = NodeIdle, reason, now, now, now, facts
		if req.Facts.Address != "" {
			n.Address = req.Facts.Address
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("node %s is not known to this workspace", req.Name)
	}
	if err != nil {
		return nil, err
	}
	if err := nd.ws.st.DeleteTokens(ctx, KindJoin, n.Name); err != nil {
		return nil, err
	}
	secret, hash := auth.NewToken()
	if err := nd.ws.st.CreateToken(ctx, store.Token{Hash: hash, Kind: KindNode, Subject: n.Name, Created: now}); err != nil {
		return nil, err
	}
	nd.ws.event(ctx, n.Compute, "node_joined", fmt.Sprintf("node %s joined from %s (%d CPUs, %d GPUs)", n.Name, n.Address, req.Facts.CPUs, len(req.Facts.GPUs)))
	if w := nd.nodeShortfall(n); w != "" {
		nd.ws.event(ctx, n.Compute, "node_short", w)
		nd.ws.log.Warn("node has less than its size", "node", n.Name, "warning", w)
	}
	nd.ws.wakeDispatcher()
	return &nodeproto.JoinReply{Node: n.Name, NodeToken: secret, Setup: setup,
		HeartbeatSeconds: int(nd.ws.cfg.NodeHeartbeat / time.Second), LeaseSeconds: int(nd.ws.cfg.NodeLease / time.Second)}, nil
}

// Setup states of a compute instance's node, kept in its Reason.
const (
	nodeSettingUp     = "running setup scripts"
	nodeSetUp         = "set up"
	nodeSetupFailedAt = "setup failed: "
)

// setupFor returns the setup scripts a joining node runs: those of a
// compute instance, the creation_script only when the instance is being
// made, the startup_script at every start.
func (nd *Nodes) setupFor(ctx context.Context, node string) ([]nodeproto.SetupScript, error) {
	n, err := nd.ws.st.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("node %s is not known to this workspace", node)
	}
	if err != nil {
		return nil, err
	}
	rec, err := nd.ws.st.GetCompute(ctx, n.Compute)
	if err != nil || !nd.ws.isInstance(rec.Type) {
		return nil, nil
	}
	var c spec.Compute
	if err := json.Unmarshal(rec.Spec, &c); err != nil {
		return nil, err
	}
	cfg, err := instance.ParseConfig(&c)
	if err != nil {
		return nil, nil
	}
	var out []nodeproto.SetupScript
	add := func(name string, sc *instance.SetupScript) {
		if sc != nil {
			out = append(out, nodeproto.SetupScript{Name: name, Content: sc.Content, Command: sc.Command, TimeoutSeconds: int(sc.Timeout / time.Second)})
		}
	}
	if rec.State == InstanceCreating {
		add("creation_script", cfg.SetupScripts.Creation)
	}
	add("startup_script", cfg.SetupScripts.Startup)
	return out, nil
}

// setupReported records how a node's setup scripts went.
func (nd *Nodes) setupReported(ctx context.Context, n store.Node, r *nodeproto.SetupResult) {
	reason := nodeSetUp
	if !r.OK {
		what := fmt.Sprintf("exited with code %d", r.ExitCode)
		if r.TimedOut {
			what = "timed out"
		}
		reason = fmt.Sprintf("%s%s %s", nodeSetupFailedAt, r.Script, what)
		if out := strings.TrimSpace(r.Output); out != "" {
			reason += "; its output ends:\n" + out
		}
	}
	moved := false
	if _, err := nd.ws.st.UpdateNode(ctx, n.Name, func(x *store.Node) error {
		if x.Reason == nodeSettingUp {
			x.Reason, moved = reason, true
		}
		return nil
	}); err != nil || !moved {
		return
	}
	if r.OK {
		nd.ws.event(ctx, n.Compute, "setup", "setup scripts succeeded on node "+n.Name)
	} else {
		nd.ws.event(ctx, n.Compute, "setup_failed", reason)
	}
	nd.ws.wakeDispatcher()
}

// NodeHeartbeat renews a node's lease and says which of the attempts it
// runs the workspace no longer wants.
func (nd *Nodes) NodeHeartbeat(ctx context.Context, who auth.Principal, name string, hb nodeproto.Heartbeat) (*nodeproto.HeartbeatReply, error) {
	if who.Kind != KindNode || who.Subject != name {
		return nil, apperr.Forbidden("only node %s's own token may send its heartbeat", name)
	}
	n, err := nd.ws.st.UpdateNode(ctx, name, func(n *store.Node) error {
		n.Heartbeat = nd.ws.now()
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("node %s is not known to this workspace", name)
	}
	if err != nil {
		return nil, err
	}
	if hb.Setup != nil && n.Reason == nodeSettingUp {
		nd.setupReported(ctx, n, hb.Setup)
	}
	reply := &nodeproto.HeartbeatReply{Drain: n.State == NodeDraining || n.State == NodeLost}
	for _, r := range hb.Running {
		j, err := nd.ws.st.GetJob(ctx, r.Job)
		if err != nil || apitypes.IsTerminal(j.Status) || j.Attempt != r.Attempt || !slices.ContainsFunc(placementOf(j).Ranks, func(p RankPlacement) bool { return p.Node == name }) {
			reply.Stop = append(reply.Stop, r)
		}
	}
	return reply, nil
}

// NodeAssignments returns the attempts placed on a node that were not
// handed to it yet, waiting up to wait for one.
func (nd *Nodes) NodeAssignments(ctx context.Context, who auth.Principal, name string, wait time.Duration) (*nodeproto.Assignments, error) {
	if who.Kind != KindNode || who.Subject != name {
		return nil, apperr.Forbidden("only node %s's own token may ask for its work", name)
	}
	deadline := time.NewTimer(min(wait, 60*time.Second))
	defer deadline.Stop()
	for {
		wake := nd.nodeWaiter(name)
		out, err := nd.pendingFor(ctx, name)
		if err == nil {
			out.Sessions = nd.sessionsFor(name)
		}
		if err != nil || len(out.Assignments) > 0 || len(out.Sessions) > 0 {
			return out, err
		}
		select {
		case <-wake:
		case <-deadline.C:
			return out, nil
		case <-ctx.Done():
			return out, nil
		}
	}
}

func (nd *Nodes) pendingFor(ctx context.Context, name string) (*nodeproto.Assignments, error) {
	out := &nodeproto.Assignments{Assignments: []nodeproto.Assignment{}}
	n, err := nd.ws.st.GetNode(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.NotFound("node %s is not known to this workspace", name)
	}
	if err != nil {
		return nil, err
	}
	if n.State != NodeIdle && n.State != NodeBusy {
		return out, nil
	}
	active, err := nd.ws.st.ListJobs(ctx, store.JobFilter{Statuses: activeStatuses, Compute: n.Compute})
	if err != nil {
		return nil, err
	}
	for _, j := range active {
		pl := placementOf(j)
		rank := slices.IndexFunc(pl.Ranks, func(r RankPlacement) bool { return r.Node == name })
		if rank < 0 || j.Status == apitypes.StatusCancelRequested {
			continue
		}
		key := fmt.Sprintf("%s/%s/%d", name, j.Name, j.Attempt)
		nd.pmu.Lock()
		done := nd.delivered[key]
		nd.delivered[key] = true
		nd.pmu.Unlock()
		if done {
			continue
		}
		a, err := nd.assignment(ctx, j, pl, rank)
		if err != nil {
			return nil, err
		}
		out.Assignments = append(out.Assignments, a)
	}
	return out, nil
}

// assignment is what a node's agent needs to start rank's runner, with a
// fresh run token for it.
func (nd *Nodes) assignment(ctx context.Context, j store.Job, pl Placement, rank int) (nodeproto.Assignment, error) {
	secret, hash := auth.NewToken()
	if err := nd.ws.st.CreateToken(ctx, store.Token{Hash: hash, Kind: auth.KindRun, Subject: j.Name, Attempt: j.Attempt, Created: nd.ws.now()}); err != nil {
		return nodeproto.Assignment{}, err
	}
	var addrs []string
	for _, r := range pl.Ranks {
		addr := "127.0.0.1"
		if n, err := nd.ws.st.GetNode(ctx, r.Node); err == nil && n.Address != "" {
			addr = n.Address
		}
		addrs = append(addrs, addr)
	}
	env := map[string]string{
		"FERRY_NODE_RANK":      strconv.Itoa(rank),
		"FERRY_NODE_COUNT":     strconv.Itoa(len(pl.Ranks)),
		"FERRY_NODE_ADDRESSES": strings.Join(addrs, ","),
		"MASTER_ADDR":          addrs[0],
		"MASTER_PORT":          strconv.Itoa(pl.MasterPort),
		"NODE_RANK":            strconv.Itoa(rank),
	}
	return nodeproto.Assignment{Job: j.Name, Attempt: j.Attempt, Rank: rank,
		RunToken: secret, GPUs: nd.nodeGPUs(ctx, pl.Ranks[rank]), Env: env}, nil
	// APIURL is left empty: the agent gives its runners the URL it reaches
	// the server at, which on another host or in a container is not ours.
}

func (nd *Nodes) nodeWaiter(name string) <-chan struct{} {
	nd.pmu.Lock()
	defer nd.pmu.Unlock()
	ch, ok := nd.nodeWait[name]
	if !ok {
		ch = make(chan struct{})
		nd.nodeWait[name] = ch
	}
	return ch
}

func (nd *Nodes) wakeNode(name string) {
	nd.pmu.Lock()
	defer nd.pmu.Unlock()
	if ch, ok := nd.nodeWait[name]; ok {
		close(ch)
		delete(nd.nodeWait, name)
	}
}

// nodeGPUs turns the scheduler's GPU slots of a node (0..GPUs-1 of its
// size) into the GPU indices the node's agent reported: a node given host
// GPUs 2 and 3 by its provider calls them 2 and 3, not 0 and 1.
func (nd *Nodes) nodeGPUs(ctx context.Context, r RankPlacement) []int {
	if len(r.GPUs) == 0 {
		return nil
	}
	n, err := nd.ws.st.GetNode(ctx, r.Node)
	var facts nodeproto.Facts
	if err != nil || len(n.Facts) == 0 || json.Unmarshal(n.Facts, &facts) != nil || len(facts.GPUs) == 0 {
		return r.GPUs
	}
	out := make([]int, 0, len(r.GPUs))
	for _, slot := range r.GPUs {
		if slot < len(facts.GPUs) {
			out = append(out, facts.GPUs[slot].Index)
		}
	}
	return out
}

// forgetDelivered drops the record of assignments handed out for attempts
// that are no longer active, so it does not grow with every job ever run.
func (nd *Nodes) forgetDelivered(active []store.Job) {
	live := map[string]bool{}
	for _, j := range active {
		live[fmt.Sprintf("%s/%d", j.Name, j.Attempt)] = true
	}
	nd.pmu.Lock()
	defer nd.pmu.Unlock()
	for key := range nd.delivered {
		// key is node/job/attempt; node names have no '/'.
		if _, jobAttempt, ok := strings.Cut(key, "/"); ok && !live[jobAttempt] {
			delete(nd.delivered, key)
		}
	}
}
