#!/usr/bin/env bash
# Prepared in stop 36, NOT run on a GPU. Two things stop 36 left for a device call:
#   (1) the default split-K finish (skinny_matmul.SPLIT_FINISH "auto": finish_kernel with PDL up to 16 rows, the
#       last slice above) in one process: stop 36 measured its two halves in separate processes (the 1B
#       0.978 / 1.011 ms at 8 / 16 with "pdl", 1.074 at 32 with "here"); and a verify of the 1B at bucket 32;
#   (2) Qwen2.5-0.5B with every op on the skinny kernels at 32 rows too (CUGRAPH_ACCEL_SKINNY_BATCHES=1): a tie
#       with cuBLAS in stop 31 (0.957 / 0.958 ms), when its down's split-K still ended in a plain second kernel.
# Prediction: (1) the 1B 0.975-0.985 / 1.005-1.015 / 1.070-1.080 ms; (2) Qwen's batch 32 -10 to -30 us (0.951 ->
# ~0.925-0.94), batches 1-16 unchanged (the same kernels).
# Usage on the device machine: OUT=/some/dir bash benchmarks/batch32_gpu.sh   (~6 min)
set -uo pipefail
DEADLINE=${DEADLINE:-420} LOGS=/tmp/batch32 SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
for turn in llama-3.2-1b:16384:auto qwen2.5-0.5b:1024:auto qwen2.5-0.5b:1024:1; do
  IFS=: read -r model cache skinny <<< "$turn"
  name="b-$model-skinny-$skinny"
  run "$name" 40 100 env CUGRAPH_ACCEL_SKINNY_BATCHES="$skinny" \
    python3 -m cli bench "$model" --compare fused --context "$cache" --buckets 1,8,16,32 --csv "$FINAL/$name.csv"
done
OUT=$FINAL DEADLINE=$(left) REPEAT=1 ENTRIES="llama-3.2-1b:16384:fused:32 | qwen2.5-0.5b:1024:fused:32" \
  bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^verify-|^verified|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
echo "== fused ms by batch: the defaults; Qwen with every op skinny at every batch"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
