#!/usr/bin/env bash
# gpu-smoke.sh checks Ferry's GPU paths on a machine with NVIDIA GPUs (CI
# has none, so these paths are otherwise proven only with a fake
# nvidia-smi): a cluster of a GPU size on the process provider, whose node
# reports its GPUs and whose job sees exactly the GPUs it was given.
#
#   scripts/gpu-smoke.sh            (needs go or FERRY_BIN, and nvidia-smi)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/ferry-gpu-smoke.XXXXXX)
trap 'kill $(cat "$work/server.pid" 2>/dev/null) 2>/dev/null || true; pkill -f "agent --server http://127.0.0.1:18581" || true' EXIT
# FERRY_BIN: a prebuilt binary, for GPU machines without Go.
ferry=${FERRY_BIN:-$work/ferry}
[ -n "${FERRY_BIN:-}" ] || go build -o "$ferry" ./cmd/ferry
"$ferry" server --data-dir "$work/data" --addr 127.0.0.1:18581 >"$work/server.log" 2>&1 &
echo $! >"$work/server.pid"
for _ in $(seq 100); do [ -s "$work/data/owner.token" ] && break; sleep 0.1; done
export FERRY_URL=http://127.0.0.1:18581 FERRY_TOKEN=$(cat "$work/data/owner.token") FERRY_HOME=$work/home
cat >"$work/cluster.yml" <<'YML'
name: gpu-cluster
type: amlcompute
size: Standard_NC4as_T4_v3
min_instances: 0
max_instances: 1
idle_time_before_scale_down: 5
YML
cat >"$work/job.yml" <<'YML'
command: echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; nvidia-smi -L; (python3 -c "import torch; print('torch sees', torch.cuda.device_count(), 'GPU(s):', torch.cuda.get_device_name(0))" 2>/dev/null || echo "no torch with CUDA here")
compute: azureml:gpu-cluster
resources:
  properties:
    gpus: 1
YML
"$ferry" compute create -f "$work/cluster.yml"
"$ferry" job create -f "$work/job.yml" --stream --name gpu-smoke
"$ferry" compute list-nodes gpu-cluster -o json
