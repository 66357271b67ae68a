#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (~8 min): the tp suite and run (issue 17), then a kernel profile of
# the 8B fused step (issue 13 item 6), with a deadline so the call ends inside the device's 10 minutes.
# Logs are packed into one tarball under $OUT (the device returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s); DEADLINE=${DEADLINE:-540}
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
FINAL=${OUT:-/tmp/out}; WORK=/tmp/probe; mkdir -p "$WORK" "$FINAL"
export OUT=$WORK PYTHONPATH=$PWD PYTHONUNBUFFERED=1
bash benchmarks/tp_gpu.sh tests 2>&1 | tail -n 12
echo "== tp run ($(left) s left)"
bash benchmarks/tp_gpu.sh run 2>&1 | tail -n 30
echo "== 8B profile ($(left) s left)"
if [ "$(left)" -gt 100 ]; then
  timeout $(( $(left) - 20 )) python3 benchmarks/profile_step.py llama-3.1-8b --batches 1,32 --ways fused \
    --top 12 --json "$WORK/profile-8b.json" > "$WORK/profile-8b.log" 2>&1
  grep -vE "^\s*$" "$WORK/profile-8b.log" | tail -n 45
fi
tar czf "$FINAL/probe-logs.tgz" -C "$WORK" --exclude inductor-cache . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
