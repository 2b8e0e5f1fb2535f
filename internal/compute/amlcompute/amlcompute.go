// Package amlcompute is the compute type of Azure ML's compute clusters
// (`type: amlcompute`): a pool of nodes of one size that grows and shrinks
// between min_instances and max_instances with its queue. The workspace's
// pool loop runs it; this package says what sets it apart from the other
// pool types.
package amlcompute

import (
	"fmt"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Type is the compute files' `type:` of a cluster.
const Type = "amlcompute"

// Pool describes clusters to the workspace.
var Pool = &compute.Pool{
	Noun:          "cluster",
	ScalesByQueue: true,
	Serverless:    true,
	Bounds:        bounds,
	Admit:         admit,
}

// bounds are the cluster's own: min_instances to max_instances, idle nodes
// removed after idle_time_before_scale_down. A compute is stored with its
// defaults applied, but one stored otherwise (by hand, or an older server)
// reads with the defaults rather than failing here.
func bounds(c *spec.Compute, _ bool) compute.NodeBounds {
	d := *c
	d.ApplyDefaults()
	return compute.NodeBounds{Min: *d.MinInstances, Max: *d.MaxInstances,
		IdleBeforeRemoval: time.Duration(*d.IdleTimeBeforeScaleDown) * time.Second}
}

// admit refuses a job that asks for more nodes than the cluster may have,
// another size, or container options without a container.
func admit(c *spec.Compute, sz sizes.Size, j *spec.Job, env *environment.Spec) error {
	if r := j.Resources; r != nil {
		if r.InstanceCount > *c.MaxInstances {
			return fmt.Errorf("resources.instance_count: %d nodes asked, but compute %s has max_instances %d", r.InstanceCount, c.Name, *c.MaxInstances)
		}
		if r.InstanceType != "" && !strings.EqualFold(r.InstanceType, sz.Name) {
			return fmt.Errorf("resources.instance_type: compute %s is made of %s nodes, not %s; leave instance_type out or use another compute", c.Name, sz.Name, r.InstanceType)
		}
		if (r.DockerArgs != "" || r.ShmSize != "") && (env == nil || !env.NeedsDocker()) {
			return fmt.Errorf("resources: docker_args and shm_size apply to image environments (image or build)")
		}
		if _, err := environment.ParseContainerOptions(r.ShmSize, r.DockerArgs); err != nil {
			return err
		}
	}
	// services (VS Code, Jupyter, TensorBoard, SSH) are kept with the
	// job but not started, as on a compute instance and in pipeline steps:
	// the client says so. Azure's interactive examples run on clusters.
	return nil
}
