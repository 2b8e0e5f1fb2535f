package spec

// Bounds on every count and duration a spec can carry. They are far above
// what any real job or cluster asks for, and far below what would make the
// server allocate without limit or overflow a time.Duration: a spec that
// asked for 2^31 instances once made the autoscaler run out of memory on
// every start, before the owner could cancel the job.
const (
	// MaxInstances bounds resources.instance_count and a cluster's
	// min_instances and max_instances.
	MaxInstances = 1024
	// MaxProcessesPerInstance bounds distribution.process_count_per_instance
	// on any machine; a cluster also bounds it by its size's vCPUs.
	MaxProcessesPerInstance = 256
	// MaxTensorFlowTasks bounds worker_count and parameter_server_count.
	MaxTensorFlowTasks = MaxInstances * MaxProcessesPerInstance
	// MaxSeconds bounds limits.timeout and idle_time_before_scale_down:
	// 366 days, a long way from where seconds overflow a time.Duration
	// (about 292 years).
	MaxSeconds = 366 * 24 * 60 * 60
	// MaxQuotaCores bounds a family's core quota.
	MaxQuotaCores = 1 << 20
	// MaxCapacity bounds a local target's capacity (attempts at once).
	MaxCapacity = 4096
)

// CheckBounds reports every count and duration of a job outside its
// bound. Validate includes it; the workspace also runs it on stored jobs,
// which may predate a bound.
func (j *Job) CheckBounds() error {
	var es Errors
	j.checkBounds(&es)
	return es.err()
}

func (j *Job) checkBounds(es *Errors) {
	if l := j.Limits; l != nil && (l.Timeout < 0 || l.Timeout > MaxSeconds) {
		es.add("limits.timeout", "must be a whole number of seconds from 0 (no limit) to %d (366 days), got %d", MaxSeconds, l.Timeout)
	}
	if r := j.Resources; r != nil && (r.InstanceCount < 0 || r.InstanceCount > MaxInstances) {
		es.add("resources.instance_count", "must be from 1 (leave it out for 1) to %d, got %d", MaxInstances, r.InstanceCount)
	}
	if d := j.Distribution; d != nil {
		if d.ProcessCountPerInstance < 0 || d.ProcessCountPerInstance > MaxProcessesPerInstance {
			es.add("distribution.process_count_per_instance", "must be from 0 (one process) to %d, got %d; use one process per GPU or core", MaxProcessesPerInstance, d.ProcessCountPerInstance)
		}
		if d.ParameterServerCount < 0 || d.ParameterServerCount > MaxTensorFlowTasks {
			es.add("distribution.parameter_server_count", "must be from 0 to %d, got %d", MaxTensorFlowTasks, d.ParameterServerCount)
		}
		if d.WorkerCount < 0 || d.WorkerCount > MaxTensorFlowTasks {
			es.add("distribution.worker_count", "must be from 0 to %d, got %d", MaxTensorFlowTasks, d.WorkerCount)
		}
	}
}

// CheckBounds reports every count and duration of a compute outside its
// bound, as Job.CheckBounds does for jobs.
func (c *Compute) CheckBounds() error {
	var es Errors
	c.checkBounds(&es)
	if len(es) > 0 {
		return c.wrap(es)
	}
	return nil
}

func (c *Compute) checkBounds(es *Errors) {
	if c.Capacity < 0 || c.Capacity > MaxCapacity {
		es.add("capacity", "must be from 0 (one job per CPU) to %d, got %d", MaxCapacity, c.Capacity)
	}
	if n := c.MinInstances; n != nil && (*n < 0 || *n > MaxInstances) {
		es.add("min_instances", "must be from 0 to %d, got %d", MaxInstances, *n)
	}
	if n := c.MaxInstances; n != nil && *n > MaxInstances {
		es.add("max_instances", "must be at most %d, got %d", MaxInstances, *n)
	}
	if s := c.IdleTimeBeforeScaleDown; s != nil && (*s < 0 || *s > MaxSeconds) {
		es.add("idle_time_before_scale_down", "must be a whole number of seconds from 0 to %d (366 days), got %d", MaxSeconds, *s)
	}
	if c.DefaultTimeLimit < 0 || c.DefaultTimeLimit > MaxSeconds {
		es.add("default_time_limit", "must be a whole number of seconds from 0 (the partition's default) to %d (366 days), got %d", MaxSeconds, c.DefaultTimeLimit)
	}
}
