#!/usr/bin/env bash
# Issue 6 on the GPU, one device call: every GPU test, the kernel profile of each way to run the step,
# then graph vs fused (grouped-query attention, context buckets) at cache lengths 1024 and 4096.
# Usage on the device machine: OUT=/some/dir bash benchmarks/issue6_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200} TRANSFORMERS_VERBOSITY=error
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-cache"  # cold: nothing compiled before this run

echo "== GPU tests"
timeout 300 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -n 8
echo "== kernels per step"
timeout 200 python3 benchmarks/profile_step.py qwen2.5-0.5b --batches 1,32 --json "$OUT/profile.json" 2>&1 \
  | tee "$OUT/profile.log" | grep -E "kernels|Error|error" | tail -n 12
echo "== bench graph vs fused (grouped)"
timeout 240 python3 -m cli bench qwen2.5-0.5b --compare graph,fused --attn grouped --buckets 1,8,16,32 \
  --context 1024,4096 --steps 50 --json "$OUT/bench-fused.json" > "$OUT/bench-fused.log" 2>&1
echo "bench exit code $?"
grep -E "note|error" "$OUT/bench-fused.log" | head -n 8
sed -n '/decode step, cache length/,/x floor:/p' "$OUT/bench-fused.log"
rm -rf "$OUT/inductor-cache"
