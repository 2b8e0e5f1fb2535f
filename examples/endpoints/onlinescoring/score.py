"""A scoring script with Azure's shape (init() once, run() per request),
scoring a linear model with nothing but Python's standard library."""

import json
import os

model = None


def init():
    """Runs once per worker, before any request: load the model.

    AZUREML_MODEL_DIR holds a model registered (or given inline) as a
    folder under that folder's name, so ./model-1/model/ is read from
    $AZUREML_MODEL_DIR/model/, as on Azure.
    """
    global model
    path = os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "weights.json")
    with open(path) as f:
        model = json.load(f)
    print("loaded", model["name"], "from", path)


def run(raw_data):
    """Runs per request: raw_data is the request body as a str; what is
    returned goes back to the client as JSON."""
    rows = json.loads(raw_data)["data"]
    return {
        "model": model["name"],
        "predictions": [model["bias"] + sum(w * x for w, x in zip(model["w"], row)) for row in rows],
    }
