#!/usr/bin/env bash
# Prepared in stop 32, NOT run on a GPU: what stop 32 left for the next session, one device call (DEADLINE s,
# default 570):
#   (1) the 8B's batch-1 lookahead tiles timed in its captured step (whole_step_sweep.py --rows 1 over the
#       chain's trial log, 3 a op): stop 32's chain undervalued o by ~2x (-2.0 us a layer in the chain, -3.6 in
#       the step), so gate/up, down or q/k/v may win there too; written into the table where one wins by 0.5%;
#   (2) side by side: capture --fuse + verify of the recipes stop 32 did not verify (gemma-2-2b, mistral-sw-0.5b,
#       qwen2-moe-0.5b at 1,024; QWEN3=1 adds qwen3-30b-a3b) and of the 8B with whatever (1) wrote.
# Usage on the device machine: OUT=/some/dir bash benchmarks/lookahead_next_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-570} LOGS=/tmp/lookahead-next SHOW="ms per step|wrote|Error|error"
source "$(dirname "$0")/deadline.sh"
# skinny_configs_gpu.sh's whole-step sweep (it writes the table and copies it to $OUT), nothing else of it
OUT=$FINAL DEADLINE=$(($(left) - 250)) LOOKAHEAD=1 WHOLE_STEP_SWEEPS="llama-3.1-8b:170:1" TOP=3 PROFILES=" " \
  TESTS="" bash benchmarks/skinny_configs_gpu.sh
big=""
[ "${QWEN3:-0}" = 1 ] && big=" | qwen3-30b-a3b:1024:fused"
OUT=$FINAL DEADLINE=$(left) REPEAT=1 ENTRIES="gemma-2-2b:1024:fused mistral-sw-0.5b:1024:fused | \
qwen2-moe-0.5b:1024:fused llama-3.1-8b:4096:fused$big" bash benchmarks/realsize_repeat.sh
echo "== sweep"; grep -hE "^after|^chosen|^table" /tmp/batch1/whole-step-sweep-llama-3.1-8b-1.log | cut -c1-200
