#!/usr/bin/env bash
# Why a batch-1 graph in the same process costs Qwen2.5-0.5B's 16- and 32-row steps their PDL overlap, one
# device call (~9.5 min; DEADLINE s, default 560: the last parts go first). Stop 29 (H200, every op on the skinny kernels,
# timing_gap.py, replay ms, one process each): buckets 8,16,32 -> 0.802 / 0.875 / 1.025 at batch 8 / 16 /
# 32; buckets 1,8,16,32 -> 0.775 / 1.086 / 1.112 (1,16,32: 1.089 / 1.112), where PDL off gives 1.065 / 1.081
# / 1.123: at 16 and 32 rows the step runs as if without PDL. Same 199 kernels, the same configs, pointer
# alignments and Triton variants, the same graph structure (168 programmatic edges of 198 kernel nodes a
# graph). Graphs are captured largest first, so batch 1 is compiled and captured after the others.
#   (0) graph_edges.py --functions at 1,8,16,32 (then at 8,16,32): every kernel node's function read through the
#       driver (registers, shared memory, carveout, the launch's shared memory, grid and block) right after
#       its graph's capture and again at the end: does batch 1's compile and capture change a function that
#       the 16-row graph's nodes launch (a carveout or dynamic shared-memory size set later, say)?
#   (1) skinny_launches.py at 1,8,16,32 and at 8,16,32: each compiled skinny variant's USE_PDL, launch_pdl,
#       registers, spills and shared memory (does a variant differ in what it asks of a multiprocessor?);
#   (2) timing_gap.py at 1,8,16,32 with batch 1 captured first (CUGRAPH_ACCEL_BATCH_1_FIRST=1,
#       core.capture.capture_order): predicted 0.775 / ~0.875 / ~1.025 if the order is the cause (then make
#       it the default, raise Qwen's row limits to 16 and 32, bench, verify); and B1_MODEL's shipped step
#       (the 1B at 16,384: o and down skinny up to 32 rows) both ways: does its 1.041 / 1.123 at 16 / 32 rows
#       carry the same loss?
#   (3) timing_gap.py at 2,8,16,32: any smaller graph captured last, or batch 1's own?
#   (4) timing_gap.py at 1,8,16,32 with batch 1 off the skinny kernels (CUGRAPH_ACCEL_SKINNY_B1=0: inductor's
#       GEMV lowering runs batch 1): is it batch 1's skinny (FMA) variants?
# Usage on the device machine: OUT=/some/dir bash benchmarks/batch1_bias_gpu.sh  (MODEL, B1_MODEL to change)
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/batch1-bias SHOW="replay|before:|variants|Error|error"
source "$(dirname "$0")/deadline.sh"
MODEL=${MODEL:-qwen2.5-0.5b}
export CUGRAPH_ACCEL_SKINNY_BATCHES=1
# (2) first: the deadline cuts the last parts
run "timing-batch-1-first" 45 80 env CUGRAPH_ACCEL_BATCH_1_FIRST=1 python3 benchmarks/timing_gap.py "$MODEL" \
  --batches 1,8,16,32
run "functions-1-8-16-32" 50 100 python3 benchmarks/graph_edges.py "$MODEL" --batches 1,8,16,32 --functions \
  --json "$FINAL/functions-1-8-16-32.json"
grep -E "changed since its capture|^    node|now " "$LOGS/functions-1-8-16-32.log" | grep -v " 0 changed" | head -n 16
for first in 1 0; do  # the shipped row limits
  run "b1-model-batch-1-first-$first" 60 110 env CUGRAPH_ACCEL_SKINNY_BATCHES=auto CUGRAPH_ACCEL_BATCH_1_FIRST=$first \
    python3 benchmarks/timing_gap.py "${B1_MODEL:-llama-3.2-1b:16384}" --batches 1,8,16,32
done
run "functions-8-16-32" 50 90 python3 benchmarks/graph_edges.py "$MODEL" --batches 8,16,32 --functions \
  --json "$FINAL/functions-8-16-32.json"
echo "kernel-node functions, 1,8,16,32 against 8,16,32 (lines only in one; counts differ by batch 1's graphs):"
diff <(grep -E "^ +[0-9]+  [^ ]+ regs=" "$LOGS/functions-1-8-16-32.log" | sed -E 's/^ +[0-9]+  //' | sort -u) \
  <(grep -E "^ +[0-9]+  [^ ]+ regs=" "$LOGS/functions-8-16-32.log" | sed -E 's/^ +[0-9]+  //' | sort -u) | head -n 20
for buckets in 1,8,16,32 8,16,32; do
  run "launches-${buckets//,/-}" 50 90 python3 benchmarks/skinny_launches.py "$MODEL" --batches "$buckets"
done
run "timing-2-8-16-32" 45 80 python3 benchmarks/timing_gap.py "$MODEL" --batches 2,8,16,32
run "timing-b1-off-skinny" 45 80 env CUGRAPH_ACCEL_SKINNY_B1=0 python3 benchmarks/timing_gap.py "$MODEL" \
  --batches 1,8,16,32
echo "skinny variants, 1,8,16,32 against 8,16,32 (lines only in one):"
diff <(grep -E "^    [A-Za-z_]+=" "$LOGS/launches-1-8-16-32.log" | sort) \
  <(grep -E "^    [A-Za-z_]+=" "$LOGS/launches-8-16-32.log" | sort) | head -n 24
tar czf "$FINAL/batch1-bias-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
