#!/usr/bin/env bash
# Stop 32's third call: the 8B's batch-1 step with its o GEMV on a lookahead tile (lookahead_check_gpu.sh's
# sweep: the chain 114.02 -> 112.03 us a layer) against the config before, then the real-size recipes that
# the other calls did not run, one device call (DEADLINE s, default 540):
#   (1) input_feed.py, the 8B at 1,024, batch 1, with the table, then with the o entry as it was (one process
#       each; predicted -2 us a layer: ~-64 us a step);
#   (2) side by side: capture --fuse + verify of OLMoE-1B-7B at 1,024 and Phi-3-mini at 4,096, the CUDA fault
#       suite, and the fused step's GPU tests.
# Ran in stop 32 (H200, 2026-12-02, 218 s): the 8B 4.0864 -> 3.9724 ms; OLMoE and Phi-3-mini verified (1.53x /
# 1.01x), the fault suite 21 passed 4 skipped, the fused step's GPU tests 23 passed.
# Usage on the device machine: OUT=/some/dir bash benchmarks/lookahead_8b_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-540} LOGS=/tmp/lookahead-8b SHOW="ms per step|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
cp "$TABLE" "$LOGS/table-new.json"
FEED=(python3 benchmarks/input_feed.py llama-3.1-8b:1024 --batches 1)
run feed-8b-new-table 60 150 "${FEED[@]}"
python3 - "$TABLE" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
table["entries"]["residual|m1|n4096|k4096"] = {  # the entry before stop 32's sweep
    "block_n": 1, "block_k": 1024, "num_warps": 4, "num_stages": 2, "split_k": 1, "dot": False, "swap": False,
    "lookahead": False,
}
json.dump(table, open(sys.argv[1], "w"), indent=1)
PY
run feed-8b-old-table 60 150 "${FEED[@]}"
cp "$LOGS/table-new.json" "$TABLE"
tar czf "$FINAL/feed-8b-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
OUT=$FINAL DEADLINE=$(left) REPEAT=1 FAULTS=1 TESTS="tests/fused/test_gpu_fused.py" \
  ENTRIES="olmoe-1b-7b:1024:fused | phi-3-mini-4k:4096:fused" bash benchmarks/realsize_repeat.sh
echo "== feed"; grep -h "ms per step" "$LOGS"/feed-8b-*.log
