#!/usr/bin/env bash
# The LM head at batch 1 on the skinny kernels (fused/lm_head.py, CUGRAPH_ACCEL_LM_HEAD_KERNEL=0 / 1), one
# device call (~6 min; DEADLINE s, default 380). Stop 29's timeline of the 1B's batch 1 at 16,384 ends with
# rms_norm -> (1.2 us idle) memset -> (1.9 us idle) cuBLAS's head (119 us, ~4.4 TB/s): cuBLAS takes no part
# in PDL and zeroes first; the final norm's kernel takes no part in PDL either, so the skinny head saves the
# memset and the gaps, not the norm's tail. Predicted: -2..-4 us at the 1B's batch 1 if the skinny head
# (the sweep's config, else the heuristic's FMA tile) streams the 525 MB as fast as cuBLAS; any shortfall in
# bandwidth shows as more (1% of 119 us = 1.2 us). Issue 16's 1B line needs -18 us.
#   (0) kernel_sweep.py --shapes lm_head at one row for both models: the skinny head's best config against
#       cuBLAS's GEMV, alone in a graph (us, GB/s, % of copy), written into the table the step reads;
#   (1) the GPU tests of the switch (capture, replay, verify: llama and qwen2 tiny models);
#   (2) timing_gap.py --trace at batch 1, head off then on, one process each: B1_MODEL (the 1B at 16,384),
#       then MODEL (Qwen at 1,024), with the replay's timeline (busy, idle, the boundaries around the head).
# Ran in stop 31 (H200, 2026-12-02, 316 s with a profile after it): the 1B's head alone 124.1 us against
# cuBLAS's 131.7 (the heuristic's config won its sweep), Qwen's 69.1 against 72.9; in the step's timeline the
# 1B's span 828.0 -> 818.7 us (the memset and ~3 us of gaps gone), Qwen's 628.8 -> 631.3 (lost). On by
# default for the 1B's head shape since (fused/lm_head.py HEAD_WINS_AT_BATCH_1).
# Usage on the device machine: OUT=/some/dir bash benchmarks/lm_head_gpu.sh  (MODEL, B1_MODEL to change)
set -uo pipefail
DEADLINE=${DEADLINE:-380} LOGS=/tmp/lm-head SHOW="before:|replayed:|idle |passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
for model in llama-3.2-1b qwen2.5-0.5b; do  # one sweep each: the budget counts from a sweep's start
  run "sweep-$model" 50 100 python3 benchmarks/kernel_sweep.py --models "$model" --rows 1 --wide \
    --shapes lm_head --budget-s 45 --write-configs accelerate_graph/fused/kernels/skinny_configs.json
  grep -E "^(llama|qwen)|copy bandwidth" "$LOGS/sweep-$model.log" | cut -c1-140
done
cp accelerate_graph/fused/kernels/skinny_configs.json "$FINAL/skinny_configs.json"
run tests 40 90 python3 -m pytest -q -p no:cacheprovider -m cuda tests/fused/test_gpu_fused.py -k lm_head_kernel
for model in "${B1_MODEL:-llama-3.2-1b:16384}" "${MODEL:-qwen2.5-0.5b}"; do
  for head in 0 1; do
    run "timeline-${model%%:*}-head-$head" 45 90 env CUGRAPH_ACCEL_LM_HEAD_KERNEL=$head \
      python3 benchmarks/timing_gap.py "$model" --batches 1 --trace "$FINAL/trace-${model%%:*}-head-$head"
  done
done
tar czf "$FINAL/lm-head-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
