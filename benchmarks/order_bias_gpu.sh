#!/usr/bin/env bash
# The order bias's open questions in one device call (~3 min; DEADLINE s, default 300). Stop 26 found that a
# graph captured on any stream but the process's first side stream to run work replays slower under PDL
# (Qwen2.5-0.5B's fused step 0.625 / 0.886 -> 0.641 / 1.005 ms at batch 1 / 8), and fixed our own flows with
# one capture stream per device. Open: (1) does claiming that stream first (what a --tp rank now does before
# NCCL runs) keep it fast when another stream runs work after? (timing_gap.py --before claimed-side-stream;
# predicted as fast as nothing); (2) do the slow case's graphs differ in structure (graph_edges.py: nodes,
# edge types, PDL's programmatic edges, kernel attributes) or only in how they run?
# Usage on the device machine: OUT=/some/dir bash benchmarks/order_bias_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-300} LOGS=/tmp/order-bias SHOW="before:|graphs$|edge |node |kernel |Error|error"
source "$(dirname "$0")/deadline.sh"
MODEL=${MODEL:-qwen2.5-0.5b}
for before in nothing side-stream claimed-side-stream; do  # timing: one process each
  run "timing-$before" 40 90 python3 benchmarks/timing_gap.py "$MODEL" --before "$before"
done
for before in nothing side-stream; do
  run "edges-$before" 40 90 python3 benchmarks/graph_edges.py "$MODEL" --before "$before" \
    --json "$FINAL/edges-$before.json"
done
echo "graph structure, nothing against side-stream (counts over every graph of the capture):"
diff <(grep -E "^ +[0-9]" "$LOGS/edges-nothing.log") <(grep -E "^ +[0-9]" "$LOGS/edges-side-stream.log") \
  && echo "  the same: the difference is in how the graphs run"
