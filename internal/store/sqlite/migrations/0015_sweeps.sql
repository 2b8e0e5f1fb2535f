-- 0015_sweeps: sweep jobs. A sweep is a job (its row in jobs holds the
-- sweep's spec and status); this table lists the sweeps the server still
-- drives (done 0) so that it need not read every job to find them, and
-- sweep_trials records each trial's parameters under the sweep's name
-- before the trial's job is created, so that a server killed in between
-- creates that same trial at its next pass, never a second one.
CREATE TABLE sweeps (
	name    TEXT PRIMARY KEY,
	done    INTEGER NOT NULL DEFAULT 0,
	created INTEGER
) STRICT;

CREATE TABLE sweep_trials (
	sweep   TEXT NOT NULL,
	idx     INTEGER NOT NULL,
	job     TEXT NOT NULL,
	params  TEXT NOT NULL,
	created INTEGER,
	PRIMARY KEY (sweep, idx)
) STRICT;
