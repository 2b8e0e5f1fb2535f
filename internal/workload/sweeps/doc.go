// Package sweeps is the sweep workload: sweep jobs (type: sweep), the
// job type and the loop that drives them.
//
// A sweep job is a job of its own (its record holds the sweep's spec and
// status) whose trials are ordinary command jobs the server creates. The
// sweep loop drives every open sweep once a second and whenever a job
// changes: it creates trials up to the limits, cancels those the early
// termination policy cuts, cascades a cancel and the sweep's timeout, and
// ends the sweep when its last trial has ended.
//
// Everything it decides is a function of the store: a trial's parameters
// are stored (sweep_trials) before its job is created, under a name made
// from the sweep's and the trial's index, so a server killed at any point
// creates the missing job of a stored trial at its next pass and never a
// trial twice; sampling is a function of the sweep's seed (picked at
// submit and stored in its spec) and the trial's index, and bayesian
// sampling's history is what the store had when the trial was stored.
//
// The sweep's record has no compute (its trials have), so it holds no
// slot of a target; it is Running from submit, and has no lease to renew
// (the core's lease check passes over jobs without a compute).
package sweeps
