#!/usr/bin/env bash
# One device call of a session: every cuda-marked test (the fault suite first and alone, since a planted
# fault that ends in a device-side assert poisons the CUDA context of every later test in its process),
# then the Qwen2.5-0.5B bench of graph, fused and torch.compile against the earlier numbers.
# Usage on the device machine: OUT=/some/dir bash benchmarks/session_gpu.sh [tests|bench|all]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-220} TRANSFORMERS_VERBOSITY=error
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-cache"
what=${1:-all}
if [ "$what" != bench ]; then
  echo "== fault suite on CUDA"
  timeout 200 python3 -m pytest -m cuda -q -p no:cacheprovider --tb=line -rf tests/verify/test_faults.py 2>&1 \
    | tee "$OUT/gpu-faults.log" | grep -E "^FAILED|^E |passed|failed|Error" | cut -c1-300 | tail -n 15
  echo "== every other cuda-marked test"
  timeout 330 python3 -m pytest -m cuda -q -p no:cacheprovider --tb=line -rf --durations=5 tests \
    --ignore=tests/verify/test_faults.py 2>&1 | tee "$OUT/gpu-tests.log" \
    | grep -E "^FAILED|passed|failed|s call" | cut -c1-300 | tail -n 20
fi
if [ "$what" != tests ]; then
  echo "== qwen2.5-0.5b: graph, fused, compile (cache 1024, buckets 1/8/16/32)"
  rm -rf "$TORCHINDUCTOR_CACHE_DIR"
  timeout 260 python3 -m cli bench qwen2.5-0.5b --compare graph,fused,compile --buckets 1,8,16,32 --steps 50 \
    --warmup 5 --json "$OUT/bench-qwen.json" > "$OUT/bench-qwen.log" 2>&1
  echo "bench exit code $?"
  grep -E "^note|^error|fused:|peak device" "$OUT/bench-qwen.log" | cut -c1-250 | head -n 8
  sed -n '/decode step, cache length/,/x floor:/p' "$OUT/bench-qwen.log"
fi
rm -rf "$OUT/inductor-cache"
