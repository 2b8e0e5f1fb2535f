package store

import (
	"context"
	"encoding/json"
	"time"
)

// Compute is a stored compute target. Spec is the validated compute file as
// JSON; the store does not look inside it.
type Compute struct {
	Name     string
	Type     string
	Spec     json.RawMessage
	State    string
	Created  time.Time
	Modified time.Time
	// Status is runtime state the workspace keeps (JSON it owns; nil when
	// none), e.g. the schedule occurrences of an instance that fired.
	Status json.RawMessage
}

// Node is a machine of a pool compute (a cluster or an instance). State and
// Reason are owned by the workspace; Facts is JSON the store keeps opaque.
type Node struct {
	Name      string // unique in the workspace
	Compute   string
	State     string
	Reason    string
	Size      string
	Machine   string // the provider's id of the machine
	Address   string
	Facts     json.RawMessage
	Created   time.Time // when its launch was asked
	Joined    time.Time // zero until its agent joined
	Heartbeat time.Time // zero until its first heartbeat
	IdleSince time.Time // zero while busy
}

// ComputeEvent is one scaling or health event of a compute, for people.
type ComputeEvent struct {
	Compute string
	Time    time.Time
	Kind    string // e.g. scale_up, scale_down, launch_failed, node_lost, resize
	Message string
}

// Computes keeps compute targets, the nodes (machines) of the pool ones and
// their scaling and health events: the records of one compute, though a node
// or an event is kept whether or not its compute is. Its methods are safe
// for concurrent use, and keep the contract common to every part of Store:
// errors wrap ErrNotFound or ErrConflict where those apply, and a returned
// error leaves stored state unchanged. UpdateCompute and UpdateNode ignore
// changes to Name; the function given to either may read through the store
// but must not write through it.
type Computes interface {
	// CreateCompute stores a new compute target; ErrConflict if the name is taken.
	CreateCompute(ctx context.Context, c Compute) error
	// GetCompute returns one target; ErrNotFound if there is none by that name.
	GetCompute(ctx context.Context, name string) (Compute, error)
	// ListComputes returns every target ordered by name.
	ListComputes(ctx context.Context) ([]Compute, error)
	// UpdateCompute reads, modifies with fn and writes back one target in a
	// single transaction. If fn returns an error nothing is written and that
	// error is returned as is.
	UpdateCompute(ctx context.Context, name string, fn func(*Compute) error) (Compute, error)
	// DeleteCompute removes a target; ErrNotFound if there is none. Its
	// nodes and events stay: removing nodes is the workspace's decision, as
	// it must first give their machines back.
	DeleteCompute(ctx context.Context, name string) error

	// CreateNode stores a new node; ErrConflict if the name is taken. The
	// compute it names need not exist.
	CreateNode(ctx context.Context, n Node) error
	// GetNode returns one node; ErrNotFound if there is none by that name.
	GetNode(ctx context.Context, name string) (Node, error)
	// ListNodes returns the nodes of compute, or of every compute when it is
	// empty, ordered by Created and then by Name.
	ListNodes(ctx context.Context, compute string) ([]Node, error)
	// UpdateNode reads, modifies with fn and writes back one node in a
	// single transaction; ErrNotFound if there is none, and then fn is not
	// called. A change fn makes to Name is ignored. If fn returns an error
	// nothing is written and that error is returned as is. Concurrent
	// UpdateNode calls on one node are serialised.
	UpdateNode(ctx context.Context, name string, fn func(*Node) error) (Node, error)
	// DeleteNode removes a node; ErrNotFound if there is none.
	DeleteNode(ctx context.Context, name string) error

	// AddComputeEvent stores an event of e.Compute, which need not exist.
	AddComputeEvent(ctx context.Context, e ComputeEvent) error
	// ListComputeEvents returns the newest limit events of compute (all of
	// them if limit <= 0), oldest first; events with equal times are in the
	// order they were added. A compute without events, or with no such
	// compute, has an empty list, not ErrNotFound: events outlive their
	// compute.
	ListComputeEvents(ctx context.Context, compute string, limit int) ([]ComputeEvent, error)
}
