// Package workspace is Ferry's domain: compute targets, jobs and their
// lifecycle, logs, metrics and outputs, and the registered assets (Assets:
// models, data assets, environments, components, datastores) that jobs
// refer to. It knows no HTTP and no SQL: the api package calls it, and it
// keeps state through store.Store and blob.Store and starts work through
// compute.Target.
package workspace
