#!/usr/bin/env bash
# Issue 6 on the GPU. Part a: the GPU tests of what changed. Part b (one device call under its
# 10-minute limit): the fused path's GPU tests, kernels per step (benchmarks/profile_step.py: HF's step,
# fused, fused with freezing), the Qwen2.5-0.5B bench (graph, fused, compile at cache lengths 1024 and
# 4096), then Llama-3.2-1B graph vs fused in the time left.
# Usage on the device machine: OUT=/some/dir bash benchmarks/issue6_gpu.sh a|b
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-220} TRANSFORMERS_VERBOSITY=error
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-cache"  # cold: nothing compiled before this run
DEADLINE=${DEADLINE:-560}  # seconds for the whole script
left() { echo $((DEADLINE - SECONDS)); }
table() { grep -E "^note|^error" "$1" | head -n 12; sed -n '/decode step, cache length/,/x floor:/p' "$1"; }

if [ "${1:-b}" = a ]; then
  timeout "$(left)" python3 -m pytest -m cuda -q -p no:cacheprovider -rf --durations=5 tests/test_gpu.py \
    tests/test_gpu_fused.py tests/test_gpu_reliability.py tests/test_gpu_regions.py 2>&1 | tee "$OUT/gpu-tests.log" | tail -n 12
else
  echo "== GPU tests of the fused path"
  timeout 150 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/test_gpu_fused.py 2>&1 \
    | tee "$OUT/gpu-tests-fused.log" | tail -n 4
  echo "== kernels per step"
  timeout 110 python3 benchmarks/profile_step.py qwen2.5-0.5b --batches 1,32 --json "$OUT/profile.json" 2>&1 \
    | tee "$OUT/profile.log" | grep -E "kernels|failed" | tail -n 8
  echo "== qwen2.5-0.5b ($(left) s left)"
  timeout "$(( $(left) - 90 ))" python3 -m cli bench qwen2.5-0.5b --compare graph,fused,compile --buckets 1,8,16,32 \
    --context 1024,4096 --steps 50 --warmup 5 --json "$OUT/bench-qwen.json" --csv "$OUT/bench-qwen.csv" \
    --plot "$OUT/bench-qwen.png" > "$OUT/bench-qwen.log" 2>&1
  echo "bench exit code $?"
  echo "== llama-3.2-1b ($(left) s left)"
  timeout "$(( $(left) - 5 ))" python3 -m cli bench llama-3.2-1b --compare graph,fused --buckets 1,8,16,32 \
    --steps 50 --warmup 5 --json "$OUT/bench-llama.json" > "$OUT/bench-llama.log" 2>&1
  echo "bench exit code $?"
  table "$OUT/bench-qwen.log"; table "$OUT/bench-llama.log"
fi
rm -rf "$OUT/inductor-cache"
