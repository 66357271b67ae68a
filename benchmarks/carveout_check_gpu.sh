#!/usr/bin/env bash
# Stop 30's check of the shipped carveout (core/backends/cuda.py carveout_for: every kernel node above batch 1
# asks for carveout 100) and of Qwen2.5-0.5B's skinny kernels up to 16 rows, one device call (~7 min; DEADLINE
# s, default 420). Timing first, alone on the GPU:
#   (1) bench, fused, buckets 1,8,16,32, one cold process each: Qwen at 1,024 (timing_gap.py predicts 0.625 /
#       0.778 / 0.842 / 0.954) and the 1B at 16,384 (0.810 / 1.000 / 1.030 / 1.110: unchanged);
# then side by side (numbers, not times):
#   (2) the GPU tests of capture (the carveout read back from the runtime) and of the fused mode;
#   (3) capture --fuse and verify: Qwen at buckets 1,8,16,32 (its 16 rows now skinny), the 8B at 4096.
# Usage on the device machine: OUT=/some/dir bash benchmarks/carveout_check_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-420} LOGS=/tmp/carveout-check SHOW="^ *(batch|[0-9]+ )|setup|Error|error"
source "$(dirname "$0")/deadline.sh"
for way in qwen2.5-0.5b:1024 llama-3.2-1b:16384; do
  name=bench-${way%%:*}
  run "$name" 60 150 env TORCHINDUCTOR_CACHE_DIR="$LOGS/cache-$name" python3 -m cli bench "${way%%:*}" --compare fused \
    --context "${way##*:}" --buckets 1,8,16,32 --csv "$FINAL/$name.csv"
  cut -c1-200 "$LOGS/$name.log" | grep -vE "^\s*$" | tail -n 12
done
tar czf "$FINAL/bench-logs.tgz" -C "$LOGS" --exclude 'cache-*' --exclude inductor-cache . 2>/dev/null
OUT=$FINAL DEADLINE=$(left) REPEAT=1 TESTS="tests/core/test_gpu_capture.py tests/fused/test_gpu_fused.py" \
  ENTRIES="qwen2.5-0.5b:1024:fused:1-8-16-32 | llama-3.1-8b:4096:fused" bash benchmarks/realsize_repeat.sh
