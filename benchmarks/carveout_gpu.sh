#!/usr/bin/env bash
# Stop 30: the batch-1 bias (Qwen2.5-0.5B's 16- and 32-row graphs lose PDL's overlap when batch 1's graph is
# captured after them) is the multiprocessors' shared-memory split. Stop 30's second call (every op skinny,
# buckets 1,8,16,32, timing_gap replay ms): every function at carveout 100 -> 0.642 / 0.780 / 0.843 / 1.000,
# the control (-1, the keep_graph path) 0.623 / 0.779 / 1.093 / 1.118; the 1B at 16,384 shipped 0.832 /
# 1.000 / 1.033 / 1.117 against 0.810 / 1.004 / 1.037 / 1.119: batch 1 wants the driver's split, the others
# one split for every kernel. This call: 100 above batch 1 and the driver's at batch 1, set on each kernel
# node (its own launch attribute) or on the functions (then batch 1's graph, captured last, resets them: does
# an instantiated graph keep what its functions asked at instantiation?). ~4 min.
# Usage on the device machine: OUT=/some/dir bash benchmarks/carveout_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-300} LOGS=/tmp/carveout SHOW="replay|before:|Error|error"
source "$(dirname "$0")/deadline.sh"
MODEL=${MODEL:-qwen2.5-0.5b} B1_MODEL=${B1_MODEL:-llama-3.2-1b:16384}
export CUGRAPH_ACCEL_SMEM_CARVEOUT=100 CUGRAPH_ACCEL_SMEM_CARVEOUT_B1=-1
for by in node function; do
  run "skinny-$by" 40 90 env CUGRAPH_ACCEL_SKINNY_BATCHES=1 CUGRAPH_ACCEL_SMEM_CARVEOUT_BY=$by \
    python3 benchmarks/timing_gap.py "$MODEL" --batches 1,8,16,32
done
run "b1-model-skinny" 45 90 env CUGRAPH_ACCEL_SKINNY_BATCHES=1 python3 benchmarks/timing_gap.py "$B1_MODEL" \
  --batches 1,8,16,32
run "b1-model-shipped" 45 90 python3 benchmarks/timing_gap.py "$B1_MODEL" --batches 1,8,16,32
run "shipped" 35 80 python3 benchmarks/timing_gap.py "$MODEL" --batches 1,8,16,32
tar czf "$FINAL/carveout-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
