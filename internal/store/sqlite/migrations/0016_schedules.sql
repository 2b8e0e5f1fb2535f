-- 0016_schedules: job schedules (`ferry schedule create`). spec and job
-- are JSON owned by the workspace service (the schedule file with its
-- trigger; the submission each firing makes). next_fire is the occurrence
-- fired next (NULL: the schedule has ended), last_fired the last one
-- fired, moved forward only and in the same transaction as the job that
-- firing created (FireSchedule), so no occurrence fires twice.
CREATE TABLE schedules (
	name       TEXT PRIMARY KEY,
	spec       TEXT,
	job        TEXT,
	enabled    INTEGER NOT NULL DEFAULT 1,
	next_fire  INTEGER,
	last_fired INTEGER,
	last_job   TEXT NOT NULL DEFAULT '',
	last_error TEXT NOT NULL DEFAULT '',
	created_by TEXT NOT NULL DEFAULT '',
	created    INTEGER,
	updated    INTEGER
) STRICT;
