// Package autoscale decides when a cluster grows and shrinks: how many nodes
// to launch for the jobs waiting on it, which idle nodes to remove, and why a
// cluster that should grow cannot ("queued: cluster cpu-cluster at
// max_instances 4", "queued: quota for family DSv2 is 16/16 cores").
//
// Decide is a pure function of a snapshot and the time, which the caller
// passes in; it neither reads a clock nor calls a provider, so every rule is
// tested with a fixed clock and no machines. The loop that takes snapshots,
// launches and terminates nodes through a node provider, and records the
// reasons as scaling events lives elsewhere.
package autoscale
