"""Ferry's stand-in for the import paths of azureml-inference-server-http
that scoring scripts use (see ferry_aml_shim)."""
