#!/usr/bin/env bash
# One device call: every GPU test, then capture + verify of the reference recipe. Details under $OUT,
# short summary last. Usage on the device machine: OUT=/some/dir bash benchmarks/gpu_session.sh [pytest -k expr]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"
ca() { python3 -m cli "$@"; }

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"; } 2>&1 | tee "$OUT/env.txt"

echo "== GPU tests"
python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests ${1:+-k "$1"} 2>&1 | tee "$OUT/gpu-tests.log" | tail -n 30

echo "== capture + verify: qwen2.5-0.5b"
ca capture qwen2.5-0.5b --buckets 1,8,16,32 --plan "$OUT/qwen.plan.yaml" 2>&1 | tee "$OUT/capture.log" | tail -n 14
ca verify --plan "$OUT/qwen.plan.yaml" 2>&1 | tee "$OUT/verify.log" | tail -n 13
grep -E "passed|failed" "$OUT/gpu-tests.log" | tail -n 1
