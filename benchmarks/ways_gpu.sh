#!/usr/bin/env bash
# Which way of running the fused step wins, in ONE device call (nvidia-h200) under a deadline
# (DEADLINE s, default 560), most wanted first:
#   tests      the cuda-marked fused tests, the position limit on the GPU (tests/models/test_limits.py), and
#              the Triton decode attention's GPU tests
#   profiles   benchmarks/profile_step.py for each PROFILES entry (model:batches:ways; replay ms per step,
#              then kernels and the 8 longest); default: the shipped fused step (Triton decode attention)
#              against it with the matmul attention (`fused-matmul-attn`) for Qwen2.5-0.5B, Llama-3.2-1B, the 8B
#   bench      BENCH_MODEL (default llama-3.1-8b): bench BENCH_COMPARE (default fused) at buckets 1/8/32,
#              cache 1024, once per CUGRAPH_ACCEL_TUNE value in TUNES (default auto: tuning by hidden size)
# 2026-12-01 it compared HF's layer forward (then `fused`, now `fused-hf`) with the merged program (then
# `fused-merged`, now the default `fused`), PDL and tuning on Qwen2.5-0.5B and the 8B (docs/PERF.md, stop 14);
# then tuning, gate/up apart at batch 1 and combo kernels, which became the defaults (stop 15); then the
# Triton decode attention (then `fused-attn`), the default since stop 16. Earlier
# PROFILES: "llama-3.1-8b:1:fused,fused-untuned qwen2.5-0.5b:1,8:fused,fused-tuned,fused-gate-up-merged,fused-no-combo".
# Usage on the device machine: OUT=/some/dir bash benchmarks/ways_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/ways-logs SHOW="replay|kernels,|passed|failed|^error|Error|peak|MiB"
source "$(dirname "$0")/deadline.sh"
PROFILES=${PROFILES:-"qwen2.5-0.5b:1,8:fused,fused-matmul-attn llama-3.1-8b:1:fused,fused-matmul-attn llama-3.2-1b:1,8:fused,fused-matmul-attn"}
run tests 40 200 python3 -m pytest -m cuda -q -p no:cacheprovider -rf \
  tests/fused tests/models/test_limits.py --ignore=tests/fused/kernels/test_skinny_matmul.py
for entry in $PROFILES; do
  IFS=: read -r model batches ways <<< "$entry"
  run "profile-$model" 60 200 python3 benchmarks/profile_step.py "$model" --batches "$batches" --ways "$ways" --top 8 \
    --json "$LOGS/profile-$model.json"
done
BENCH=(--compare "${BENCH_COMPARE:-fused}" --buckets 1,8,32 --context 1024 --steps 30 --warmup 5)
for tune in ${TUNES:-auto}; do
  CUGRAPH_ACCEL_TUNE=$tune run "bench-tune-$tune" 60 300 python3 -m cli bench "${BENCH_MODEL:-llama-3.1-8b}" "${BENCH[@]}" \
    --csv "$LOGS/bench-tune-$tune.csv"
done
echo "== replay ms per step"; cat "$LOGS"/profile-*.log 2>/dev/null | grep -E "replay|kernels," | cut -c1-150
echo "== bench (median ms, x floor) per CUGRAPH_ACCEL_TUNE value"
for tune in ${TUNES:-auto}; do
  [ -f "$LOGS/bench-tune-$tune.csv" ] && python3 - "$LOGS/bench-tune-$tune.csv" "$tune" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "step"]
for name in dict.fromkeys(r["contender"] for r in rows):
    print(f"tune={sys.argv[2]} {name}: " + "  ".join(f"batch {r['bucket']} {float(r['median_ms']):.3f} ms ({float(r['median_ms']) / float(r['floor_ms']):.2f}x)" for r in rows if r["contender"] == name))
PY
  grep -h "inductor compiled" "$LOGS/bench-tune-$tune.log" 2>/dev/null | cut -c1-160
done
tar czf "$FINAL/ways-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
