#!/usr/bin/env bash
# The Triton decode attention on the H200, in ONE device call under a deadline (DEADLINE s, default 560):
#   tests     its GPU tests and the layer program with the skinny kernels
#   profiles  benchmarks/profile_step.py, way WAY (default fused), one process per model (a second
#             compile in the same process tuned the 8B's GEMVs worse: 2026-12-01)
#   bench     the 8B recipe, fused, cache 1024
#   verify    the 8B recipe captured with --fuse, verify --repeat 2 at cache 1024
# 2026-12-01 (stop 16) it measured the kernel without the cache copy (then switched on here by the way
# fused-attn and CUGRAPH_ACCEL_TRITON_ATTENTION=1); it became the default then (docs/PERF.md), so the
# defaults run it now: WAY=fused-matmul-attn and CUGRAPH_ACCEL_TRITON_ATTENTION=0 give the matmuls.
# Usage on the device machine: OUT=/some/dir bash benchmarks/attention_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/attention-logs SHOW="replay|passed|failed|^error|Error|verified|worst|peak"
source "$(dirname "$0")/deadline.sh"
run tests 40 200 python3 -m pytest -m cuda -q -p no:cacheprovider -rf \
  tests/fused/kernels/test_decode_attention.py "tests/fused/test_gpu_fused.py::test_the_layer_program_with_its_kernels_verifies"
for entry in ${PROFILES:-llama-3.1-8b:1 qwen2.5-0.5b:1,8 llama-3.2-1b:1,8}; do
  IFS=: read -r model batches <<< "$entry"
  run "profile-$model" 60 150 python3 benchmarks/profile_step.py "$model" --batches "$batches" --ways "${WAY:-fused}" --top 8
done
run bench 60 200 python3 -m cli bench llama-3.1-8b --compare fused --buckets 1,8,32 --context 1024 --steps 30 \
  --warmup 5 --csv "$LOGS/bench.csv"
run capture 60 150 python3 -m cli capture llama-3.1-8b --fuse --buckets 1,8,32 --max-cache-len 1024 --plan "$LOGS/8b.yaml"
[ -f "$LOGS/8b.yaml" ] && run verify 60 240 python3 -m cli verify --plan "$LOGS/8b.yaml" --steps 8 --repeat 2
echo "== replay ms per step"; cat "$LOGS"/profile-*.log 2>/dev/null | grep -E "replay|kernels," | cut -c1-200
echo "== bench"; [ -f "$LOGS/bench.csv" ] && python3 - "$LOGS/bench.csv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["kind"] == "step":
        print(f"{r['contender']} batch {r['bucket']}: {float(r['median_ms']):.3f} ms ({float(r['median_ms']) / float(r['floor_ms']):.2f}x floor)")
PY
grep -hE "verified|failed|worst" "$LOGS/verify.log" 2>/dev/null | tail -4 | cut -c1-200
tar czf "$FINAL/attention-logs.tgz" -C "$LOGS" --exclude inductor-cache --exclude '*.yaml' . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
