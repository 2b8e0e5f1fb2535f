// Package batch is batch endpoints (Azure ML v2 batchEndpoint and
// modelBatchDeployment), a workload built on the job core
// (internal/workspace). An endpoint names its deployments and the
// default one; a deployment is a scoring script, a model, an environment
// and a compute, with how its jobs share and retry the work. Nothing
// runs until an invocation: each is one ordinary job (experiment
// batch-ENDPOINT) on the deployment's compute, over
// resources.instance_count nodes like any multi-node job, whose command
// runs Ferry's batch driver (internal/serving/batchdriver, embedded in
// the binary and stored once as a snapshot the job takes as its input
// ferry_batch_driver) with the deployment's script. So batch jobs get
// what jobs have: agents, runners, environments, logs, metrics, cancel,
// `ferry job show|stream|download`; the driver reports its progress as
// the job's metrics.
//
// The package has no loop and no job type of its own: the core submits,
// runs and shows a batch job as any command job; the API's batch routes
// call Endpoints.
package batch
