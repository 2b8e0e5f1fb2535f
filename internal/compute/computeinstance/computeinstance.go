// Package computeinstance is the compute type of Azure ML's compute
// instances (`type: computeinstance`): one machine of one size for one
// user, which its owner, its schedules and its idle shutdown start and
// stop (package instance reads those fields), and which the user reaches
// with exec, ssh and port-forward sessions. The workspace's pool loop runs
// it as a pool of at most one node.
package computeinstance

import (
	"fmt"
	"strings"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Type is the compute files' `type:` of a compute instance.
const Type = "computeinstance"

// Pool describes compute instances to the workspace.
var Pool = &compute.Pool{
	Noun:     "compute instance",
	Instance: true,
	Bounds:   bounds,
	Admit:    admit,
}

// bounds: one node while the instance is meant to run, none once stopped;
// idleness is the instance's own business (its idle shutdown stops it),
// not the autoscaler's.
func bounds(_ *spec.Compute, meantToRun bool) compute.NodeBounds {
	n := 0
	if meantToRun {
		n = 1
	}
	return compute.NodeBounds{Min: n, Max: n, IdleBeforeRemoval: compute.Forever}
}

// admit refuses a job that asks for more than the one machine or for
// another size.
func admit(c *spec.Compute, sz sizes.Size, j *spec.Job, _ *environment.Spec) error {
	if j.Resources != nil && j.Resources.InstanceCount > 1 {
		return fmt.Errorf("resources.instance_count: compute instance %s is one machine; use a cluster for %d nodes", c.Name, j.Resources.InstanceCount)
	}
	if j.Resources != nil && j.Resources.InstanceType != "" && !strings.EqualFold(j.Resources.InstanceType, sz.Name) {
		return fmt.Errorf("resources.instance_type: compute instance %s is a %s, not %s", c.Name, sz.Name, j.Resources.InstanceType)
	}
	return nil
}
