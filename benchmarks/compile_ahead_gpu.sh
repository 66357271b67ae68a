#!/usr/bin/env bash
# Our Triton kernels compiled ahead, side by side (fused/kernels/ahead.py; core/capture.compile_kernels_ahead):
# every graph's step run once first with our kernels' launches handing their compilations to a thread pool
# (Triton's async compile mode), then the captures. Issue 16's setup line: the 1B's four buckets took
# 22.9-32.0 s against 29.7 (a third of reduce-overhead's 89.0), stops 35-38.
# Stop 38 prepared it (off); stop 39's first run: setup the 1B 22.9 / 24.2 -> 19.9 / 20.7 s, Qwen 26.5 ->
# 18.8, latency unchanged; but its GPU test showed each variant compiled again at its launch (torch's
# wrap_triton adds num_ctas to the options, part of Triton's key): real launches now call the kernel
# directly (ahead.launcher's traced), and the switch is on by default (CUGRAPH_ACCEL_COMPILE_AHEAD=0 off).
# (1) the GPU tests (the ahead ones, and the skinny kernels' traced and PDL launches); (2) bench --compare
# fused at 1, 8, 16, 32, each process with caches of its own (cold inductor and Triton caches, as a first
# run), ahead then off; (3) verify of Qwen's fused graphs at 1-32 with the default (ahead); (4) the 1B off
# then ahead, where time is left. The setup line of each last (bench_lines.py).
# Usage on the device machine: OUT=/some/dir bash benchmarks/compile_ahead_gpu.sh   (~8 min)
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/compile-ahead SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
K=tests/fused/kernels/test_skinny_matmul.py
run tests-gpu 40 200 python3 -m pytest -q -p no:cacheprovider -rf tests/fused/kernels/test_ahead.py \
  tests/compat/test_compat.py::test_triton_async_compile_mode_is_what_the_jit_consults \
  "tests/fused/test_gpu_fused.py::test_kernels_compiled_ahead_leave_the_graphs_replaying_like_eager" \
  $K::test_gpu_ops_compile_with_inductor_and_replay_in_a_cuda_graph $K::test_gpu_pdl_launches_replay_what_plain_launches_compute \
  $K::test_gpu_split_k_finishes_replay_the_same_bits $K::test_gpu_final_norm_launched_early_replays_what_plain_launches_compute
bench() {  # NAME AHEAD MODEL CACHE: one cold process
  local caches="$LOGS/caches-$1"
  mkdir -p "$caches/inductor" "$caches/triton"
  run "b-$1" 60 130 env CUGRAPH_ACCEL_COMPILE_AHEAD="$2" TORCHINDUCTOR_CACHE_DIR="$caches/inductor" \
    TRITON_CACHE_DIR="$caches/triton" python3 -m cli bench "$3" --compare fused --context "$4" \
    --buckets 1,8,16,32 --csv "$FINAL/b-$1.csv"
}
bench 1b-ahead-a 1 llama-3.2-1b 16384
bench 1b-off-a 0 llama-3.2-1b 16384
bench qwen-ahead-a 1 qwen2.5-0.5b 1024
bench qwen-off-a 0 qwen2.5-0.5b 1024
run capture-qwen 40 90 python3 -m cli capture qwen2.5-0.5b --fuse --buckets 1,8,16,32 --max-cache-len 1024 --plan "$LOGS/qwen.yaml"
[ -f "$LOGS/qwen.yaml" ] && run verify-qwen 40 120 python3 -m cli verify --plan "$LOGS/qwen.yaml" --steps 8
bench 1b-off-b 0 llama-3.2-1b 16384
bench 1b-ahead-b 1 llama-3.2-1b 16384
tar czf "$FINAL/compile-ahead-logs.tgz" -C "$LOGS" --exclude inductor-cache --exclude "caches-*" --exclude "*.yaml" . 2>/dev/null
mkdir -p "$FINAL/csv" && mv "$FINAL"/b-*.csv "$FINAL/csv/"
echo "== fused ms and setup s, ahead (the default) and off (compiled at first launch)"
for f in "$FINAL"/csv/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
