#!/usr/bin/env bash
# Prepared in stop 33, run in stop 34 (docs/PERF.md stop 34, item 1: batch 1 -19 us at the 1B, -21 at Qwen;
# batch 8 +92..+195 us; on by default at batch 1 with 4 parts): the attention of a short context bucket in
# one kernel whose programs load the mask, K and V before their PDL wait (decode_attention._decode_preloaded_kernel,
# CUGRAPH_ACCEL_ATTENTION_PRELOADED = parts of the head dimension, 0 off), the published conventional step's
# way (docs/PERF.md stop 33, item 6). One device call (DEADLINE s, default 540):
#   (1) its GPU tests (against the matmul path; inside inductor and a CUDA graph, with and without PDL, where
#       the step's slot written by the kernel in front must be read again after the wait);
#   (2) bench of batches 1 and 8 at the 1B's 16,384 and Qwen's 1,024 (prompt 128: bucket 256, the kernel's),
#       one process per setting, off / 2 parts / 4 parts, the 1B's twice;
#   (3) capture --fuse + verify of both with PRELOADED (default 2) on.
# Prediction: one kernel and one boundary fewer a layer (the combine), the K/V loads hidden behind the kernel in
# front: the 1B's batch 1 -15..-30 us (0.809 -> ~0.78-0.795), Qwen's -15..-35 us; larger batches about the same.
# Stop 22's direct split (one program per K/V head walking the bucket after its wait) lost 45 us: if this
# loses too, read the attention's own time in profile_step.py before dropping it.
# Usage on the device machine: OUT=/some/dir bash benchmarks/preloaded_attention_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-540} LOGS=/tmp/preloaded SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
run gpu-tests 60 180 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/fused/kernels/test_decode_attention.py \
  -k "preloaded or inside_inductor"
for turn in llama-3.2-1b:16384:0 llama-3.2-1b:16384:2 llama-3.2-1b:16384:4 llama-3.2-1b:16384:0 \
  llama-3.2-1b:16384:2 llama-3.2-1b:16384:4 qwen2.5-0.5b:1024:0 qwen2.5-0.5b:1024:2 qwen2.5-0.5b:1024:4; do
  IFS=: read -r model cache parts <<< "$turn"
  export CUGRAPH_ACCEL_ATTENTION_PRELOADED=$parts turns=$((${turns:-0} + 1))
  run "b-$turns-$model-parts$parts" 40 90 python3 -m cli bench "$model" --compare fused --context "$cache" \
    --buckets 1,8 --csv "$LOGS/b-$turns-$model-parts$parts.csv"
done
export CUGRAPH_ACCEL_ATTENTION_PRELOADED=${PRELOADED:-2}
OUT=$FINAL DEADLINE=$(left) REPEAT=1 \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32 | qwen2.5-0.5b:1024:fused:1-8-16-32" \
  bash benchmarks/realsize_repeat.sh | tail -n 4
unset CUGRAPH_ACCEL_ATTENTION_PRELOADED
cp "$LOGS"/b-*.csv "$FINAL"/ 2>/dev/null
echo "== batch 1 and 8 by parts of the head dimension (0: off), in call order"
for f in "$LOGS"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
