"""Fits the linear model the endpoint serves (y = bias + w . x, ten
features) to synthetic data by gradient descent, standard library only,
and writes it to ./outputs/model/weights.json: the job keeps ./outputs,
and `ferry job download` fetches it for `ferry model create`."""

import json
import os
import random

random.seed(7)
true_w = [0.1 * (i + 1) for i in range(10)]
rows = [[random.uniform(0, 10) for _ in range(10)] for _ in range(200)]
ys = [0.5 + sum(w * x for w, x in zip(true_w, r)) + random.gauss(0, 0.1) for r in rows]

w, bias, lr = [0.0] * 10, 0.0, 0.0005
for epoch in range(300):
    gw, gb = [0.0] * 10, 0.0
    for r, y in zip(rows, ys):
        err = bias + sum(wi * x for wi, x in zip(w, r)) - y
        gb += err
        gw = [g + err * x for g, x in zip(gw, r)]
    bias -= lr * gb / len(rows)
    w = [wi - lr * g / len(rows) for wi, g in zip(w, gw)]
    if epoch % 100 == 0:
        print(f"epoch {epoch}: mean error {gb / len(rows):.4f}")

os.makedirs("outputs/model", exist_ok=True)
with open("outputs/model/weights.json", "w") as f:
    json.dump({"name": "trained", "bias": round(bias, 4), "w": [round(x, 4) for x in w]}, f)
print("wrote outputs/model/weights.json")
