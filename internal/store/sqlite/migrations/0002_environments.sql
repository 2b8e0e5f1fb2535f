-- 0002_environments: registered environments, and the resolved environment
-- of each job (JSON owned by the workspace service; NULL for older jobs).

ALTER TABLE jobs ADD COLUMN environment TEXT;

-- seq orders the versions of a name by registration: the latest version is
-- the one registered last, as in Azure ML.
CREATE TABLE environments (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	name        TEXT NOT NULL,
	version     TEXT NOT NULL,
	description TEXT NOT NULL,
	spec        TEXT,
	hash        TEXT NOT NULL,
	created     INTEGER,
	UNIQUE (name, version)
) STRICT;
