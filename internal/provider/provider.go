// Package provider defines node providers: how a cluster or a compute
// instance gets the machines its nodes run on (docs/architecture.md, "Seams").
//
// A provider only makes, lists and removes machines. Each machine it makes
// runs `ferry agent`, which joins the workspace by itself; what a node does
// after that (its jobs, its state as a node) is the server's business and
// not the provider's. Implementations live in sub-packages (process, exec)
// and are registered where the server is wired, not here.
package provider

import (
	"context"
	"errors"
)

// Machine states, in the provider's view. The server's node states
// (Idle, Busy, Lost, ...) are a different, finer thing.
const (
	StatePending = "pending" // asked for, not running yet
	StateRunning = "running" // up; its agent may or may not have joined yet
	StateStopped = "stopped" // gone or halted; still listed until terminated
	StateFailed  = "failed"  // the provider gave up on it; Machine.Error says why
	// StatePreempted: the provider is taking the machine back (a
	// low-priority or spot machine evicted). It may run on for a short
	// notice, in which its jobs stop and keep their outputs; the server
	// then terminates it and puts its jobs back in the queue.
	StatePreempted = "preempted"
)

// Machine is one machine a provider made for a pool.
type Machine struct {
	ID      string            // provider-unique and stable; what Terminate takes
	Pool    string            // the compute's name
	State   string            // one of the State constants
	Address string            // where the machine is reachable, "" if unknown
	Error   string            // why it failed, when State is StateFailed
	Labels  map[string]string // provider-specific facts (directory, pid, GPUs, ...)
}

// LaunchRequest asks for one machine that will run `ferry agent` and join
// the workspace.
type LaunchRequest struct {
	Pool string // compute name
	Name string // node name the server chose, unique; providers use it in the machine's ID
	Size string // size name (e.g. Standard_DS3_v2); informational where the provider cannot choose hardware
	GPUs int    // GPUs this machine should get
	// AgentArgs is the argv of the agent after the binary, starting with
	// "agent" (--server, --name, ...). It has no --dir: the provider gives
	// each machine its own directory.
	AgentArgs []string
	// AgentEnv is extra KEY=VALUE for the agent. It holds FERRY_JOIN_TOKEN,
	// a secret: providers never log it, never put it on a command line,
	// never write it into their records and never return it in an error.
	AgentEnv []string
}

// Provider makes, lists and removes the machines of pools.
//
// Contract, for every implementation:
//   - Safe for concurrent use: the server launches and terminates the
//     machines of several pools at once.
//   - Launch returns the machine it made, or an error and no machine. A
//     Launch that fails leaves nothing behind that List reports, as far as
//     the provider can see to it. Errors say what to fix and never contain
//     a value of LaunchRequest.AgentEnv.
//   - List returns the provider's machines of pool (every pool's when pool
//     is ""), in no particular order, including stopped and failed ones
//     until they are terminated; an empty result is not an error. List
//     works after a server restart: what a provider knows about its
//     machines is kept outside the server's memory.
//   - Terminate removes the machine with that ID and whatever runs on it.
//     It is idempotent: terminating a machine that is already gone returns
//     nil, never ErrNotFound.
//   - Every method gives up when ctx is done, as far as the underlying
//     system allows.
type Provider interface {
	// Type is the provider's name in configuration: "process", "exec", ...
	Type() string
	Launch(ctx context.Context, r LaunchRequest) (Machine, error)
	List(ctx context.Context, pool string) ([]Machine, error)
	Terminate(ctx context.Context, id string) error
}

// Getter is the optional power to look up one machine by ID without
// listing its pool. Find it by type assertion.
type Getter interface {
	// Get returns the machine, or an error wrapping ErrNotFound when the
	// provider has no machine with that ID.
	Get(ctx context.Context, id string) (Machine, error)
}

// Preempter is the optional power to preempt a machine on request, as a
// cloud takes back a low-priority machine: for tests and for operators who
// want to see what their jobs do when it happens. Find it by type assertion.
type Preempter interface {
	// Preempt marks the machine preempted: List and Get report it in
	// StatePreempted from then on, across server restarts, until it is
	// terminated. It does not stop the machine; the server does, once the
	// machine's jobs have stopped. Preempting a preempted machine is not
	// an error; one that does not exist is ErrNotFound.
	Preempt(ctx context.Context, id string) error
}

// ErrNotFound is wrapped by Getter.Get when the provider has no machine
// with the ID asked for. Terminate does not return it (see Provider).
var ErrNotFound = errors.New("no such machine")

// Checker is the optional power to check, before a compute is stored, that
// its machines can be reached and logged in to, and to learn the host keys
// of machines configured trust-on-first-use. Find it by type assertion.
type Checker interface {
	// Check logs in to each configured machine once. It returns, for each
	// machine in configuration order, the host key to pin from now on (a
	// known_hosts line) where the configuration said trust-on-first-use,
	// and "" elsewhere. Its error is a *CheckError that names the field to
	// fix and never contains a secret.
	Check(ctx context.Context) ([]string, error)
}

// CheckError says why a machine could not be reached or logged in to.
type CheckError struct {
	Field string // the configuration field to fix, e.g. ssh_settings.admin_password
	Msg   string
	Err   error // the underlying classified error (for errors.Is)
}

func (e *CheckError) Error() string { return e.Field + ": " + e.Msg }
func (e *CheckError) Unwrap() error { return e.Err }
