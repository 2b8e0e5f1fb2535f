// Package virtualmachine is the compute type of Azure ML's attached
// virtual machines (`type: virtualmachine`): one machine the team already
// owns, reached over SSH with the compute's ssh_settings and a pinned host
// key. The workspace's pool loop runs it as a pool of exactly one node
// that is never launched or removed, only joined and, on detach, cleaned.
package virtualmachine

import (
	"fmt"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Type is the compute files' `type:` of an attached machine.
const Type = "virtualmachine"

// Pool describes attached machines to the workspace.
var Pool = &compute.Pool{
	Noun:     "attached machine",
	Attached: true,
	Bounds:   bounds,
	Admit:    admit,
}

// bounds: the one machine, always; it is the team's own.
func bounds(*spec.Compute, bool) compute.NodeBounds {
	return compute.NodeBounds{Min: 1, Max: 1, IdleBeforeRemoval: compute.Forever}
}

// admit refuses a job that asks for more than the one machine or for a
// size: an attached machine has none.
func admit(c *spec.Compute, _ sizes.Size, j *spec.Job, _ *environment.Spec) error {
	if j.Resources != nil && j.Resources.InstanceCount > 1 {
		return fmt.Errorf("resources.instance_count: %s is one attached machine; use a cluster (an ssh fleet) for %d nodes", c.Name, j.Resources.InstanceCount)
	}
	if j.Resources != nil && j.Resources.InstanceType != "" {
		return fmt.Errorf("resources.instance_type: %s is an attached machine, which has no size; leave instance_type out", c.Name)
	}
	return nil
}
