#!/usr/bin/env bash
# Stop 37's third device call (~5 min). The 1B's o and down at 16 rows gained 4-5 us a layer each in the chain
# (step_sweep.py, every op skinny: o 67.55 -> 62.30, down 66.35 -> 62.08) yet the shipped step, whose q/k/v and
# gate/up run cuBLAS, moved 1.011 -> 1.006 -> 1.007 ms. (1) the CUDA fault suite (tests/verify -m cuda);
# (2) whole_step_sweep.py --ops o,down: the chain's 5 fastest configs of each timed in the shipped step itself
# (cuBLAS where it runs cuBLAS); (3) where it wrote the table, a bench of the 1B at 1, 8, 16, 32.
# Prediction: (2) -0 to -15 us at batch 16 (the chain's gain mostly hidden by PDL's overlap in the step).
# Usage on the device machine: OUT=/some/dir bash benchmarks/whole_step_1b_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-285} LOGS=/tmp/ws1b SHOW="table configs|after |chosen|wrote|passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
run faults-gpu 40 150 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/verify
cp "$TABLE" "$LOGS/table.before.json"
run whole-step-1b-16 60 150 python3 benchmarks/whole_step_sweep.py llama-3.2-1b --rows 16 --cache 16384 --ops o,down \
  --candidates benchmarks/trials/step-trials-narrow-llama-3.2-1b-16.tsv --top 5 --budget-s 90 \
  --write-configs "$TABLE" --log "$FINAL/whole-step-trials-llama-3.2-1b-16.tsv"
if ! cmp -s "$TABLE" "$LOGS/table.before.json"; then
  cp "$TABLE" "$FINAL/skinny_configs.json"
  run b-llama-3.2-1b 60 100 python3 -m cli bench llama-3.2-1b --compare fused --context 16384 --buckets 1,8,16,32 \
    --csv "$FINAL/b-llama-3.2-1b.csv"
  python3 benchmarks/bench_lines.py "$FINAL/b-llama-3.2-1b.csv" | grep fused
fi
