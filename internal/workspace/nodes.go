package workspace

import (
	"context"
	"sync"

	"github.com/ferry-ml/ferry/internal/store"
)

// Nodes is the node side of the workspace: the protocol the agents of pool
// nodes speak (agents.go), compute instances and their start, stop and
// restart (instances.go), the views of pools and their nodes
// (poolviews.go), the exec, shell and port-forward sessions of instances
// (sessions.go), quotas (quotas.go) and preempting a node (preempt.go).
// The API reaches it as Service.Nodes.
//
// It keeps the memory only it uses, and reaches the rest of the core
// through ws, the Service it is part of: the store, the settings, the
// clock and the log, waking the dispatcher, compute events and views, the
// pool types, and the pool loop (its node targets, retiring and
// preempting a node). It reads them from the Service rather than keeping
// copies so that there is one of each: the Service's settings and store
// are the ones every part sees.
type Nodes struct {
	ws *Service

	pmu       sync.Mutex               // guards the agent protocol's memory below
	delivered map[string]bool          // node/job/attempt handed to its agent
	nodeWait  map[string]chan struct{} // per node: closed when it has new work

	sessions sessionTable // exec, shell and port-forward sessions of instances (sessions.go)
}

// newNodes makes the node side of ws.
func newNodes(ws *Service) *Nodes {
	return &Nodes{ws: ws, delivered: map[string]bool{}, nodeWait: map[string]chan struct{}{}}
}

// Nodes is the workspace's node side: agents, instances, sessions, quotas.
func (s *Service) Nodes() *Nodes { return s.nodes }

// forgetDelivered is the pool loop's word to the agent protocol at the
// start of a pass (poolWorkspace).
func (s *Service) forgetDelivered(active []store.Job) { s.nodes.forgetDelivered(active) }

// instanceStates is compute instances' part of a pool pass (poolWorkspace).
func (s *Service) instanceStates(ctx context.Context, pools map[string]*poolCompute, live []store.Node, onNode map[string][]store.Job) []store.Node {
	return s.nodes.instanceStates(ctx, pools, live, onNode)
}
