"""Ferry's scoring script for an MLflow model deployed without one, as Azure
scores such models: every file of a mini-batch (CSV, or Parquet by its
.parquet name) is read with pandas and predicted with mlflow.pyfunc, and
each prediction is one row, followed by the name of the file it came from.
The deployment's environment needs mlflow and pandas (and what the model
itself needs)."""

import os


def init():
    global model
    try:
        import mlflow.pyfunc  # noqa: F401
        import pandas  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "an MLflow model deployed without a scoring script is scored with mlflow and pandas, "
            "which the deployment's environment lacks (%s): add them to its conda file, "
            "or give a scoring script (code_configuration)" % e) from None
    root = os.environ.get("AZUREML_MODEL_DIR", "")
    path = None
    for d, _, files in sorted(os.walk(root)):
        if "MLmodel" in files:
            path = d
            break
    if path is None:
        raise FileNotFoundError("no MLmodel file under the model (%s): it is not an MLflow model; give a scoring script (code_configuration)" % root)
    import mlflow.pyfunc
    model = mlflow.pyfunc.load_model(path)


def run(mini_batch):
    import pandas as pd
    out = []
    for f in mini_batch:
        if f.lower().endswith(".parquet"):
            data = pd.read_parquet(f)
        else:
            data = pd.read_csv(f)
        pred = model.predict(data)
        if not isinstance(pred, pd.DataFrame):
            pred = pd.DataFrame({"prediction": list(pred)})
        pred["file"] = os.path.basename(f)
        out.append(pred)
    return pd.concat(out) if out else []
