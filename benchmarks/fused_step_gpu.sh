#!/usr/bin/env bash
# The skinny kernels at batch 1 (the default from a hidden size of 2,048 since 2026-12-01), ONE device
# call under a deadline (DEADLINE s, default 570):
#   tests    the skinny kernels' GPU tests and tests/fused/test_gpu_fused.py (the merged program with and
#            without them)
#   8B       capture --fuse at cache 1024, verify --repeat 2, bench --compare fused
#   1B       capture --fuse, verify; bench --compare fused at KV capacity 16,384 (issue 16's shape)
# Usage on the device machine: OUT=/some/dir bash benchmarks/skinny_b1_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-570} LOGS=/tmp/skinny-logs SHOW="passed|failed|^error|Error|verified|worst|peak|layers:"
source "$(dirname "$0")/deadline.sh"
run tests 40 180 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/fused/kernels/test_skinny_matmul.py \
  tests/fused/test_gpu_fused.py
run capture-8b 60 120 python3 -m cli capture llama-3.1-8b --fuse --buckets 1,8,32 --max-cache-len 1024 --plan "$LOGS/8b.yaml"
[ -f "$LOGS/8b.yaml" ] && run verify-8b 60 200 python3 -m cli verify --plan "$LOGS/8b.yaml" --steps 8 --repeat 2
run bench-8b 60 120 python3 -m cli bench llama-3.1-8b --compare fused --buckets 1,8,32 --context 1024 --steps 30 \
  --warmup 5 --csv "$LOGS/bench-8b.csv"
run capture-1b 40 90 python3 -m cli capture llama-3.2-1b --fuse --buckets 1,8,16,32 --max-cache-len 1024 --plan "$LOGS/1b.yaml"
[ -f "$LOGS/1b.yaml" ] && run verify-1b 40 90 python3 -m cli verify --plan "$LOGS/1b.yaml" --steps 8
run bench-1b 40 120 python3 -m cli bench llama-3.2-1b --compare fused --buckets 1,8,16,32 --context 16384 --steps 30 \
  --warmup 5 --csv "$LOGS/bench-1b.csv"
echo "== bench"
for csv in "$LOGS"/bench-*.csv; do
  [ -f "$csv" ] && python3 - "$csv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["kind"] == "step":
        print(f"{sys.argv[1][-10:-4]} {r['contender']} batch {r['bucket']}: {float(r['median_ms']):.3f} ms ({float(r['median_ms']) / float(r['floor_ms']):.3f}x floor)")
PY
done
tar czf "$FINAL/skinny-logs.tgz" -C "$LOGS" --exclude inductor-cache --exclude '*.yaml' --exclude '*.inductor' . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
