-- 0018_run_values: a job's MLflow params and tags (kind 'param' or 'tag'),
-- one value per key, the last one logged. Metrics have their own table.

CREATE TABLE run_values (
	job   TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
	kind  TEXT NOT NULL CHECK (kind IN ('param', 'tag')),
	key   TEXT NOT NULL,
	value TEXT NOT NULL,
	PRIMARY KEY (job, kind, key)
) STRICT;
