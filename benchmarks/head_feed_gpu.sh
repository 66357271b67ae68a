#!/usr/bin/env bash
# Stop 31's check of the LM head kernel on by default for the 1B's head shape (fused/lm_head.py
# HEAD_WINS_AT_BATCH_1) and the measurement of the step's input copies, one device call (~6 min; DEADLINE s,
# default 430). Timing first, alone on the GPU:
#   (1) bench, fused, the 1B at 16,384, buckets 1,8,16,32, one cold process (predicted 0.811 / 1.000 / 1.030 /
#       1.110: the head -7 us at batch 1 only);
#   (2) input_feed.py: one replay with both input copies (run), the tokens' alone, none (loaded), the 1B at
#       16,384 and Qwen at 1,024, batches 1 and 8 (is stop 30's ~8 us gap before each replay the copies?);
# then side by side (numbers, not times): the head's GPU tests, and capture --fuse + verify of the 1B at
# 16,384, buckets 1,8,16,32 (its batch 1 now on the head kernel).
# Ran in stop 31 (H200, 2026-12-02, 240 s): bench 0.807 / 1.001 / 1.037 / 1.117 ms, setup 27.2 s; the copies
# ~4.3 us a step (input_feed.py's docstring); the head's GPU tests 2 passed; verify 61 runs, 28 of 28 graphs,
# worst 1.16x eager, peak 23.7 of 48.7 GiB.
# Usage on the device machine: OUT=/some/dir bash benchmarks/head_feed_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-430} LOGS=/tmp/head-feed SHOW="^ *(batch|[0-9]+ )|setup|ms per step|Error|error"
source "$(dirname "$0")/deadline.sh"
run bench-llama-3.2-1b 60 150 python3 -m cli bench llama-3.2-1b --compare fused --context 16384 --buckets 1,8,16,32 \
  --csv "$FINAL/bench-llama-3.2-1b.csv"
cut -c1-200 "$LOGS/bench-llama-3.2-1b.log" | grep -vE "^\s*$" | tail -n 12
run input-feed 60 130 python3 benchmarks/input_feed.py llama-3.2-1b:16384 qwen2.5-0.5b:1024 --batches 1,8
tar czf "$FINAL/head-feed-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
OUT=$FINAL DEADLINE=$(left) REPEAT=1 TESTS="tests/fused/test_gpu_fused.py -k lm_head_kernel" \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32" bash benchmarks/realsize_repeat.sh
