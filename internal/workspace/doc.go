// Package workspace is Ferry's domain: compute targets, jobs and their
// lifecycle, logs, metrics and outputs. It knows no HTTP and no SQL: the api
// package calls it, and it keeps state through store.Store and blob.Store and
// starts work through compute.Target.
package workspace
