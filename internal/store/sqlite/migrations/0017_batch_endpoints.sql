-- 0017_batch_endpoints: batch endpoints and their deployments. spec is
-- the workspace's record as JSON (the file, and for a deployment its
-- uploads and resolved model), opaque to the store; jobs is the JSON list
-- of the jobs the endpoint's invocations made, newest last.
CREATE TABLE batch_endpoints (
	name    TEXT PRIMARY KEY,
	spec    TEXT NOT NULL,
	jobs    TEXT NOT NULL DEFAULT '[]',
	created INTEGER,
	updated INTEGER
) STRICT;

CREATE TABLE batch_deployments (
	endpoint TEXT NOT NULL,
	name     TEXT NOT NULL,
	spec     TEXT NOT NULL,
	created  INTEGER,
	updated  INTEGER,
	PRIMARY KEY (endpoint, name)
) STRICT;
