#!/usr/bin/env bash
# Prepared in stop 37, not run. Where the step's time grows from one row to 8-32 (issue 16's ratio lines): the
# Qwen2.5-0.5B chain of a layer's skinny kernels was 17.1 us a layer at one row, 24.2 / 24.6 / 29.7 at 8 / 16 /
# 32 (step_sweep.py, H200, stop 37), and no config of its grids (narrow tiles, split-K 2-8) did better at 8
# rows. (1) each op alone at 1, 8, 16 and 32 rows with its table config, against cuBLAS and the copy bandwidth
# (kernel_sweep.py --budget-s 0: times the table's and the heuristic's configs only; also issue 16 item 4's
# "80% of copy bandwidth" per shape, the 8B's line printed last); (2) the shipped step's kernels by class and
# the 16 longest at batches 1, 8, 16, 32 (profile_step.py, Qwen, then the 1B at 16,384).
# No prediction: a measurement, to choose the next lever from (which op grows most from 1 to 8 rows).
# Usage on the device machine: OUT=/some/dir bash benchmarks/rows_profile_gpu.sh   (~6 min)
set -uo pipefail
DEADLINE=${DEADLINE:-420} LOGS=/tmp/rows SHOW="copy bandwidth|8B shapes|^total|Error|error"
source "$(dirname "$0")/deadline.sh"
run per-op 60 240 python3 benchmarks/kernel_sweep.py --models qwen2.5-0.5b,llama-3.2-1b,llama-3.1-8b \
  --rows 1,8,16,32 --merged --budget-s 0 --shapes qkv,o,gate_up,down,lm_head
grep -E "^(qwen|llama)" "$LOGS/per-op.log" | cut -c1-120
for entry in qwen2.5-0.5b:1024 llama-3.2-1b:16384; do
  IFS=: read -r model cache <<< "$entry"
  run "profile-$model" 60 120 python3 benchmarks/profile_step.py "$model" --cache "$cache" --ways fused \
    --batches 1,8,16,32 --top 16 --json "$FINAL/profile-$model.json"
  grep -E "kernels,|us in" "$LOGS/profile-$model.log" | cut -c1-160
done
cp "$LOGS"/*.log "$FINAL/" 2>/dev/null
