-- 0003_nodes: the machines of pool computes, their scaling and health
-- events, per-family core quotas and enabled restricted sizes; and where
-- each job's current attempt runs (JSON owned by the workspace service; NULL
-- until it is placed).

ALTER TABLE jobs ADD COLUMN placement TEXT;

-- compute is not a foreign key: deleting a compute does not remove its
-- nodes, whose machines the workspace must give back first.
CREATE TABLE nodes (
	name       TEXT PRIMARY KEY,
	compute    TEXT NOT NULL,
	state      TEXT NOT NULL,
	reason     TEXT NOT NULL,
	size       TEXT NOT NULL,
	machine    TEXT NOT NULL,
	address    TEXT NOT NULL,
	facts      TEXT,
	created    INTEGER,
	joined     INTEGER,
	heartbeat  INTEGER,
	idle_since INTEGER
) STRICT;

CREATE INDEX nodes_compute ON nodes (compute, created, name);

-- id orders events with equal times by insertion. Not a foreign key either:
-- the history of a deleted compute stays readable.
CREATE TABLE compute_events (
	id      INTEGER PRIMARY KEY,
	compute TEXT NOT NULL,
	time    INTEGER,
	kind    TEXT NOT NULL,
	message TEXT NOT NULL
) STRICT;

CREATE INDEX compute_events_compute_time ON compute_events (compute, time, id);

-- A family without a row has the default limit.
CREATE TABLE quotas (
	family TEXT PRIMARY KEY,
	cores  INTEGER NOT NULL
) STRICT;

-- A restricted size is enabled while it has a row.
CREATE TABLE enabled_sizes (
	size TEXT PRIMARY KEY
) STRICT;
