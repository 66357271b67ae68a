#!/usr/bin/env bash
# Prepared in stop 37, run in stop 38 (docs/PERF.md). Where the step's time grows from one row to 8-32 (issue 16's ratio lines): the
# Qwen2.5-0.5B chain of a layer's skinny kernels was 17.1 us a layer at one row, 24.2 / 24.6 / 29.7 at 8 / 16 /
# 32 (step_sweep.py, H200, stop 37), and no config of its grids (narrow tiles, split-K 2-8) did better at 8
# rows. (1) each op alone at 1, 8, 16 and 32 rows with its table config, against cuBLAS and the copy bandwidth
# (kernel_sweep.py --budget-s 0: times the table's and the heuristic's configs only; also issue 16 item 4's
# "80% of copy bandwidth" per shape at the 0.5B and 1B shapes); (2) the shipped step's kernels by class and
# the 16 longest at batches 1, 8, 16, 32 (profile_step.py, Qwen, then the 1B at 16,384).
# (3) two switches benched at 1, 8, 16, 32 (one cold process each): the attention's folded combine
# (CUGRAPH_ACCEL_FOLD_COMBINE=1; stop 19 lost with it at every batch of the 1B and Qwen, but split-K's last-slice
# finish won at 32 rows in stop 36), and the 1B with the last-slice finish at every split
# (CUGRAPH_ACCEL_SPLIT_FINISH=here: its o now splits K at 8 and 16 rows too, stop 37, two finish kernels a layer).
# Prediction: (1)-(2) none, a measurement to choose the next lever from (which op grows most from 1 to 8 rows);
# (3) fold: -0 to -20 us at 32 rows, +0 to +20 at 8-16; here: the 1B's 8 / 16 -0 to -15 us (stop 37: 0.963-0.965 /
# 1.006-1.007 ms with the default).
# Usage on the device machine: OUT=/some/dir bash benchmarks/rows_profile_gpu.sh   (~9 min)
set -uo pipefail
DEADLINE=${DEADLINE:-570} LOGS=/tmp/rows SHOW="copy bandwidth|8B shapes|^total|Error|error"
source "$(dirname "$0")/deadline.sh"
run per-op 60 200 python3 benchmarks/kernel_sweep.py --models qwen2.5-0.5b,llama-3.2-1b \
  --rows 1,8,16,32 --merged --budget-s 0 --shapes qkv,o,gate_up,down,lm_head
grep -E "^(qwen|llama)" "$LOGS/per-op.log" | cut -c1-120
for entry in qwen2.5-0.5b:1024 llama-3.2-1b:16384; do
  IFS=: read -r model cache <<< "$entry"
  run "profile-$model" 60 120 python3 benchmarks/profile_step.py "$model" --cache "$cache" --ways fused \
    --batches 1,8,16,32 --top 16 --json "$FINAL/profile-$model.json"
  grep -E "kernels,|us in" "$LOGS/profile-$model.log" | cut -c1-160
done
for entry in llama-3.2-1b:16384:CUGRAPH_ACCEL_SPLIT_FINISH=here llama-3.2-1b:16384:CUGRAPH_ACCEL_FOLD_COMBINE=1 \
  qwen2.5-0.5b:1024:CUGRAPH_ACCEL_FOLD_COMBINE=1; do
  IFS=: read -r model cache switch <<< "$entry"
  tag=${switch#CUGRAPH_ACCEL_} && tag=${tag//=/-}  # no "=" in a name that comes back from the device
  run "b-$model-$tag" 60 110 env "$switch" python3 -m cli bench "$model" --compare fused \
    --context "$cache" --buckets 1,8,16,32 --csv "$FINAL/b-$model-$tag.csv"
done
cp "$LOGS"/*.log "$FINAL/" 2>/dev/null
echo "== fused ms by batch, each switch (stop 37's defaults: the 1B 0.785 / 0.963 / 1.006 / 1.076, Qwen 0.572 / 0.766 / 0.787 / 0.923)"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
