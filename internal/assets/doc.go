// Package assets is the workspace's registries: models, data assets,
// environments (registered, then the curated catalog), command components
// and datastores, the checks of references to them, and the resolution of
// a job's environment and inputs against them.
//
// The workspace makes one Assets (New) and hands it what it needs of the
// job core through Core: whether a snapshot was uploaded, a snapshot's
// manifest, the computes a reference may name. Assets read and write only
// their own part of the store (Store). This package must not import the
// workspace; the workspace imports it.
package assets
