// Package kubereplicas runs the replicas of an online deployment on a
// Kubernetes cluster: Azure's kubernetesOnlineDeployment as a Deployment
// and a Service in one namespace.
//
//   - Apply creates or updates the Deployment and Service for a pod
//     template the caller gives (its image and command: Ferry's inference
//     server, see HarnessConfigMap and HarnessTemplate), with the
//     deployment's readiness and liveness probes (GET / on the server's
//     port), a RollingUpdate strategy that never drops capacity
//     (maxUnavailable 0, maxSurge 1) and a drain on the way out (a preStop
//     sleep while the gateway stops routing to the pod, then SIGTERM, on
//     which the server finishes the requests under way). The Spec's
//     ConfigMaps and Secrets (an image pull Secret) are owned by the
//     Deployment and go with it.
//   - WatchReady follows the Service's EndpointSlices with an informer and
//     calls back with the ready, non-terminating replicas' base URLs
//     whenever they change: what the gateway routes to.
//   - Scale sets the replica count through the Deployment's scale
//     subresource, for Ferry's own concurrency-based scaler (a
//     HorizontalPodAutoscaler would need metrics-server and sees CPU, not
//     requests in flight).
//   - Status maps the Deployment, its ReplicaSets and its pods to Azure's
//     states (Creating, Updating, Succeeded, Failed) with the reason: a
//     scoring script whose init() fails is Failed with its traceback, an
//     image that cannot be had is Failed naming it, a pod that no node
//     can take keeps its state with the scheduler's message.
//   - Delete removes every object of a deployment with foreground
//     propagation; Remaining says what is still there.
//
// Every object carries the labels LabelEndpoint, LabelDeployment and
// LabelReplicasOf, so what belongs to a deployment is found by label,
// after a restart too. The package knows nothing of the workspace: the
// caller owns the deployment's record and decides what to apply.
package kubereplicas
