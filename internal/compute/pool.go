package compute

import (
	"time"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Pool describes a compute type whose computes are pools of agent nodes
// (clusters, compute instances, attached machines): the workspace's pool
// loop gets their machines from a node provider, an agent joins on each,
// and jobs are placed on whole nodes. That mechanism is the workspace's
// and the same for every such type; what differs between the types is
// said here, and the workspace asks a type's Pool instead of comparing
// type names. Each pool type's package declares its Pool; the server's
// wiring registers it under the type's name.
//
// Exactly one of ScalesByQueue, Instance and Attached is set: they are how
// many nodes a compute of the type aims at.
type Pool struct {
	// Noun names one compute of the type in messages ("cluster").
	Noun string

	// ScalesByQueue: the compute keeps between min_instances and
	// max_instances nodes of its size, launching for queued jobs and
	// removing nodes idle longer than idle_time_before_scale_down; its
	// bounds can be changed live.
	ScalesByQueue bool

	// Instance: the compute is one machine of its size for one user, with
	// a lifecycle of its own (Creating, Running, Stopped ...) that its
	// owner, its schedules and its idle shutdown drive; it has its node
	// while it is meant to run, and the user reaches it with exec, ssh and
	// port-forward sessions. Its fields are read by package instance.
	Instance bool

	// Attached: the compute is one machine the team already owns, reached
	// over SSH (the compute's ssh_settings, its host key pinned in
	// host_key). It has no size from the catalog, is never launched or
	// removed, and runs one job at a time.
	Attached bool

	// Serverless: serverless jobs (those that name no compute) run on
	// implicit computes of this type, one per size and tier.
	Serverless bool

	// Bounds is how many nodes compute c of the type aims at; meantToRun
	// is false for a compute instance its owner (or a schedule) stopped.
	// A compute being deleted aims at none whatever its type: the
	// workspace does not ask.
	Bounds func(c *spec.Compute, meantToRun bool) NodeBounds

	// Admit refuses, with an error naming the field, a job that compute c
	// of the type can never run; sz is the size of c's nodes (for an
	// Attached type, what the workspace assumes of a machine it has not
	// measured). The checks against the size of a node (GPUs and
	// processes per node), for the types that are not Attached, are the
	// workspace's; nil admits every job.
	Admit func(c *spec.Compute, sz sizes.Size, j *spec.Job, env *environment.Spec) error
}

// NodeBounds is how many nodes a pool compute aims at: the pool loop keeps
// between Min and Max, launching for queued jobs, and removes a node above
// Min once it has been idle for IdleBeforeRemoval. A job takes whole
// nodes, so Max is also how many jobs can run at once.
type NodeBounds struct {
	Min, Max          int
	IdleBeforeRemoval time.Duration
}

// Forever is the IdleBeforeRemoval of nodes that idleness never removes
// (an attached machine, an instance whose idleness is its own business).
const Forever = 100 * 365 * 24 * time.Hour
