-- 0010_endpoints: online endpoints. spec is the endpoint file as JSON
-- owned by the workspace service (description, tags, auth_mode, traffic,
-- mirror_traffic, ...); state is its provisioning state as Azure names it.
-- primary_key and secondary_key are the endpoint's keys sealed with the
-- workspace key (never plain text): only get-credentials opens them.
CREATE TABLE endpoints (
	name          TEXT PRIMARY KEY,
	spec          TEXT NOT NULL,
	state         TEXT NOT NULL,
	primary_key   TEXT NOT NULL,
	secondary_key TEXT NOT NULL,
	created       INTEGER,
	updated       INTEGER
) STRICT;
