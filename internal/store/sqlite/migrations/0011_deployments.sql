-- 0011_deployments: online deployments. spec is the workspace's record of
-- the deployment as JSON (its file, where its replicas run, the snapshots
-- they use); replicas is the workspace's record of the jobs that serve it,
-- as JSON; state is its provisioning state as Azure names it, reason why
-- it failed. Both JSON columns are opaque to the store.
CREATE TABLE deployments (
	endpoint TEXT NOT NULL,
	name     TEXT NOT NULL,
	spec     TEXT NOT NULL,
	state    TEXT NOT NULL,
	reason   TEXT NOT NULL DEFAULT '',
	replicas TEXT NOT NULL DEFAULT '{}',
	created  INTEGER,
	updated  INTEGER,
	PRIMARY KEY (endpoint, name)
) STRICT;
