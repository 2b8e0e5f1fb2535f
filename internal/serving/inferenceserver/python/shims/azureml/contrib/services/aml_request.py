"""Ferry's stand-in for azureml.contrib.services.aml_request."""
from ferry_aml_shim import AMLRequest, Headers, MultiDict, rawhttp  # noqa: F401
