// Package schedules is the job schedule workload: a schedule fires a job
// on the occurrences of its trigger (cron or recurrence, computed by
// internal/schedule).
//
// A schedule stores the submission each firing makes (a job's spec and
// the snapshots uploaded once, at create time), and the schedule loop
// submits it as the API does when an occurrence comes: a command or
// sweep job through the core's SubmitJob, a pipeline job through the
// pipeline workload (internal/workload/pipelines). The firing's job and
// the schedule's last fired occurrence are written in one transaction
// (store.FireSchedule), which refuses an occurrence at or before the last
// fired one: a server killed at any moment fires each occurrence at most
// once, and one that was down fires only the latest occurrence it missed
// (schedule.Clock.Due).
package schedules
