"""Ferry's stand-in for azureml_inference_server_http.api.aml_response."""
from ferry_aml_shim import AMLResponse  # noqa: F401
