import argparse, os

p = argparse.ArgumentParser()
p.add_argument("--raw")
p.add_argument("--clean")
p.add_argument("--max-rows", type=int)
p.add_argument("--drop-header", default="true")
a = p.parse_args()
with open(os.path.join(a.raw, "rows.csv")) as f:
    rows = f.read().split()
if a.drop_header == "true":
    rows = rows[1:]
rows = rows[: a.max_rows]
with open(os.path.join(a.clean, "rows.txt"), "w") as f:
    f.write("\n".join(rows) + "\n")
print("prepared", len(rows), "rows")
