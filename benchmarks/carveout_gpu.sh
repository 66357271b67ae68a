#!/usr/bin/env bash
# The shared-memory split of graphs' kernels (core/backends/cuda.py carveout_for), one device call (~4 min):
# timing_gap.py at buckets 1,8,16,32 under CUGRAPH_ACCEL_SMEM_CARVEOUT auto (shipped: 100 on every kernel node
# above batch 1), off (the driver's split per kernel) and 100 (every graph), every op skinny on Qwen2.5-0.5B,
# then the 1B at 16,384 as shipped, auto and off.
# Stop 30 (H200, replay ms at batch 1 / 8 / 16 / 32), Qwen every op skinny: off 0.623 / 0.779 / 1.093 / 1.118;
# 100 everywhere 0.642 / 0.780 / 0.843 / 1.000; 100 above batch 1 0.624 / 0.778 / 0.842 / 0.997 (set on each
# node's launch attribute; set on the functions instead, reset to -1 for batch 1's graph captured last: 0.623
# / 0.777 / 0.839 / 0.997, so an instantiated graph keeps what its functions asked then). Buckets 8,16,32 at
# 100: 0.804 / 0.876 / 1.035 (off: 0.810 / 0.879 / 1.033). The 1B shipped: off 0.810 / 1.004 / 1.037 / 1.119,
# 100 everywhere 0.832 / 1.000 / 1.033 / 1.117, above batch 1 0.810 / 1.000 / 1.030 / 1.110; every op skinny
# above batch 1 1.030 / 1.363 / 1.521 at 8 / 16 / 32.
# Usage on the device machine: OUT=/some/dir bash benchmarks/carveout_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-300} LOGS=/tmp/carveout SHOW="replay|before:|Error|error"
source "$(dirname "$0")/deadline.sh"
MODEL=${MODEL:-qwen2.5-0.5b} B1_MODEL=${B1_MODEL:-llama-3.2-1b:16384}
for carveout in auto off 100; do
  run "skinny-$carveout" 40 90 env CUGRAPH_ACCEL_SKINNY_BATCHES=1 CUGRAPH_ACCEL_SMEM_CARVEOUT=$carveout \
    python3 benchmarks/timing_gap.py "$MODEL" --batches 1,8,16,32
done
for carveout in auto off; do
  run "b1-model-$carveout" 45 90 env CUGRAPH_ACCEL_SMEM_CARVEOUT=$carveout python3 benchmarks/timing_gap.py \
    "$B1_MODEL" --batches 1,8,16,32
done
tar czf "$FINAL/carveout-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
