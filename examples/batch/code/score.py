"""A batch scoring script for Azure ML (and Ferry): init() once per worker,
run(mini_batch) per mini-batch of file paths, one row per file."""
import os


def init():
    global scale
    # The model folder is under AZUREML_MODEL_DIR by its name, as on Azure.
    with open(os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "scale.txt")) as f:
        scale = int(f.read())


def run(mini_batch):
    rows = []
    for path in mini_batch:
        with open(path) as f:
            text = f.read().strip()
        if not text.isdigit():
            raise ValueError("%s does not hold a number: %r" % (os.path.basename(path), text))
        rows.append([os.path.basename(path), int(text) * scale])
    return rows
