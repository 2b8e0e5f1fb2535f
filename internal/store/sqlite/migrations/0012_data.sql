-- 0012_data: registered data assets (uri_file, uri_folder), kept as
-- models are (0009_models): a version's files are a snapshot in the blob
-- store, spec the rest of the data file as JSON owned by the workspace
-- service, seq the order of registration (latest is the newest version
-- not archived), archived 0 or 1.
CREATE TABLE data_assets (
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
