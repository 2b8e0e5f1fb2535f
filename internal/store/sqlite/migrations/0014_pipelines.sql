-- 0014_pipelines: registered command components and the steps of
-- pipeline jobs.
--
-- components are kept as environments and models are: spec is the
-- component as JSON owned by the workspace service, code_snapshot its
-- uploaded code, hash its content digest, seq the order of registration.
CREATE TABLE components (
	seq           INTEGER PRIMARY KEY AUTOINCREMENT,
	name          TEXT NOT NULL,
	version       TEXT NOT NULL,
	description   TEXT NOT NULL,
	spec          TEXT,
	code_snapshot TEXT NOT NULL,
	hash          TEXT NOT NULL,
	created       INTEGER,
	UNIQUE (name, version)
) STRICT;

-- A pipeline job is a row of jobs (its parent); each of its steps is a
-- row here, made with the parent. job is the step's own job once it is
-- made ('' before); reuse_key identifies what the step ran (component,
-- inputs, environment), so a later step with the same key may take its
-- outputs; reused_from is the job whose outputs a reused step took;
-- state and reason are set for a step that never got a job (Skipped,
-- Canceled, Failed at submit).
CREATE TABLE pipeline_steps (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	pipeline    TEXT NOT NULL,
	step        TEXT NOT NULL,
	job         TEXT NOT NULL DEFAULT '',
	reuse_key   TEXT NOT NULL DEFAULT '',
	reused_from TEXT NOT NULL DEFAULT '',
	state       TEXT NOT NULL DEFAULT '',
	reason      TEXT NOT NULL DEFAULT '',
	UNIQUE (pipeline, step)
) STRICT;
CREATE INDEX pipeline_steps_reuse ON pipeline_steps (reuse_key) WHERE reuse_key != '';
