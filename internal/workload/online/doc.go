// Package online is Ferry's online endpoints (Azure ML v2
// managedOnlineEndpoint and its deployments), a workload built on the
// job core (internal/workspace): an endpoint is a name, two keys and a
// traffic split; a deployment's replicas are jobs the deployment
// controller submits, probes, routes, rolls and scales (or, on a
// Kubernetes compute, objects the cluster keeps); the gateway
// (internal/serving/gateway) routes scoring requests to the ready ones.
//
// The package sees the core through workspace.Jobs and the few reads of
// snapshots, logs and environments a replica is made of (Core), and plugs
// into it as a controller that hears of its replicas' changes and logs
// and gives their assignments the replica's secret. How many replicas a
// deployment wants is a pure function of a snapshot (DecideScale).
package online
