#!/usr/bin/env bash
# The attention's combine folded into its split kernel (CUGRAPH_ACCEL_FOLD_COMBINE=1), benched as the fused
# step ships otherwise, ONE device call (DEADLINE s, default 560), ~160 s. Compare its lines with
# fused_step_gpu.sh's of the same day (the skinny kernels' configs come from their table, so the 8B's batch 1
# holds from process to process: 4.245 and 4.241 ms in two calls of 2026-12-01). Measured 2026-12-01 (stop
# 19): slower at batch 1 on every model (8B 4.305 against 4.241 ms, Qwen 0.864 against 0.742), so it stays off.
# Usage on the device machine: OUT=/some/dir bash benchmarks/fold_combine_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/fold-logs SHOW="^error|Error|fused:"
source "$(dirname "$0")/deadline.sh"
bench() {  # NAME RECIPE CONTEXT BUCKETS
  CUGRAPH_ACCEL_FOLD_COMBINE=1 run "$1" 40 150 python3 -m cli bench "$2" --compare fused --buckets "$4" \
    --context "$3" --steps 30 --warmup 5 --csv "$LOGS/bench-$1.csv"
}
bench 8b llama-3.1-8b 1024 1,8,32
bench 1b llama-3.2-1b 16384 1,8,16,32
bench qwen qwen2.5-0.5b 1024 1,8,16,32
echo "== fused, attention combine folded"
python3 benchmarks/bench_lines.py "$LOGS"/bench-*.csv
tar czf "$FINAL/fold-logs.tgz" -C "$LOGS" --exclude inductor-cache --exclude '*.yaml' --exclude '*.inductor' . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
