#!/usr/bin/env bash
# Which way of running the fused step wins, in ONE device call (nvidia-h200) under a deadline
# (DEADLINE s, default 560), most wanted first:
#   tests      the cuda-marked fused tests, and the position limit on the GPU (tests/models/test_limits.py)
#   profiles   benchmarks/profile_step.py for each PROFILES entry (model:batches:ways; replay ms per step,
#              then kernels and the 8 longest); default: the 8B at batch 1 with inductor's heuristic
#              against coordinate-descent tuning, both against gate/up as two GEMVs at batch 1, and
#              Qwen2.5-0.5B with the Triton decode attention and with inductor's combo kernels
#   tune       TUNE_BENCH (default llama-3.1-8b): bench fused at buckets 1/8/32 without and with
#              CUGRAPH_ACCEL_TUNE=1 (tuned at compile time; the setup column shows what tuning costs)
# 2026-12-01 it compared HF's layer forward (then `fused`, now `fused-hf`) with the merged program (then
# `fused-merged`, now the default `fused`), PDL and tuning on Qwen2.5-0.5B and the 8B (docs/PERF.md, stop 14).
# Usage on the device machine: OUT=/some/dir bash benchmarks/ways_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/ways-logs SHOW="replay|kernels,|passed|failed|^error|Error|peak|MiB"
source "$(dirname "$0")/deadline.sh"
PROFILES=${PROFILES:-"llama-3.1-8b:1:fused,fused-tuned,fused-gate-up-apart qwen2.5-0.5b:1,8:fused,fused-attn,fused-gate-up-apart,fused-combo"}
run tests 40 130 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/fused tests/models/test_limits.py
for entry in $PROFILES; do
  IFS=: read -r model batches ways <<< "$entry"
  run "profile-$model" 60 200 python3 benchmarks/profile_step.py "$model" --batches "$batches" --ways "$ways" --top 8 \
    --json "$LOGS/profile-$model.json"
done
BENCH=(--compare fused --buckets 1,8,32 --context 1024 --steps 30 --warmup 5)
for tune in 0 1; do
  CUGRAPH_ACCEL_TUNE=$tune run "tune$tune" 60 200 python3 -m cli bench "${TUNE_BENCH:-llama-3.1-8b}" "${BENCH[@]}" \
    --csv "$LOGS/tune$tune.csv"
done
echo "== replay ms per step"; cat "$LOGS"/profile-*.log 2>/dev/null | grep -E "replay|kernels,| us  " | cut -c1-200
echo "== fused step, CUGRAPH_ACCEL_TUNE=0 against 1 (median ms, setup s)"
for tune in 0 1; do
  [ -f "$LOGS/tune$tune.csv" ] && python3 - "$LOGS/tune$tune.csv" "$tune" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "step"]
print(f"tune={sys.argv[2]}: " + "  ".join(f"batch {r['bucket']} {float(r['median_ms']):.3f} ms ({float(r['median_ms']) / float(r['floor_ms']):.2f}x floor)" for r in rows))
PY
  grep -h "inductor compiled" "$LOGS/tune$tune.log" 2>/dev/null | cut -c1-160
done
tar czf "$FINAL/ways-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
