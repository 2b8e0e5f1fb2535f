import json, os, sys

data, scale, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
with open(os.path.join(data, "rows.txt")) as f:
    xs = [float(x) for x in f.read().split()]
model = {"mean": scale * sum(xs) / len(xs), "rows": len(xs)}
with open(os.path.join(out, "model.json"), "w") as f:
    json.dump(model, f)
print("trained on", len(xs), "rows")
