#!/usr/bin/env bash
# Prepared in stop 38, not run. Our Triton kernels compiled ahead, side by side (CUGRAPH_ACCEL_COMPILE_AHEAD=1,
# fused/kernels/ahead.py; core/capture.compile_kernels_ahead): every graph's step run once first with our
# kernels' launches handing their compilations to a thread pool (Triton's async compile mode), then the
# captures. Issue 16's setup line: the 1B's four buckets took 22.9-32.0 s against 29.7 (a third of
# reduce-overhead's 89.0), stops 35-38. (1) the GPU tests (the triton 3.6 here must have the async mode:
# test_ahead fails naming it if not); (2) bench --compare fused at 1, 8, 16, 32, each process with caches of
# its own (cold inductor and Triton caches, as a first run), default then ahead, then ahead then default;
# the setup line of each (bench_lines.py).
# Prediction: the 1B -3 to -8 s of setup, Qwen -5 to -10 (stop 38's CPU: 8 sm_90 variants 10.5 s one by one,
# ~6 s on 2 threads; Qwen's buckets 8 and 16 each took 3.8 s with ~0.5 s of captures); latency unchanged.
# Usage on the device machine: OUT=/some/dir bash benchmarks/compile_ahead_gpu.sh   (~8 min)
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/compile-ahead SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
run tests-gpu 40 150 python3 -m pytest -q -p no:cacheprovider -rf tests/fused/kernels/test_ahead.py \
  tests/compat/test_compat.py::test_triton_async_compile_mode_is_what_the_jit_consults \
  "tests/fused/test_gpu_fused.py::test_kernels_compiled_ahead_leave_the_graphs_replaying_like_eager"
bench() {  # NAME AHEAD MODEL CACHE: one cold process
  local caches="$LOGS/caches-$1"
  mkdir -p "$caches/inductor" "$caches/triton"
  run "b-$1" 60 130 env CUGRAPH_ACCEL_COMPILE_AHEAD="$2" TORCHINDUCTOR_CACHE_DIR="$caches/inductor" \
    TRITON_CACHE_DIR="$caches/triton" python3 -m cli bench "$3" --compare fused --context "$4" \
    --buckets 1,8,16,32 --csv "$FINAL/b-$1.csv"
}
bench 1b-default-a 0 llama-3.2-1b 16384
bench 1b-ahead-a 1 llama-3.2-1b 16384
bench qwen-default-a 0 qwen2.5-0.5b 1024
bench qwen-ahead-a 1 qwen2.5-0.5b 1024
bench 1b-ahead-b 1 llama-3.2-1b 16384
bench 1b-default-b 0 llama-3.2-1b 16384
cp "$LOGS"/*.log "$FINAL/" 2>/dev/null
echo "== fused ms and setup s, default (compiled at first launch) and ahead"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
