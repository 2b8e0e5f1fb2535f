"""Ferry's stand-in for azureml.contrib.services.aml_response."""
from ferry_aml_shim import AMLResponse  # noqa: F401
