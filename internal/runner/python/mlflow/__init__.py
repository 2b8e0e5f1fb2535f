"""Ferry's stand-in for the mlflow package (Python standard library only).

Ferry's runner puts the folder holding this package last on a job's
PYTHONPATH. When a real mlflow is importable by the job's python (from
site-packages, a virtualenv, or an earlier PYTHONPATH entry), importing
mlflow loads that one instead, unchanged, and it talks to the runner's
MLflow endpoint by itself. Otherwise this module serves the calls a
training script written for Azure ML makes, over the same REST API:

    start_run / active_run / end_run (a context manager), log_metric(s),
    log_param(s), set_tag(s), set_experiment, log_artifact(s), log_text,
    log_dict, log_figure, sklearn.save_model / log_model / load_model,
    pytorch.save_model / log_model / load_model, MlflowClient's log_metric,
    log_param, set_tag; autolog functions do nothing and say so once.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _real_spec():
    """The spec of an mlflow elsewhere on sys.path, or None."""
    path = []
    for p in sys.path:
        try:
            if os.path.abspath(p or os.getcwd()) == _HERE:
                continue
        except OSError:
            continue
        path.append(p)
    return importlib.machinery.PathFinder.find_spec(__name__, path)


_REAL = _real_spec()
if _REAL is not None:
    _mod = importlib.util.module_from_spec(_REAL)
    sys.modules[__name__] = _mod
    try:
        _REAL.loader.exec_module(_mod)
    except BaseException:
        del sys.modules[__name__]
        raise

import json  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
import urllib.parse  # noqa: E402

__version__ = "2.0.0+ferry"
_SHIM = True


class MlflowException(Exception):
    """An error the tracking endpoint answered, or a call Ferry lacks."""

    def __init__(self, message, error_code="INTERNAL_ERROR"):
        super().__init__(message)
        self.message = message
        self.error_code = error_code


def _uri():
    return os.environ.get("MLFLOW_TRACKING_URI", "")


_tracking_uri = None


def get_tracking_uri():
    return _tracking_uri or _uri()


def set_tracking_uri(uri):
    global _tracking_uri
    _tracking_uri = uri


def _call(method, path, body=None, query=None):
    """Calls the tracking API; retries while the endpoint says 503."""
    # Imported here: urllib.request costs a script that only imports
    # mlflow (and logs nothing) tens of milliseconds.
    import urllib.error
    import urllib.request

    base = get_tracking_uri().rstrip("/")
    if not base.startswith(("http://", "https://")):
        _say_once("nouri", "mlflow (Ferry): MLFLOW_TRACKING_URI is not an http(s) URI; "
                  "values are not recorded")
        return {}
    url = base + "/api/2.0/mlflow/" + path
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        headers["Authorization"] = "Bearer " + token
    delay = 0.2
    for attempt in range(8):
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
            except ValueError:
                err = {"message": raw.decode(errors="replace")}
            if e.code in (429, 500, 502, 503, 504) and attempt < 7:
                time.sleep(delay)
                delay = min(delay * 2, 10)
                continue
            raise MlflowException("%s %s: %s" % (method, path, err.get("message", e.code)),
                                  err.get("error_code", "INTERNAL_ERROR")) from None
        except (urllib.error.URLError, ConnectionError):
            if attempt == 7:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10)
    return {}


_said = set()


def _say_once(what, msg):
    if what not in _said:
        _said.add(what)
        print(msg, file=sys.stderr, flush=True)


def _now_ms():
    return int(time.time() * 1000)


class RunInfo:
    def __init__(self, d):
        self.run_id = d.get("run_id", "")
        self.run_uuid = self.run_id
        self.run_name = d.get("run_name", "")
        self.experiment_id = d.get("experiment_id", "")
        self.status = d.get("status", "RUNNING")
        self.start_time = d.get("start_time")
        self.end_time = d.get("end_time")
        self.artifact_uri = d.get("artifact_uri", "")
        self.lifecycle_stage = d.get("lifecycle_stage", "active")
        self.user_id = d.get("user_id", "")


class RunData:
    def __init__(self, d):
        self.metrics = {m["key"]: m["value"] for m in d.get("metrics", [])}
        self.params = {p["key"]: p["value"] for p in d.get("params", [])}
        self.tags = {t["key"]: t["value"] for t in d.get("tags", [])}


class Run:
    def __init__(self, d):
        self.info = RunInfo(d.get("info", {}))
        self.data = RunData(d.get("data", {}))


class ActiveRun(Run):
    """The job's run; `with mlflow.start_run():` ends it on leaving."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        end_run("FINISHED" if exc_type is None else "FAILED")
        return False


class Experiment:
    def __init__(self, d):
        self.experiment_id = d.get("experiment_id", "")
        self.name = d.get("name", "")
        self.artifact_location = d.get("artifact_location", "")
        self.lifecycle_stage = d.get("lifecycle_stage", "active")
        self.tags = {}


_run_stack = []


def _run_id():
    return os.environ.get("MLFLOW_RUN_ID", "")


def start_run(run_id=None, experiment_id=None, run_name=None, nested=False,
              tags=None, description=None, log_system_metrics=None, **_):
    """Starts (or, nested, re-enters) the job's one run."""
    if _run_stack and not nested:
        raise MlflowException("Run with UUID %s is already active. To start a nested run, "
                              "call start_run with nested=True" % _run_stack[-1].info.run_id)
    rid = run_id or _run_id()
    if rid:
        d = _call("GET", "runs/get", query={"run_id": rid}).get("run", {})
        _call("POST", "runs/update", {"run_id": rid, "status": "RUNNING", "run_name": run_name or ""})
    else:
        d = _call("POST", "runs/create", {"experiment_id": experiment_id or "",
                                          "start_time": _now_ms(), "run_name": run_name or ""}).get("run", {})
    d.setdefault("info", {}).setdefault("run_id", rid)
    run = ActiveRun(d)
    _run_stack.append(run)
    t = dict(tags or {})
    if description:
        t["mlflow.note.content"] = description
    if t:
        set_tags(t)
    return run


def active_run():
    return _run_stack[-1] if _run_stack else None


def last_active_run():
    return active_run()


def end_run(status="FINISHED"):
    if not _run_stack:
        return
    run = _run_stack.pop()
    if not _run_stack:
        _call("POST", "runs/update", {"run_id": run.info.run_id, "status": status, "end_time": _now_ms()})


def _ensure_run():
    if not _run_stack:
        start_run()
    return _run_stack[-1].info.run_id


def get_run(run_id):
    return Run(_call("GET", "runs/get", query={"run_id": run_id}).get("run", {}))


def log_metric(key, value, step=None, timestamp=None, synchronous=None, run_id=None, **_):
    _call("POST", "runs/log-metric", {"run_id": run_id or _ensure_run(), "key": key, "value": float(value),
                                      "timestamp": timestamp or _now_ms(), "step": int(step or 0)})


def log_metrics(metrics, step=None, synchronous=None, run_id=None, timestamp=None, **_):
    ts = timestamp or _now_ms()
    items = [{"key": k, "value": float(v), "timestamp": ts, "step": int(step or 0)} for k, v in metrics.items()]
    rid = run_id or _ensure_run()
    for i in range(0, len(items), 1000):
        _call("POST", "runs/log-batch", {"run_id": rid, "metrics": items[i:i + 1000]})


def log_param(key, value, synchronous=None):
    _call("POST", "runs/log-parameter", {"run_id": _ensure_run(), "key": key, "value": str(value)})
    return value


def log_params(params, synchronous=None):
    items = [{"key": k, "value": str(v)} for k, v in params.items()]
    rid = _ensure_run()
    for i in range(0, len(items), 100):
        _call("POST", "runs/log-batch", {"run_id": rid, "params": items[i:i + 100]})


def set_tag(key, value, synchronous=None):
    _call("POST", "runs/set-tag", {"run_id": _ensure_run(), "key": key, "value": str(value)})


def set_tags(tags, synchronous=None):
    items = [{"key": k, "value": str(v)} for k, v in tags.items()]
    rid = _ensure_run()
    for i in range(0, len(items), 100):
        _call("POST", "runs/log-batch", {"run_id": rid, "tags": items[i:i + 100]})


def set_experiment(experiment_name=None, experiment_id=None):
    if experiment_name:
        return Experiment(_call("GET", "experiments/get-by-name",
                                query={"experiment_name": experiment_name}).get("experiment", {}))
    return Experiment(_call("GET", "experiments/get", query={"experiment_id": experiment_id}).get("experiment", {}))


def get_experiment_by_name(name):
    return set_experiment(name)


def create_experiment(name, artifact_location=None, tags=None):
    return _call("POST", "experiments/create", {"name": name}).get("experiment_id", "")


def _outputs():
    return os.environ.get("FERRY_OUTPUTS_DIR") or os.path.join(os.getcwd(), "outputs")


def get_artifact_uri(artifact_path=None):
    p = _outputs()
    if artifact_path:
        p = os.path.join(p, artifact_path)
    return "file://" + urllib.parse.quote(os.path.abspath(p))


def _artifact_dir(artifact_path):
    d = _outputs()
    if artifact_path:
        d = os.path.join(d, artifact_path)
        if os.path.relpath(d, _outputs()).startswith(".."):
            raise MlflowException("artifact_path %r leaves the job's outputs folder" % artifact_path,
                                  "INVALID_PARAMETER_VALUE")
    os.makedirs(d, exist_ok=True)
    return d


def log_artifact(local_path, artifact_path=None, run_id=None):
    """Copies a file or folder into the job's ./outputs (uploaded at the end)."""
    d = _artifact_dir(artifact_path)
    dst = os.path.join(d, os.path.basename(os.path.normpath(local_path)))
    if os.path.abspath(local_path) == os.path.abspath(dst):
        return
    if os.path.isdir(local_path):
        shutil.copytree(local_path, dst, dirs_exist_ok=True)
    else:
        shutil.copy2(local_path, dst)


def log_artifacts(local_dir, artifact_path=None, run_id=None):
    d = _artifact_dir(artifact_path)
    if os.path.abspath(local_dir) != os.path.abspath(d):
        shutil.copytree(local_dir, d, dirs_exist_ok=True)


def log_text(text, artifact_file, run_id=None):
    d = _artifact_dir(os.path.dirname(artifact_file))
    with open(os.path.join(d, os.path.basename(artifact_file)), "w") as f:
        f.write(text)


def log_dict(dictionary, artifact_file, run_id=None):
    log_text(json.dumps(dictionary, indent=2), artifact_file)


def log_figure(figure, artifact_file, save_kwargs=None, run_id=None):
    d = _artifact_dir(os.path.dirname(artifact_file))
    figure.savefig(os.path.join(d, os.path.basename(artifact_file)), **(save_kwargs or {}))


def log_image(image, artifact_file=None, key=None, step=None, **_):
    _say_once("log_image", "mlflow (Ferry): mlflow.log_image is not supported here; nothing is saved")


def log_input(*_, **__):
    pass


def autolog(*_, **__):
    """Does nothing: autologging needs the real mlflow."""
    _say_once("autolog", "mlflow (Ferry): autolog is not supported here (install mlflow in the job's "
              "environment for it); log with mlflow.log_metric and mlflow.log_param")


def _mlmodel(path, flavor, data, extra=""):
    with open(os.path.join(path, "MLmodel"), "w") as f:
        f.write("artifact_path: %s\nflavors:\n  python_function:\n    loader_module: mlflow.%s\n"
                "    python_version: %s\n  %s:\n    %s: %s\n%s"
                "mlflow_version: %s\nsaved_by: ferry mlflow shim\n"
                % (os.path.basename(path), flavor, sys.version.split()[0], flavor,
                   "pickled_model" if flavor == "sklearn" else "model_data", data, extra, __version__))


def _save_dir(path):
    if os.path.exists(path) and os.listdir(path):
        raise MlflowException("Path '%s' already exists and is not empty" % path, "RESOURCE_ALREADY_EXISTS")
    os.makedirs(path, exist_ok=True)


def _sk_save_model(sk_model, path, **_):
    _save_dir(path)
    with open(os.path.join(path, "model.pkl"), "wb") as f:
        pickle.dump(sk_model, f)
    _mlmodel(path, "sklearn", "model.pkl", "    serialization_format: pickle\n")


def _sk_log_model(sk_model, artifact_path="model", **kw):
    _sk_save_model(sk_model, os.path.join(_outputs(), artifact_path or "model"))


def _local_model_path(model_uri):
    if model_uri.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlparse(model_uri).path)
    if model_uri.startswith("runs:/"):
        return os.path.join(_outputs(), model_uri.split("/", 2)[2])
    return model_uri


def _sk_load_model(model_uri, **_):
    with open(os.path.join(_local_model_path(model_uri), "model.pkl"), "rb") as f:
        return pickle.load(f)


def _pt_save_model(pytorch_model, path, **_):
    import torch  # the job's own; the shim needs it only here

    _save_dir(path)
    os.makedirs(os.path.join(path, "data"))
    torch.save(pytorch_model, os.path.join(path, "data", "model.pth"))
    _mlmodel(path, "pytorch", "data")


def _pt_log_model(pytorch_model, artifact_path="model", **kw):
    _pt_save_model(pytorch_model, os.path.join(_outputs(), artifact_path or "model"))


def _pt_load_model(model_uri, **kw):
    import torch

    path = os.path.join(_local_model_path(model_uri), "data", "model.pth")
    # The file holds the whole module, as mlflow's does: torch 2.6 and
    # later load only weights unless told otherwise; older ones lack the
    # argument.
    kw.setdefault("weights_only", False)
    try:
        return torch.load(path, **kw)
    except TypeError:
        kw.pop("weights_only")
        return torch.load(path, **kw)


class MlflowClient:
    """The run-scoped calls of mlflow.tracking.MlflowClient."""

    def __init__(self, tracking_uri=None, registry_uri=None):
        if tracking_uri:
            set_tracking_uri(tracking_uri)

    def get_run(self, run_id):
        return get_run(run_id)

    def log_metric(self, run_id, key, value, timestamp=None, step=None, **_):
        log_metric(key, value, step=step, timestamp=timestamp, run_id=run_id)

    def log_param(self, run_id, key, value, **_):
        _call("POST", "runs/log-parameter", {"run_id": run_id, "key": key, "value": str(value)})
        return value

    def set_tag(self, run_id, key, value, **_):
        _call("POST", "runs/set-tag", {"run_id": run_id, "key": key, "value": str(value)})

    def log_batch(self, run_id, metrics=(), params=(), tags=(), **_):
        _call("POST", "runs/log-batch", {
            "run_id": run_id,
            "metrics": [{"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step} for m in metrics],
            "params": [{"key": p.key, "value": p.value} for p in params],
            "tags": [{"key": t.key, "value": t.value} for t in tags]})

    def set_terminated(self, run_id, status="FINISHED", end_time=None):
        _call("POST", "runs/update", {"run_id": run_id, "status": status, "end_time": end_time or _now_ms()})

    def get_experiment_by_name(self, name):
        return get_experiment_by_name(name)


def _submodule(name, **attrs):
    m = types.ModuleType(__name__ + "." + name)
    m.__dict__.update(attrs)
    sys.modules[m.__name__] = m
    globals()[name] = m
    return m


if _REAL is None:
    _submodule("sklearn", save_model=_sk_save_model, log_model=_sk_log_model,
               load_model=_sk_load_model, autolog=autolog)
    _submodule("pytorch", save_model=_pt_save_model, log_model=_pt_log_model,
               load_model=_pt_load_model, autolog=autolog)
    for _flavor in ("tensorflow", "keras", "xgboost", "lightgbm", "transformers", "pyfunc"):
        _submodule(_flavor, autolog=autolog)
    _submodule("tracking", MlflowClient=MlflowClient)
    _submodule("exceptions", MlflowException=MlflowException)
    _submodule("entities", Run=Run, RunInfo=RunInfo, RunData=RunData, Experiment=Experiment)
