#!/usr/bin/env bash
# Where the fused step's replay leaves the GPU idle, one device call (~7 min; DEADLINE s, default 500).
# Stop 28: Qwen2.5-0.5B's batch 16 with every op on the skinny kernels (CUGRAPH_ACCEL_SKINNY_BATCHES=1)
# replayed in 1.097 ms over 894-933 us of kernels, where its batch 8 overlaps ~80 us (0.785 ms over 829-865
# us): ~200 us idle at 16 rows, cause unknown; the 1B the same (1.042 at 8, 1.364 at 16).
#   (1) timing_gap.py --trace at BATCHES with every op skinny, then the shipped default, then every op
#       skinny without PDL (does PDL overlap anything at 16 rows? at batch 8 it hid ~145 us, stop 26): the
#       replayed graph's timeline (busy, idle, the kernel boundaries where it idles: profile_step.timeline);
#   (2) graph_edges.py at each batch with every op skinny: PDL's programmatic edges against full ones;
#   (3) the shipped step of B1_MODEL at batch 1, its timeline: issue 16's 0.80 ms line for the 1B at a KV
#       capacity of 16,384 is 12-23 us away; where does its replay idle (the ATen preamble, the memset,
#       cuBLAS's lm_head: no PDL)?
# Run in stop 29 (docs/PERF.md): batch 16 with every op skinny 0.880 ms, busy 858 of an 891 us span (33 us
# idle), against 1.083 without PDL; the 1B's batch 1 idles 11.4 us of 818. Stop 28's 1.097 came from a
# process that also held a batch-1 graph (benchmarks/batch1_bias_gpu.sh).
# Usage on the device machine: OUT=/some/dir bash benchmarks/step_idle_gpu.sh  (MODEL, BATCHES, B1_MODEL to change)
set -uo pipefail
DEADLINE=${DEADLINE:-500} LOGS=/tmp/step-idle SHOW="before:|replayed:|idle |graphs$|Error|error"
source "$(dirname "$0")/deadline.sh"
MODEL=${MODEL:-qwen2.5-0.5b} BATCHES=${BATCHES:-8,16}
for way in 1:1 auto:1 1:0; do  # skinny:pdl, one process each
  IFS=: read -r skinny pdl <<< "$way"
  run "timeline-skinny-$skinny-pdl-$pdl" 50 120 env CUGRAPH_ACCEL_SKINNY_BATCHES="$skinny" CUGRAPH_ACCEL_PDL="$pdl" \
    python3 benchmarks/timing_gap.py "$MODEL" --batches "$BATCHES" --trace "$FINAL/trace-skinny-$skinny-pdl-$pdl"
done
for batch in ${BATCHES//,/ }; do
  run "edges-$batch" 40 90 env CUGRAPH_ACCEL_SKINNY_BATCHES=1 python3 benchmarks/graph_edges.py "$MODEL" \
    --batches "$batch" --json "$FINAL/edges-$batch.json"
done
run "timeline-b1" 50 120 python3 benchmarks/timing_gap.py "${B1_MODEL:-llama-3.2-1b:16384}" --batches 1 \
  --trace "$FINAL/trace-b1"
echo "graph structure with every op skinny, batch by batch (counts over the batch's graphs):"
for batch in ${BATCHES//,/ }; do
  echo "batch $batch:"; grep -E "^ +[0-9]+  (edge|node kernel)" "$LOGS/edges-$batch.log" | head -n 12
done
tar czf "$FINAL/step-idle-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
