-- 0013_datastores: datastores that job inputs name as
-- azureml://datastores/NAME/paths/PATH. spec is the datastore file as JSON
-- owned by the workspace service, without its credentials (never kept);
-- type is its type (local_folder, http, azure_blob, ...). Creating one
-- that exists replaces its spec, as `az ml datastore create` updates.
CREATE TABLE datastores (
	name    TEXT PRIMARY KEY,
	type    TEXT NOT NULL,
	spec    TEXT NOT NULL,
	created INTEGER,
	updated INTEGER
) STRICT;
