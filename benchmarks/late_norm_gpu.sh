#!/usr/bin/env bash
# Prepared in stop 37, not run. The norm folded in late (CUGRAPH_ACCEL_NORM_LATE=1, skinny_matmul.NORM_LATE):
# no rstd pass between a program's wait for the previous kernel and its first weight load; the K walk sums the
# squares of the x blocks it loads and scales the sums at the end. (1) bench, default then late, one cold
# process each, Qwen2.5-0.5B at 1,024 and Llama-3.2-1B at 16,384, buckets 1, 8, 16, 32; (2) verify with it on
# (the 1B and Qwen at 1, 8, 16, 32, the 8B at 4,096 at 1, 8, 32, lanes side by side) and its GPU tests beside;
# (3) the 8B at batch 1 and 8 both ways, while time is left.
# Prediction: one L2 round trip (~0.5 us) fewer per kernel with a norm (q/k/v, gate/up: two a layer) where the
# skinny kernels run them: batch 1 Qwen -10 to -25 us, the 1B -6 to -16, the 8B -15 to -40; Qwen's batches 8-32
# the same; the 1B above batch 1 unchanged (its q/k/v and gate/up run cuBLAS). Verify passes (one rounding
# fewer than eager's, within 4 units in the kernel tests).
# Usage on the device machine: OUT=/some/dir bash benchmarks/late_norm_gpu.sh   (~9.5 min)
set -uo pipefail
DEADLINE=${DEADLINE:-575} LOGS=/tmp/late-norm SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
bench() {  # NAME LATE MODEL CACHE BUCKETS
  run "b-$1" 60 130 env CUGRAPH_ACCEL_NORM_LATE="$2" python3 -m cli bench "$3" --compare fused --context "$4" \
    --buckets "$5" --csv "$FINAL/b-$1.csv"
}
bench qwen-early 0 qwen2.5-0.5b 1024 1,8,16,32
bench qwen-late 1 qwen2.5-0.5b 1024 1,8,16,32
bench 1b-early 0 llama-3.2-1b 16384 1,8,16,32
bench 1b-late 1 llama-3.2-1b 16384 1,8,16,32
CUGRAPH_ACCEL_NORM_LATE=1 OUT=$FINAL DEADLINE=$(($(left) - 100)) REPEAT=1 \
  TESTS="tests/fused/kernels/test_skinny_matmul.py::test_gpu_late_norm_against_the_reference" \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32 | qwen2.5-0.5b:1024:fused:1-8-16-32 | llama-3.1-8b:4096:fused" \
  bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^verify-|^tests-|passed|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
bench 8b-early 0 llama-3.1-8b 4096 1,8
bench 8b-late 1 llama-3.1-8b 4096 1,8
echo "== fused ms by batch, default (early) and late"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
