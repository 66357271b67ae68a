#!/usr/bin/env bash
# Stop 37's second device call (~9.5 min), after narrow_ops_gpu.sh (o and q/k/v swept alone: the 1B's batch 8
# 0.978 -> 0.963 ms, Qwen's batch 16 0.825 -> 0.789, Qwen's 32 rows every op skinny 0.924 against cuBLAS's
# 0.951, now shipped). (1) gate/up and down swept alone at Qwen's 8 and 16 rows and the 1B's down at 16, each
# with kernel_sweep.narrow_rows_grid first (split-K 2-8, blocks of 16-64 outputs: gate/up's table tiles give
# 76 programs, down's 56); (2) bench of both at 1, 8, 16, 32; (3) verify of both at buckets 1, 8, 16, 32 (new
# configs at every row bucket), the 8B at 4,096 (1, 8, 32) beside them, and the GPU tests of the narrow tiles.
# Prediction: Qwen's 8 / 16 rows -0 to -1 us a layer (-0 to -24 us a step); the 1B's 16 -0 to -0.5 us a layer.
# Usage on the device machine: OUT=/some/dir bash benchmarks/narrow_big_ops_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-575} LOGS=/tmp/narrow2 SHOW="table configs|after |chosen|wrote|passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
sweep() {  # MODEL ROWS OPS BUDGET
  run "sweep-$1-$2" 50 $(($4 + 50)) python3 benchmarks/step_sweep.py "$1" --rows "$2" --ops "$3" --budget-s "$4" \
    --write-configs "$TABLE" --log "$FINAL/trials-$1-$2.tsv"
}
sweep qwen2.5-0.5b 8 gate_up,down 70
sweep qwen2.5-0.5b 16 gate_up,down 60
sweep llama-3.2-1b 16 down 35
cp "$TABLE" "$FINAL/skinny_configs.json"
for model in llama-3.2-1b:16384 qwen2.5-0.5b:1024; do
  IFS=: read -r name cache <<< "$model"
  run "b-$name" 60 110 python3 -m cli bench "$name" --compare fused --context "$cache" --buckets 1,8,16,32 \
    --csv "$FINAL/b-$name.csv"
done
OUT=$FINAL DEADLINE=$(left) REPEAT=1 TESTS="tests/fused/kernels/test_skinny_matmul.py::test_gpu_bf16_against_the_reference tests/fused/kernels/test_skinny_matmul.py::test_gpu_split_k_finishes_replay_the_same_bits" \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32 | qwen2.5-0.5b:1024:fused:1-8-16-32 | llama-3.1-8b:4096:fused" \
  bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^verify-|^tests-|passed|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
echo "== fused ms by batch"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
