"""Ferry's stand-in for azureml-contrib-services (see ferry_aml_shim)."""
