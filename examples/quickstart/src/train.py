"""Ferry quickstart: fit y = w*x + b by gradient descent, standard library only.

Logs the loss per epoch as a Ferry metric, prints progress, and writes the
model to ./outputs/model.json (kept with the job) and a short report to the
named output `report`.
"""
import argparse
import csv
import json
import os
import random
import time
import urllib.request


def log_metric(name, value, step):
    """POST one metric to the workspace with the job's run-scoped token."""
    url = os.environ.get("FERRY_API_URL")
    token = os.environ.get("FERRY_RUN_TOKEN")
    if not url or not token:
        return  # not running under Ferry
    body = json.dumps({"name": name, "value": value, "step": step}).encode()
    req = urllib.request.Request(
        f"{url}/v1/jobs/{os.environ['FERRY_JOB_ID']}/metrics",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    for attempt in range(5):  # ride out a server restart
        try:
            urllib.request.urlopen(req, timeout=5).read()
            return
        except OSError as err:
            if attempt == 4:
                print(f"warning: metric {name} not logged: {err}")
            time.sleep(0.5 * (attempt + 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--report", required=True)
    args = p.parse_args()

    with open(args.data) as f:
        rows = [(float(r["x"]), float(r["y"])) for r in csv.DictReader(f)]
    print(f"loaded {len(rows)} points from {os.path.basename(args.data)}")
    random.seed(int(os.environ.get("QUICKSTART_SEED", "0")))
    w, b = random.uniform(-1, 1), 0.0
    n = len(rows)
    for epoch in range(1, args.epochs + 1):
        gw = sum((w * x + b - y) * x for x, y in rows) * 2 / n
        gb = sum((w * x + b - y) for x, y in rows) * 2 / n
        w -= args.learning_rate * gw
        b -= args.learning_rate * gb
        loss = sum((w * x + b - y) ** 2 for x, y in rows) / n
        print(f"epoch {epoch:3d}  loss {loss:.4f}  w {w:.3f}  b {b:.3f}")
        log_metric("loss", loss, epoch)

    os.makedirs("outputs", exist_ok=True)
    with open("outputs/model.json", "w") as f:
        json.dump({"w": w, "b": b, "loss": loss, "epochs": args.epochs}, f, indent=2)
    os.makedirs(args.report, exist_ok=True)
    with open(os.path.join(args.report, "report.txt"), "w") as f:
        f.write(f"y = {w:.3f} * x + {b:.3f}  (mse {loss:.4f} after {args.epochs} epochs)\n")
    print("wrote outputs/model.json")


if __name__ == "__main__":
    main()
