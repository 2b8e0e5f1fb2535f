"""Ferry's stand-in for azureml_inference_server_http.api.aml_request."""
from ferry_aml_shim import AMLRequest, Headers, MultiDict, rawhttp  # noqa: F401
