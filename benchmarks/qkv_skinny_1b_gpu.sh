#!/usr/bin/env bash
# Stop 35: the 1B's q/k/v above batch 1 on the skinny kernels, the norm folded in (CUGRAPH_ACCEL_SKINNY_BATCHES=
# proj,residual: o and down as shipped, q/k/v added; gate/up stays on cuBLAS). Stop 35's profile (docs/PERF.md
# stop 35 item 1): at batches 2 and 8 each layer runs an inductor RMSNorm (1.75 us) then cuBLAS's q/k/v (6.0 us,
# 2.1 TB/s); at batch 1 one skinny kernel does both. Stop 28/30 measured every op skinny (gate/up too: 1.030 at
# batch 8 against 1.000), never q/k/v alone.
# One device call (DEADLINE s, default 400): bench of the 1B at 16,384, batches 1,2,4,8,16,32, one process per
# way with a cold inductor cache of its own (auto, then proj,residual); then capture --fuse + verify of the
# 1B with proj,residual at 1,8,16,32.
# Prediction: batches 2-32 -16 to -40 us (one kernel and ~1-2 us a layer fewer), batch 1 unchanged.
# Run in stop 35 (245 s): +23..+27 us at batches 2-8, +161 / +188 at 16 / 32 (auto 0.973 / 1.000 / 1.110 at
# 2 / 8 / 32); verify passed with it. Not kept (docs/PERF.md stop 35, item 5).
# Usage on the device machine: OUT=/some/dir bash benchmarks/qkv_skinny_1b_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-400} LOGS=/tmp/qkv-skinny SHOW="Error|error"
source "$(dirname "$0")/deadline.sh"
for way in auto proj,residual; do
  run "b-${way/,/-}" 60 120 env TORCHINDUCTOR_CACHE_DIR="$LOGS/cache-${way/,/-}" CUGRAPH_ACCEL_SKINNY_BATCHES="$way" \
    python3 -m cli bench llama-3.2-1b --compare fused --context 16384 --buckets 1,2,4,8,16,32 \
    --csv "$FINAL/b-${way/,/-}.csv"
done
CUGRAPH_ACCEL_SKINNY_BATCHES=proj,residual OUT=$FINAL DEADLINE=$(left) REPEAT=1 \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32" bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^verify-|^verified|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
echo "== the 1B's fused ms by batch: auto, then q/k/v skinny too"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
