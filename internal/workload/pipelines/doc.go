// Package pipelines is the pipeline workload: pipeline jobs (type:
// pipeline), whose steps are command and sweep jobs the pipeline loop
// makes, each once the steps it takes inputs from have completed.
//
// A pipeline is a parent job, stored with its steps (store.Pipelines) and
// then a job like any other: the core shows it through the record type
// this package registers (its spec, and its steps in GetJob's view), and
// a cancel of it cascades to its steps. Everything the loop decides from
// is in the store, so a server started again goes on where the last one
// stopped; a step's job has a fixed name, so it is never made twice, and
// a step that would run what a completed step ran takes that step's
// outputs instead (reuse).
package pipelines
