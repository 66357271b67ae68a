#!/usr/bin/env bash
# Stop 33's fourth call: the final norm's kernel launched with PDL (skinny_kernels.rms_norm_kernel USE_PDL),
# one device call (DEADLINE s, default 540): its GPU tests; bench of batch 1 with it off and on in turn
# (CUGRAPH_ACCEL_FINAL_NORM_PDL=0/1, one process each: off, on, off, on for the 1B, off, on for Qwen); the
# issue-16 benches with it on (buckets 1,8,16,32, cold); then capture --fuse + verify of the 1B, Qwen and the
# 8B side by side.
# Ran in stop 33 (H200, 2026-12-02, 489 s): GPU tests 7 passed; batch 1 the 1B 0.809 / 0.808 / 0.809 / 0.808 ms
# (off / on / off / on), Qwen 0.595 / 0.595; bench the 1B 0.809 / 1.009 / 1.040 / 1.120, Qwen 0.596 / 0.774 /
# 0.835 / 0.953 (not cold: the bucket-1 runs filled the inductor cache); verify 1B 28 of 28 graphs, Qwen 12 of
# 12, the 8B 15 of 15 (1.16x / 1.16x / 1.13x eager's error).
# Usage on the device machine: OUT=/some/dir bash benchmarks/final_norm_pdl_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-540} LOGS=/tmp/final-norm-pdl SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
run gpu-tests 60 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/fused/kernels/test_skinny_matmul.py \
  tests/fused/test_gpu_fused.py -k "final_norm or rms_norm or pdl"
for turn in llama-3.2-1b:16384:0 llama-3.2-1b:16384:1 llama-3.2-1b:16384:0 llama-3.2-1b:16384:1 \
  qwen2.5-0.5b:1024:0 qwen2.5-0.5b:1024:1; do
  IFS=: read -r model cache on <<< "$turn"
  export CUGRAPH_ACCEL_FINAL_NORM_PDL=$on turns=$((${turns:-0} + 1))
  run "b1-$turns-$model-pdl$on" 40 90 python3 -m cli bench "$model" --compare fused --context "$cache" --buckets 1 \
    --csv "$LOGS/b1-$turns-$model-pdl$on.csv"
done
unset CUGRAPH_ACCEL_FINAL_NORM_PDL
for entry in llama-3.2-1b:16384 qwen2.5-0.5b:1024; do
  IFS=: read -r model cache <<< "$entry"
  run "bench-$model" 60 150 python3 -m cli bench "$model" --compare fused --context "$cache" --buckets 1,8,16,32 \
    --csv "$FINAL/bench-$model.csv"
done
OUT=$FINAL DEADLINE=$(left) REPEAT=1 \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32 | qwen2.5-0.5b:1024:fused:1-8-16-32 | llama-3.1-8b:4096:fused" \
  bash benchmarks/realsize_repeat.sh | tail -n 5
echo "== batch 1, final norm PDL off (0) / on (1), in call order"
for f in "$LOGS"/b1-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
echo "== bench"
python3 benchmarks/bench_lines.py "$FINAL"/bench-*.csv | grep fused
