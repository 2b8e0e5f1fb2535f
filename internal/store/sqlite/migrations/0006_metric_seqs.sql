-- 0006_metric_seqs: the highest numbered metric value stored per runner of
-- an attempt (one per node rank). A runner buffers what its job logs and
-- numbers the values; a batch sent again after a lost answer or a server
-- restart is stored once.

CREATE TABLE metric_seqs (
	job     TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
	attempt INTEGER NOT NULL,
	rank    INTEGER NOT NULL,
	seq     INTEGER NOT NULL,
	PRIMARY KEY (job, attempt, rank)
) STRICT;
