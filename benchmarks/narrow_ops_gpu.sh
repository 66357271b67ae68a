#!/usr/bin/env bash
# Stop 37, one device call (~9 min). The ops with few outputs were never swept above one row: o's table
# entries at 8-32 rows give Qwen2.5-0.5B 14 programs (n64 k128) at 8 rows for 132 multiprocessors, the 1B 32;
# q/k/v's 16- and 32-row trials were cut by the budget (7 and 1 configs). step_sweep.py --ops now sweeps some
# ops alone, and o and q/k/v try kernel_sweep.narrow_rows_grid first (blocks of 16-64 outputs, split-K 2 / 4:
# 44-224 programs). (1) sweeps, written into the table: Qwen's o and q/k/v at 8 and 16 rows (where its every
# op runs the skinny kernels), the 1B's o at 8, 16 and 32 (its o runs them up to 32 rows); (2) bench of both
# with the new table at 1, 8, 16, 32 (stop 36's: the 1B 0.784 / 0.978 / 1.011 / 1.074, Qwen 0.571 / 0.763 /
# 0.825 / 0.951); (3) Qwen's o and q/k/v at 32 rows and Qwen with every op skinny at 32 (SKINNY_BATCHES=1).
# Prediction: o at Qwen's 8 / 16 rows -1 to -2 us a layer (24 layers: -24 to -48 us a step), q/k/v -0 to -1;
# the 1B's o -0.5 to -1 us a layer (16 layers: -8 to -16 us).
# Usage on the device machine: OUT=/some/dir bash benchmarks/narrow_ops_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-570} LOGS=/tmp/narrow SHOW="table configs|after |chosen|wrote|passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
cp "$TABLE" "$FINAL/skinny_configs.before.json"
sweep() {  # MODEL ROWS OPS BUDGET
  run "sweep-$1-$2" 50 $(($4 + 50)) python3 benchmarks/step_sweep.py "$1" --rows "$2" --ops "$3" --budget-s "$4" \
    --write-configs "$TABLE" --log "$FINAL/step-trials-narrow-$1-$2.tsv"
}
sweep qwen2.5-0.5b 8 o,qkv 45
sweep qwen2.5-0.5b 16 o,qkv 45
sweep llama-3.2-1b 8 o 35
sweep llama-3.2-1b 16 o 35
sweep llama-3.2-1b 32 o 35
cp "$TABLE" "$FINAL/skinny_configs.json"
for model in llama-3.2-1b:16384 qwen2.5-0.5b:1024; do
  IFS=: read -r name cache <<< "$model"
  run "b-$name" 60 110 python3 -m cli bench "$name" --compare fused --context "$cache" --buckets 1,8,16,32 \
    --csv "$FINAL/b-$name.csv"
done
sweep qwen2.5-0.5b 32 o,qkv 40
cp "$TABLE" "$FINAL/skinny_configs.json"
run b-qwen-skinny-32 60 100 env CUGRAPH_ACCEL_SKINNY_BATCHES=1 python3 -m cli bench qwen2.5-0.5b --compare fused \
  --context 1024 --buckets 1,8,16,32 --csv "$FINAL/b-qwen-skinny-all.csv"
echo "== fused ms by batch (b-qwen-skinny-all: every op skinny at every batch)"
for f in "$FINAL"/b-*.csv; do echo "$(basename "$f")"; python3 benchmarks/bench_lines.py "$f" | grep fused; done
