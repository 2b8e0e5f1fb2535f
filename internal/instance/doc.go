// Package instance holds the pure logic of compute instances (type
// computeinstance): the start/stop schedules Azure ML allows on them (cron
// or recurrence, in a time zone), their setup scripts, the state machine of
// an instance, and Decide, the reconciler's decision for one instance at one
// instant. Job schedules (package schedule) read their triggers with
// ParseJobTrigger, the same parser with end_time.
//
// Nothing here reads a clock, sleeps or does I/O: time comes in as an
// argument, so idle timeouts and schedules are tested by passing instants.
// The loop that calls Decide, runs scripts and drives node providers lives
// elsewhere.
package instance
