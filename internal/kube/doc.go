// Package kube is Ferry's Kubernetes API client: typed clients for the
// few API groups Ferry uses (core/v1, batch/v1, apps/v1, discovery/v1,
// authorization/v1, autoscaling/v1), built on client-go's rest clients
// with a scheme of their own, and informers over them.
//
// It exists so that the ferry binary does not link client-go's typed
// clientset (k8s.io/client-go/kubernetes): that clientset's scheme
// package registers every API group of Kubernetes in its init, and every
// process start of the binary (each job's runner-shim and runner among
// them) pays for it, Kubernetes used or not. The scheme here is built on
// first use. The methods keep the clientset's signatures, so code reads
// as it would with client-go's (cs.CoreV1().Pods(ns).Get(ctx, name,
// metav1.GetOptions{})).
package kube
