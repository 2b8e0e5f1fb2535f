-- The studio's job list filters by experiment, newest first, a page at a
-- time: an index on experiment_name (which, like every index, ends with
-- the rowid, seq) serves `WHERE experiment_name = ? AND seq < ? ORDER BY
-- seq DESC` without a sort, as jobs_status and jobs_compute do for theirs.
CREATE INDEX jobs_experiment ON jobs (experiment_name);
