// Package sizes is the catalog of node shapes (vCPUs, memory, GPUs, family,
// price) that clusters and compute instances are made of, and the
// per-workspace core quotas checked before a scale-up.
//
// The built-in catalog carries the common Azure VM size names with their real
// shapes, so Azure ML compute files (size: Standard_DS3_v2) work unchanged;
// server config extends or overrides it with the machines a team really has.
// Everything here is pure data and functions of it: no I/O, no clock.
package sizes
