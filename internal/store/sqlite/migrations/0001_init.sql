-- 0001_init: the first schema of the workspace store.
--
-- Times are INTEGER microseconds since the Unix epoch, UTC; NULL is the zero
-- time.Time ("not yet"), so the epoch itself stays a real instant.
-- JSON documents are TEXT kept byte for byte; NULL is a nil json.RawMessage.

CREATE TABLE computes (
	name     TEXT PRIMARY KEY,
	type     TEXT NOT NULL,
	spec     TEXT,
	state    TEXT NOT NULL,
	created  INTEGER,
	modified INTEGER
) STRICT;

-- seq is AUTOINCREMENT so that a Seq is never handed out twice, even after
-- the newest job is deleted: it is the submit order the scheduler's FIFO uses.
CREATE TABLE jobs (
	seq             INTEGER PRIMARY KEY AUTOINCREMENT,
	name            TEXT NOT NULL UNIQUE,
	display_name    TEXT NOT NULL,
	experiment_name TEXT NOT NULL,
	compute         TEXT NOT NULL,
	status          TEXT NOT NULL,
	status_reason   TEXT NOT NULL,
	priority        INTEGER NOT NULL,
	attempt         INTEGER NOT NULL,
	exit_code       INTEGER,
	error           TEXT NOT NULL,
	created_by      TEXT NOT NULL,
	cancel_by       TEXT NOT NULL,
	spec            TEXT,
	code_snapshot   TEXT NOT NULL,
	inputs          TEXT,
	outputs         TEXT,
	created         INTEGER,
	started         INTEGER,
	ended           INTEGER,
	heartbeat       INTEGER
) STRICT;

CREATE INDEX jobs_status ON jobs (status);
CREATE INDEX jobs_compute ON jobs (compute);

-- id orders a job's events by insertion, whatever their times say.
CREATE TABLE events (
	id          INTEGER PRIMARY KEY,
	job         TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
	time        INTEGER,
	from_status TEXT NOT NULL,
	to_status   TEXT NOT NULL,
	reason      TEXT NOT NULL
) STRICT;

CREATE INDEX events_job ON events (job);

-- value is nullable because SQLite stores a NaN as NULL; the store reads
-- NULL back as NaN (a diverged loss is a value worth keeping).
CREATE TABLE metrics (
	id    INTEGER PRIMARY KEY,
	job   TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
	name  TEXT NOT NULL,
	value REAL,
	step  INTEGER NOT NULL,
	time  INTEGER
) STRICT;

CREATE INDEX metrics_job_name ON metrics (job, name);

-- subject is not a foreign key: it names a user for owner tokens.
CREATE TABLE tokens (
	hash    TEXT PRIMARY KEY,
	kind    TEXT NOT NULL,
	subject TEXT NOT NULL,
	attempt INTEGER NOT NULL,
	created INTEGER
) STRICT;

CREATE INDEX tokens_kind_subject ON tokens (kind, subject);
