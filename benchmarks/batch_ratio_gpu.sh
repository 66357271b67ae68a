#!/usr/bin/env bash
# Issue 16's batch lines in one device call (~6.5 min; DEADLINE s, default 540): each way one `bench` process
# with a cold inductor cache of its own, so the setup column is a cold compile.
#   (1) Qwen2.5-0.5B with every op on the skinny kernels at every batch (CUGRAPH_ACCEL_SKINNY_BATCHES=1) and
#       reduce-overhead beside it (the compile-time line: fused setup <= a third of reduce-overhead's);
#   (2) Qwen as shipped (skinny up to SKINNY_WINS_ABOVE_BATCH_1's rows, cuBLAS above);
#   (3) Llama-3.2-1B at a KV capacity of 16,384 as shipped, with reduce-overhead beside it;
#   (4) graph_edges.py on Qwen's every-op-skinny batch 16: PDL's programmatic edges.
# Stop 29's step_idle_gpu.sh: with the table's 16-row configs, every op skinny idles 33 us at batch 16 (0.880
# ms back-to-back against the shipped 1.050, timing_gap.py): (1) against (2) decides Qwen's row limits.
# Usage on the device machine: OUT=/some/dir bash benchmarks/batch_ratio_gpu.sh  (QWEN_SKINNY to change (1))
set -uo pipefail
DEADLINE=${DEADLINE:-540} LOGS=/tmp/batch-ratio SHOW="^ *(batch|[0-9]+ )|setup|compile|Error|error|edge"
source "$(dirname "$0")/deadline.sh"
bench() {  # NAME NEEDS LIMIT ENV... -- BENCH ARGS...
  local name=$1 needs=$2 limit=$3; shift 3
  run "$name" "$needs" "$limit" env TORCHINDUCTOR_CACHE_DIR="$LOGS/cache-$name" "$@" --buckets 1,8,16,32 \
    --csv "$FINAL/$name.csv"
  cut -c1-200 "$LOGS/$name.log" | grep -vE "^\s*$" | tail -n 14
}
bench qwen-skinny-all 120 220 CUGRAPH_ACCEL_SKINNY_BATCHES="${QWEN_SKINNY:-1}" python3 -m cli bench qwen2.5-0.5b \
  --compare fused,compile --context 1024
bench qwen-shipped 50 120 python3 -m cli bench qwen2.5-0.5b --compare fused --context 1024
bench llama-1b-16384 120 240 python3 -m cli bench llama-3.2-1b --compare fused,compile --context 16384
run edges-16 40 90 env CUGRAPH_ACCEL_SKINNY_BATCHES=1 python3 benchmarks/graph_edges.py qwen2.5-0.5b --batches 16 \
  --json "$FINAL/edges-16.json"
grep -E "^ +[0-9]+  (edge|node)" "$LOGS/edges-16.log" | head -n 12
tar czf "$FINAL/batch-ratio-logs.tgz" -C "$LOGS" --exclude 'cache-*' --exclude inductor-cache . 2>/dev/null
