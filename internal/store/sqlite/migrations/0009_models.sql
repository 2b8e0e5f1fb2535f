-- 0009_models: registered models. A version's files are a snapshot in
-- the blob store (snapshot, the manifest's id); spec is the rest of the
-- model file as JSON owned by the workspace service. seq orders the
-- versions of a name by registration, as for environments: latest is the
-- newest version that is not archived. archived is 0 or 1.
CREATE TABLE models (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	name        TEXT NOT NULL,
	version     TEXT NOT NULL,
	type        TEXT NOT NULL,
	description TEXT NOT NULL,
	spec        TEXT,
	snapshot    TEXT NOT NULL,
	hash        TEXT NOT NULL,
	archived    INTEGER NOT NULL DEFAULT 0,
	created     INTEGER,
	UNIQUE (name, version)
) STRICT;
