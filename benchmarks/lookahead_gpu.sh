#!/usr/bin/env bash
# Stop 32's measurement of the one-row skinny kernels loading their next K block ahead (SkinnyConfig.lookahead)
# and of the step's inputs fed by one kernel (torch_internals.copy_each), one device call (DEADLINE s, default
# 560):
#   (1) the GPU tests of the lookahead (bit for bit against the plain loop at the 1B's and Qwen's shapes);
#   (2) step_sweep.py --lookahead per STEP_SWEEPS entry (model:budget_s): the chain's batch-1 configs, each op
#       tried on lookahead tiles only, from the table's; the chosen ones written into the table;
#   (3) input_feed.py with the new table, then with the table as it was (one process each), the 1B at 16,384
#       and Qwen at 1,024, batch 1: replay ms with the inputs fed by one kernel (run), by two, by none.
# Predictions (stop 32): the lookahead tiles win where a program walks K in several blocks (the 1B's gate/up
# and down, Qwen's down): the 1B's batch 1 -20..-60 us; the one-kernel feed -2 us (the tokens' copy alone).
# Ran in stop 32 (H200, 2026-12-02, 238 s): tests 6 passed; the 1B's chain kept its table (37.20 us a layer),
# Qwen's 19.12 -> 17.08 (gate/up, down); in the step Qwen 0.6257 -> 0.5925 ms, the 1B 0.808 either way; the
# one-kernel feed -2.0 us (docs/PERF.md, stop 32).
# Usage on the device machine: OUT=/some/dir bash benchmarks/lookahead_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/lookahead SHOW="us per layer|ms per step|wrote|passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
cp "$TABLE" "$LOGS/table-before.json"
run tests-ahead 60 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/fused/kernels/test_skinny_matmul.py -k ahead
for entry in ${STEP_SWEEPS:-llama-3.2-1b:110 qwen2.5-0.5b:70}; do
  IFS=: read -r model budget <<< "$entry"
  run "step-sweep-ahead-$model" 40 $((budget + 60)) python3 benchmarks/step_sweep.py "$model" --lookahead \
    --budget-s "$budget" --write-configs "$TABLE" --log "$LOGS/ahead-trials-$model.tsv"
done
cp "$TABLE" "$FINAL/skinny_configs.json"
cp "$TABLE" "$LOGS/table-after.json"
FEED=(python3 benchmarks/input_feed.py llama-3.2-1b:16384 qwen2.5-0.5b:1024 --batches 1)
run feed-new-table 60 160 "${FEED[@]}"
cp "$LOGS/table-before.json" "$TABLE"
run feed-old-table 60 160 "${FEED[@]}"
cp "$LOGS/table-after.json" "$TABLE"
tar czf "$FINAL/lookahead-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "== summary"
grep -hE "^chosen|^after" "$LOGS"/step-sweep-ahead-*.log | cut -c1-160
for f in feed-new-table feed-old-table; do echo "$f:"; grep -h "ms per step" "$LOGS/$f.log" | cut -c1-220; done
