#!/usr/bin/env bash
# Which way of running the fused step wins, in ONE device call (nvidia-h200) under a deadline
# (DEADLINE s, default 560), most wanted first:
#   tests      the cuda-marked fused tests (the merged program's verify among them)
#   qwen       profile_step qwen2.5-0.5b, batches 1/8: fused, merged, PDL, tuned, tuned+PDL (replay ms)
#   8b         profile_step llama-3.1-8b, batch 1: fused, merged, PDL
#   memory     benchmarks/memory_peak.py (the memory xfail's cause)
#   capacity   bench llama-3.2-1b fused, buckets 1/8/16/32, contexts 1024 and 16384 (issue 16)
# Usage on the device machine: OUT=/some/dir bash benchmarks/ways_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/ways-logs SHOW="replay|kernels,|passed|failed|^error|Error|peak|MiB"
source "$(dirname "$0")/deadline.sh"
run tests-fused 40 100 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/fused
run qwen 60 200 python3 benchmarks/profile_step.py qwen2.5-0.5b --batches 1,8 \
  --ways fused,fused-merged,fused-pdl,fused-tuned,fused-tuned-pdl --json "$LOGS/qwen.json"
run 8b 70 150 python3 benchmarks/profile_step.py llama-3.1-8b --batches 1 --ways fused,fused-merged,fused-pdl \
  --json "$LOGS/8b.json"
run memory 40 90 python3 benchmarks/memory_peak.py
run capacity 60 150 python3 -m cli bench llama-3.2-1b --compare fused --buckets 1,8,16,32 --context 1024,16384 \
  --steps 40 --warmup 5 --csv "$LOGS/capacity.csv"
echo "== replay ms per step"; cat "$LOGS"/qwen.log "$LOGS"/8b.log 2>/dev/null | grep -E "replay|kernels," | cut -c1-200
echo "== capacity"; sed -n '/decode step, cache length/,/x floor:/p' "$LOGS/capacity.log" 2>/dev/null | head -n 30
tar czf "$FINAL/ways-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
