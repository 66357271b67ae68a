#!/usr/bin/env bash
# Some ops of the skinny kernels swept alone in a chain of layers (step_sweep.py --ops; above one row the narrow
# tiles first: kernel_sweep.narrow_rows_grid), written into the table, then benched with it and (VERIFY=1)
# verified, one device call (DEADLINE s, default 575).
#   SWEEPS   "model:rows:ops:budget_s[:grid] ..." (ops a comma list of qkv, o, gate_up, down; grid: step_sweep.py
#            --grid, auto by default; fma: only the multiply-and-sum tiles, whole-k: only tensor-core tiles
#            holding the whole K walk)
#   BENCHES  "model:cache[:skinny] ..." (`bench --compare fused --buckets 1,8,16,32`; skinny: the value of
#            CUGRAPH_ACCEL_SKINNY_BATCHES, auto by default)
#   VERIFY=1 verify of the 1B at 16,384 and Qwen at 1,024 at buckets 1, 8, 16, 32 and the 8B at 4,096 (lanes
#            side by side), with the skinny kernels' GPU tests beside them
# Stop 37 (H200, docs/PERF.md) ran it twice. First the ops with few outputs, never swept above one row (o's
# table tiles gave Qwen's 8 rows 14 programs): the defaults below, with Qwen's 32 rows swept after the benches
# and a third bench, qwen2.5-0.5b:1024:1 (the 1B's batch 8 0.978 -> 0.963 ms, Qwen's 16 0.825 -> 0.789, Qwen's
# 32 rows skinny 0.924 against cuBLAS's 0.951). Then SWEEPS="qwen2.5-0.5b:8:gate_up,down:70
# qwen2.5-0.5b:16:gate_up,down:60 llama-3.2-1b:16:down:35" VERIFY=1 (nothing better for Qwen; verify passed).
# Stop 38 ran SWEEPS="qwen2.5-0.5b:8:qkv,o,gate_up,down:120:fma qwen2.5-0.5b:16:qkv,o:50:fma": every
# multiply-and-sum tile lost to the table's tensor-core tiles (trials in benchmarks/trials/*fma*).
# Usage on the device machine: OUT=/some/dir bash benchmarks/ops_sweep_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-575} LOGS=/tmp/ops-sweep SHOW="table configs|after |chosen|wrote|passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
SWEEPS=${SWEEPS-"qwen2.5-0.5b:8:o,qkv:45 qwen2.5-0.5b:16:o,qkv:45 qwen2.5-0.5b:32:o,qkv:40 llama-3.2-1b:8:o:35
  llama-3.2-1b:16:o:35 llama-3.2-1b:32:o:35"}
BENCHES=${BENCHES-"llama-3.2-1b:16384 qwen2.5-0.5b:1024"}
cp "$TABLE" "$FINAL/skinny_configs.before.json"
for entry in $SWEEPS; do
  IFS=: read -r model rows ops budget kind <<< "$entry"
  kind=${kind:-auto}
  run "sweep-$model-$rows$kind" 50 $((budget + 50)) python3 benchmarks/step_sweep.py "$model" --rows "$rows" \
    --ops "$ops" --grid "$kind" --budget-s "$budget" --write-configs "$TABLE" --log "$FINAL/trials-$model-$rows$kind.tsv"
done
cp "$TABLE" "$FINAL/skinny_configs.json"
for entry in $BENCHES; do
  IFS=: read -r model cache skinny <<< "$entry"
  name="b-$model-skinny-${skinny:-auto}"
  run "$name" 60 110 env CUGRAPH_ACCEL_SKINNY_BATCHES="${skinny:-auto}" python3 -m cli bench "$model" \
    --compare fused --context "$cache" --buckets 1,8,16,32 --csv "$FINAL/$name.csv"
done
if [ "${VERIFY:-0}" = 1 ]; then
  tests="tests/fused/kernels/test_skinny_matmul.py::test_gpu_bf16_against_the_reference"
  tests+=" tests/fused/kernels/test_skinny_matmul.py::test_gpu_split_k_finishes_replay_the_same_bits"
  OUT=$FINAL DEADLINE=$(left) REPEAT=1 TESTS="$tests" \
    ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32 | qwen2.5-0.5b:1024:fused:1-8-16-32 | llama-3.1-8b:4096:fused" \
    bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
  grep -E "^verify-|^tests-|passed|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
fi
echo "== fused ms by batch"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
