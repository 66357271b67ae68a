#!/usr/bin/env bash
# Stop 32's check of the lookahead tiles (Qwen2.5-0.5B's batch-1 gate/up and down since lookahead_gpu.sh) and
# the one-kernel input feed, one device call (DEADLINE s, default 570):
#   (1) step_sweep.py --lookahead for the 8B's batch-1 chain (does the 8B gain too? written into the table);
#   (2) bench, fused alone, one cold process each: Qwen at 1,024 and the 1B at 16,384, buckets 1,8,16,32;
#   (3) side by side (numbers, not times): capture --fuse + verify of Qwen and the 1B at those buckets and of
#       the 8B at 4,096 (buckets 1,8,32, with whatever (1) chose), and the skinny kernels' GPU tests.
# Ran in stop 32 (H200, 2026-12-02, 389 s): the 8B's chain 114.02 -> 112.03 (o); bench Qwen 0.596 / 0.778 /
# 0.837 / 0.955, the 1B 0.809 / 1.008 / 1.041 / 1.122; verify Qwen, the 1B and the 8B passed (1.16x / 1.16x /
# 1.13x eager's worst error); the skinny GPU tests 52 passed.
# Usage on the device machine: OUT=/some/dir bash benchmarks/lookahead_check_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-570} LOGS=/tmp/lookahead-check SHOW="^ *(batch|[0-9]+ )|setup|us per layer|wrote|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
run step-sweep-ahead-8b 60 ${SWEEP_LIMIT:-150} python3 benchmarks/step_sweep.py llama-3.1-8b --lookahead \
  --budget-s "${SWEEP_BUDGET:-80}" --write-configs "$TABLE" --log "$LOGS/ahead-trials-llama-3.1-8b.tsv"
cp "$TABLE" "$FINAL/skinny_configs.json"
for entry in qwen2.5-0.5b:1024 llama-3.2-1b:16384; do
  IFS=: read -r model cache <<< "$entry"
  run "bench-$model" 60 150 python3 -m cli bench "$model" --compare fused --context "$cache" --buckets 1,8,16,32 \
    --csv "$FINAL/bench-$model.csv"
  cut -c1-200 "$LOGS/bench-$model.log" | grep -vE "^\s*$" | tail -n 8
done
tar czf "$FINAL/check-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
OUT=$FINAL DEADLINE=$(left) REPEAT=1 TESTS="tests/fused/kernels/test_skinny_matmul.py" \
  ENTRIES="qwen2.5-0.5b:1024:fused:1-8-16-32 llama-3.2-1b:16384:fused:1-8-16-32 | llama-3.1-8b:4096:fused" \
  bash benchmarks/realsize_repeat.sh
echo "== sweep"; grep -hE "^chosen|^after|^table" "$LOGS/step-sweep-ahead-8b.log" | cut -c1-200
