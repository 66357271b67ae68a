#!/usr/bin/env bash
# Stop 33's first call: the attention's split kernel asking L2 for the weights the layer reads after it
# (fused/layer_program.weights_ahead, CUGRAPH_ACCEL_WEIGHTS_AHEAD_MB), one bench process per budget (a budget
# is traced into the compiled layers), fused alone; the GPU tests of the prefetch first. One device call
# (DEADLINE s, default 560). SWEEP: "recipe:cache:budget,budget,..." entries; BUCKETS (default 1,8).
# Usage on the device machine: OUT=/some/dir bash benchmarks/weights_ahead_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/weights-ahead SHOW="passed|failed|setup|Error|error"
source "$(dirname "$0")/deadline.sh"
run gpu-tests 60 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/fused/kernels/test_decode_attention.py \
  -k "weights_asked or inside_inductor"
for entry in ${SWEEP:-llama-3.2-1b:16384:0,8,16,24,32 qwen2.5-0.5b:1024:0,8,16,28 llama-3.1-8b:1024:0,24}; do
  IFS=: read -r model cache budgets <<< "$entry"
  for mb in ${budgets//,/ }; do
    export CUGRAPH_ACCEL_WEIGHTS_AHEAD_MB=$mb
    run "bench-$model-$mb" 50 150 python3 -m cli bench "$model" --compare fused --context "$cache" \
      --buckets "${BUCKETS:-1,8}" --csv "$FINAL/bench-$model-ahead$mb.csv"
  done
done
unset CUGRAPH_ACCEL_WEIGHTS_AHEAD_MB
echo "== summary (fused ms; file = model and MiB asked ahead a layer)"
python3 benchmarks/bench_lines.py "$FINAL"/bench-*.csv | grep fused
